//! Events of a per-session upstream: they concern exactly one downstream
//! session, so they go to that session and nowhere else.

use std::sync::{Arc, Weak};

use rmcp::model::{ResourceUpdatedNotificationParam, ServerNotification};

use super::SessionState;
use crate::{
    catalog::MountCatalog,
    gateway::notify_list_changed,
    naming::MountName,
    upstream::{
        discovery::{self, Refreshed},
        ListKind, UpstreamEvents,
    },
};

pub(crate) struct PerSessionEvents {
    state: Weak<SessionState>,
    mount: MountName,
}

impl PerSessionEvents {
    pub(crate) fn new(state: Weak<SessionState>, mount: MountName) -> Self {
        Self { state, mount }
    }
}

impl UpstreamEvents for PerSessionEvents {
    /// A network's blip must not lose the client's upstream state.
    fn ends_when_unreachable(&self) -> bool {
        false
    }

    /// This session's upstream now lists something else than the shared
    /// view: read its lists into the session's overlay, then tell the client.
    fn list_changed(&self, kind: ListKind) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mount_name = self.mount.clone();
        let key = (mount_name.clone(), kind);
        if !state.refreshes.start(&key) {
            return;
        }
        drop(state);
        // The session is held for one refresh at a time, never across the
        // waits between them: a session that ends meanwhile goes (its
        // upstream closed, its places given back), and the loop with it.
        let session = self.state.clone();
        tokio::spawn(async move {
            let live = || session.upgrade().filter(|state| !state.quick_calls_ended());
            while let Some(started) = live().map(|state| state.refreshes.pass_starts(&key)) {
                let refreshed = discovery::refresh_retrying(|| async {
                    match live() {
                        Some(state) => refresh_overlay(&state, &mount_name, kind).await,
                        None => Refreshed::Moot,
                    }
                })
                .await;
                let Some(state) = live() else { break };
                state.refreshes.pass_ended(&key, started);
                if refreshed == Refreshed::Moot {
                    // Nothing to refresh on any more: let the key go (what
                    // was asked meanwhile was about the same upstream).
                    while state.refreshes.again(&key) {}
                    break;
                }
                if !state.refreshes.again(&key) {
                    break;
                }
                let pause = (refreshed == Refreshed::Unchanged)
                    .then(|| state.refreshes.pause(&key, discovery::UNCHANGED_PAUSE));
                drop(state);
                if let Some(pause) = pause {
                    pause.await;
                }
            }
        });
    }

    /// Always this one session (a per-session upstream keeps it awake).
    fn tell_session(&self, _session: u64, notification: ServerNotification) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        if let Some(gateway) = state.gateway.upgrade() {
            gateway.sessions().tell(state.key, notification);
        }
    }

    fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let Some(gateway) = state.gateway.upgrade() else {
            return;
        };
        // Under the URI the session subscribed with: it may have done so
        // under a namespace a reload has since changed.
        let uris = gateway
            .sessions()
            .subscribed_as(state.key, &self.mount, &params.uri);
        if uris.is_empty() {
            return;
        }
        let Some(peer) = state.peer() else {
            return;
        };
        tokio::spawn(async move {
            for uri in uris {
                let mut updated = ResourceUpdatedNotificationParam::new(uri.to_string());
                updated.meta = params.meta.clone();
                if let Err(error) = peer.notify_resource_updated(updated).await {
                    tracing::debug!(%error, "could not relay resources/updated");
                }
            }
        });
    }
}

/// Reads the lists of a session's own upstream into its overlay after that
/// upstream announced a change, then tells the session.
async fn refresh_overlay(
    state: &Arc<SessionState>,
    mount_name: &MountName,
    kind: ListKind,
) -> Refreshed {
    let Some(gateway) = state.gateway.upgrade() else {
        return Refreshed::Moot;
    };
    let Some(mount) = gateway.mount(mount_name) else {
        return Refreshed::Moot;
    };
    // Only the upstream open now (or opening): a refresh never opens one (a
    // server that announces and then dies would otherwise be restarted,
    // again and again, with no client asking); a new one starts from the
    // shared lists anyway.
    let Some(upstream) = state.open_or_opening_upstream(mount_name).await else {
        return Refreshed::Moot;
    };
    // An upstream of the mount a reload replaced (still closing) announces
    // the old server's lists: not this mount's.
    if !state.upstream_is_of(&mount) {
        return Refreshed::Moot;
    }
    let fresh = match discovery::refresh_within(&upstream, kind, mount.list_limits()).await {
        Ok(fresh) => fresh,
        Err(error) => {
            tracing::warn!(mount = %mount_name, session = state.key, %error, "per-session refresh failed");
            return match upstream.is_alive() {
                true => Refreshed::Failed,
                false => Refreshed::Moot,
            };
        }
    };
    // Merged under the lock into the overlay as it is now: another list's
    // refresh may have finished meanwhile. A list as the session already
    // sees it changes nothing (some servers announce on every call): no
    // overlay rebuilt, no cursor made stale, nobody told.
    let changed = state.update_overlay(&mount, &upstream, |current| {
        let mut catalog = current.cloned().unwrap_or_else(|| {
            MountCatalog::clone(&mount.catalog_now(mount.serving_profile(state.profile())))
        });
        if !discovery::differs(&catalog, &fresh, kind) {
            return None;
        }
        discovery::replace_kind(&mut catalog, kind, fresh);
        // Its `tools/list` must then keep `execution`, as for a mount's
        // own catalog (see `TaskToolsListed`).
        if !catalog.tool_execution.is_empty() {
            gateway.task_tools().saw_one();
        }
        Some(catalog)
    });
    if !changed {
        tracing::debug!(mount = %mount_name, session = state.key, ?kind, "list_changed, but the list is as it was");
        return Refreshed::Unchanged;
    }
    if let Some(peer) = state.peer() {
        notify_list_changed(peer.clone(), kind).await;
    }
    Refreshed::Done
}
