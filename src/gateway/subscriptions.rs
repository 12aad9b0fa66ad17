//! The resource subscriptions a shared mount's upstream session holds, kept
//! in step with what downstream sessions want.
//!
//! Sessions record what they are subscribed to in the [`SessionRegistry`]
//! (by client-visible URI, with the route to the upstream's own). A shared
//! upstream is subscribed once per URI however many sessions want it, and
//! this is the one place that tells it: when the first session subscribes,
//! when the last one goes (by unsubscribing or by ending), and whenever the
//! mount has a new upstream session (a restart, or the first start of a
//! mount a reload built), which holds nothing of what the one before held.
//!
//! One mount's changes are made one at a time, registry and upstream
//! together, so a subscribe racing an unsubscribe cannot leave a session
//! waiting for updates from an upstream that was told to stop. Upstream
//! calls are bounded by the mount's request timeout, and so is the wait
//! for the mount's turn; a renewal stops at its first timeout: a hung
//! upstream holds the others up for about that long, not once per URI.

use std::{
    collections::HashSet,
    sync::{Arc, Weak},
    time::Duration,
};

use rmcp::{
    model::{RequestMetaObject, SubscribeRequestParams, UnsubscribeRequestParams},
    ServiceError,
};

use super::{SessionKey, SessionRegistry};
use crate::{catalog::Route, naming::MountName, upstream::UpstreamSession};

/// What a shared mount's upstream session is subscribed to.
#[derive(Default)]
pub struct UpstreamSubscriptions {
    /// Held across the upstream calls: see the module doc.
    held: tokio::sync::Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// The upstream session `uris` are held on.
    on: Weak<UpstreamSession>,
    /// The upstream's own URIs.
    uris: HashSet<String>,
}

impl Held {
    /// The URIs held on `session`: none when they were held on another
    /// one. `None` when `session` has ended: the request will fail, and
    /// the mount's next session, which may already be live, must not lose
    /// what it holds to a late caller of the old one.
    fn on(&mut self, session: &Arc<UpstreamSession>) -> Option<&mut HashSet<String>> {
        if !std::ptr::eq(self.on.as_ptr(), Arc::as_ptr(session)) {
            if !session.is_alive() {
                return None;
            }
            self.on = Arc::downgrade(session);
            self.uris.clear();
        }
        Some(&mut self.uris)
    }
}

/// Why an upstream subscription call failed.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error(transparent)]
    Upstream(#[from] ServiceError),
    #[error("the upstream did not answer within {}", humantime::format_duration(*.0))]
    TimedOut(Duration),
    #[error("this session is already subscribed to {} resources, the most one may hold; unsubscribe from some first", super::sessions::MAX_SUBSCRIPTIONS_PER_SESSION)]
    TooMany,
    #[error("the session has ended")]
    SessionEnded,
}

impl UpstreamSubscriptions {
    /// Session `key` subscribes to `uri` (client-visible, leading to
    /// `route`) on `upstream`; the upstream is told unless it already
    /// holds the URI. On failure the session is not subscribed.
    #[allow(clippy::too_many_arguments)]
    pub async fn subscribe(
        &self,
        registry: &SessionRegistry,
        key: SessionKey,
        uri: &str,
        route: &Route,
        upstream: &Arc<UpstreamSession>,
        meta: Option<RequestMetaObject>,
        timeout: Duration,
    ) -> Result<(), SubscriptionError> {
        let mut held = one_at_a_time(&self.held, timeout).await?;
        let Some(uris) = held.on(upstream) else {
            return Err(ServiceError::TransportClosed.into());
        };
        registry.subscribe(key, uri, route)?;
        if uris.contains(&*route.original) {
            return Ok(());
        }
        let mut params = SubscribeRequestParams::new(route.original.to_string());
        params.meta = meta;
        match bounded(upstream, timeout, upstream.peer().subscribe(params)).await {
            Ok(()) => {
                uris.insert(route.original.to_string());
                Ok(())
            }
            Err(error) => {
                registry.unsubscribe(key, uri);
                Err(error)
            }
        }
    }

    /// Session `key` unsubscribes from `uri`; the upstream session holding
    /// it is told when no session wants the URI any more. The session is
    /// unsubscribed whatever the upstream answers, and at once when no
    /// upstream session is live (the mount restarting or down): the one
    /// that held the URI ended with it, and the next is subscribed only to
    /// what sessions want then.
    pub async fn unsubscribe(
        &self,
        registry: &SessionRegistry,
        key: SessionKey,
        uri: &str,
        meta: Option<RequestMetaObject>,
        timeout: Duration,
    ) -> Result<(), SubscriptionError> {
        let mut held = one_at_a_time(&self.held, timeout).await?;
        let Some(route) = registry.unsubscribe(key, uri) else {
            return Ok(());
        };
        let Some(upstream) = held.on.upgrade().filter(|upstream| upstream.is_alive()) else {
            return Ok(());
        };
        let_go(&mut held, registry, &route, &upstream, meta, timeout).await
    }

    /// A session subscribed to `original` ended (it is no longer in the
    /// registry): the upstream is told if no other session wants it.
    pub async fn release(
        &self,
        registry: &SessionRegistry,
        route: &Route,
        upstream: &Arc<UpstreamSession>,
        timeout: Duration,
    ) {
        let answer = match one_at_a_time(&self.held, timeout).await {
            Ok(mut held) => let_go(&mut held, registry, route, upstream, None, timeout).await,
            Err(error) => Err(error),
        };
        if let Err(error) = answer {
            tracing::debug!(mount = %route.mount, uri = %route.original, error = %crate::upstream::http_client::with_causes(&error), "could not unsubscribe after the last subscriber ended");
        }
    }

    /// `upstream` is the mount's new session: subscribes it to every URI
    /// of `mount` a session wants.
    pub async fn renew(
        &self,
        registry: &SessionRegistry,
        mount: &MountName,
        upstream: &Arc<UpstreamSession>,
        timeout: Duration,
    ) {
        // A new session's first wait: whatever holds the lock is about the
        // session before, and gives it up within its own timeout.
        let mut held = self.held.lock().await;
        let Some(uris) = held.on(upstream) else {
            return;
        };
        let wanted = registry.wanted_on(mount);
        let count = wanted.len();
        for (renewed, original) in wanted.into_iter().enumerate() {
            if uris.contains(&original) {
                continue;
            }
            let params = SubscribeRequestParams::new(original.clone());
            match bounded(upstream, timeout, upstream.peer().subscribe(params)).await {
                Ok(()) => {
                    uris.insert(original);
                }
                // Each of the rest would wait as long, holding every
                // subscribe and unsubscribe to the mount meanwhile; the
                // check that timeout started restarts a dead upstream,
                // and its next session renews them all again.
                Err(error @ SubscriptionError::TimedOut(_)) => {
                    tracing::warn!(%mount, uri = %original, not_renewed = count - renewed, error = %error, "could not renew subscriptions on a new upstream session");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%mount, uri = %original, error = %crate::upstream::http_client::with_causes(&error), "could not renew a subscription on a new upstream session");
                }
            }
        }
    }
}

/// A session no longer wants `route` (it is out of the registry): the
/// upstream is told, if it holds the URI and no other session wants it.
async fn let_go(
    held: &mut Held,
    registry: &SessionRegistry,
    route: &Route,
    upstream: &Arc<UpstreamSession>,
    meta: Option<RequestMetaObject>,
    timeout: Duration,
) -> Result<(), SubscriptionError> {
    // Nothing is held on an ended session.
    let Some(uris) = held.on(upstream) else {
        return Ok(());
    };
    if registry.wants(&route.mount, &route.original) || !uris.remove(&*route.original) {
        return Ok(());
    }
    let mut params = UnsubscribeRequestParams::new(route.original.to_string());
    params.meta = meta;
    bounded(upstream, timeout, upstream.peer().unsubscribe(params)).await
}

/// `call` to `upstream`, within `timeout` (an upstream's answer to a
/// subscription or a log level is never waited for longer than a
/// request's). Timed out, the upstream is checked as after any request
/// that timed out: one that answers nothing, not even a ping, is ended.
pub(crate) async fn bounded<T>(
    upstream: &UpstreamSession,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, SubscriptionError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => {
            upstream.check_alive();
            Err(SubscriptionError::TimedOut(timeout))
        }
    }
}

/// The mount's changes, one at a time: waited for no longer than an
/// upstream call may take (a renewal holding them is cut short on its
/// first timeout).
async fn one_at_a_time(
    held: &tokio::sync::Mutex<Held>,
    timeout: Duration,
) -> Result<tokio::sync::MutexGuard<'_, Held>, SubscriptionError> {
    tokio::time::timeout(timeout, held.lock())
        .await
        .map_err(|_| SubscriptionError::TimedOut(timeout))
}
