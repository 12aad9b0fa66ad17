//! Applying a new, already validated config to the running gateway.
//!
//! Mounts are compared by name: a mount whose table is unchanged keeps
//! running untouched (its sessions, in-flight calls and per-session
//! upstreams go on), and so does one whose table changed only in tuning
//! (its `timeouts`, its `max_upstream_sessions`) or in which tools it
//! offers (`include_tools`, `exclude_tools`: sessions are told the tools
//! list changed), which applies at once;
//! an added one starts; a removed one is retired (the requests already
//! sent on it get `server.shutdown_grace` to be answered, in the
//! background, then its supervisors stop, every upstream session opened
//! for it closes and its children are reaped); a changed one is retired
//! and started anew, listing
//! the old one's catalog until its own discovery (so its names stay
//! routable meanwhile); a stdio one starts its children once the old ones
//! have exited. The new mount list and config are swapped in
//! atomically, then every downstream session is told its lists changed.
//!
//! `[timeouts]`, `[supervision]` and `[limits]` apply at once to every
//! mount (they are read live); `[endpoints]` at once to every session
//! (each session's catalog reads its endpoint live), which is told its
//! lists changed. `[server]`, `[telemetry]` and `[admin]` are
//! bound into the listener and the log pipeline at start: a change there is
//! logged as needing a restart, and the running values are kept.

use std::sync::Arc;

use super::{build_mount, lock, sessions::MountNow, Gateway, Mount};
use crate::{config::Config, naming::MountName, upstream::ListKind};

/// What a reload did, for the log and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadOutcome {
    pub added: Vec<MountName>,
    pub removed: Vec<MountName>,
    pub changed: Vec<MountName>,
    /// Kept running with new timeouts or limits of their own.
    pub retuned: Vec<MountName>,
    pub unchanged: Vec<MountName>,
    /// Sections applied to every mount as they are (`timeouts`,
    /// `supervision`, `limits`) that changed.
    pub applied: Vec<&'static str>,
    /// Sections whose changes need a restart and were not applied, each
    /// with the keys that changed (empty if none of those named here).
    pub needs_restart: Vec<(&'static str, Vec<&'static str>)>,
}

/// The names of the `fields` whose values differ between `old` and `new`.
macro_rules! changed_keys {
    ($old:expr, $new:expr, $($field:ident),+ $(,)?) => {{
        let mut keys = Vec::new();
        $(
            if $old.$field != $new.$field {
                keys.push(stringify!($field));
            }
        )+
        keys
    }};
}

impl ReloadOutcome {
    pub fn changed_anything(&self) -> bool {
        !(self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty())
    }
}

impl Gateway {
    /// Applies `new` (see the module doc). Returns once the new mounts
    /// serve; the retired ones close in the background.
    pub async fn reload(&self, mut new: Config) -> ReloadOutcome {
        let _one_at_a_time = self.reloading.lock().await;
        let old = self.config();
        let mut outcome = ReloadOutcome::default();
        if new.server != old.server {
            let keys = changed_keys!(
                old.server,
                new.server,
                listen,
                path,
                separator,
                fit_tool_names,
                tool_name_max_chars,
                allowed_hosts,
                allowed_origins,
                session_idle_timeout,
                session_hibernate_after,
                shutdown_grace,
                request_read_timeout,
                sse_path,
            );
            outcome.needs_restart.push(("server", keys));
            new.server = old.server.clone();
        }
        if new.telemetry != old.telemetry {
            let keys = changed_keys!(
                old.telemetry,
                new.telemetry,
                log_format,
                log_level,
                otlp_endpoint,
                otlp_json,
                service_name,
            );
            outcome.needs_restart.push(("telemetry", keys));
            new.telemetry = old.telemetry.clone();
        }
        if new.admin != old.admin {
            let keys = changed_keys!(old.admin, new.admin, enabled, listen);
            outcome.needs_restart.push(("admin", keys));
            new.admin = old.admin.clone();
        }

        if new.timeouts != old.timeouts {
            outcome.applied.push("timeouts");
        }
        if new.supervision != old.supervision {
            outcome.applied.push("supervision");
        }
        if new.limits != old.limits {
            outcome.applied.push("limits");
        }
        // Read live by every session's catalog: the lists of the sessions
        // of an endpoint added, changed or removed change.
        let endpoints_changed: std::collections::HashSet<Arc<str>> = new
            .endpoints
            .iter()
            .chain(&old.endpoints)
            .filter(|endpoint| new.endpoint(&endpoint.name) != old.endpoint(&endpoint.name))
            .map(|endpoint| endpoint.name.clone())
            .collect();
        if !endpoints_changed.is_empty() {
            outcome.applied.push("endpoints");
        }

        let running = self.mounts();
        let mut next: Vec<Arc<Mount>> = Vec::with_capacity(new.mounts.len());
        let mut retired: Vec<Arc<Mount>> = Vec::new();
        let mut started: Vec<Arc<Mount>> = Vec::new();
        // A running mount's `include_tools` / `exclude_tools` changed: its
        // tools list changes though its upstream does not.
        let mut offers_other_tools = false;
        for config in &new.mounts {
            let current = running
                .iter()
                .find(|mount| mount.config.name == config.name);
            match current {
                Some(mount) if mount.config.same_upstream(config) => {
                    if *mount.tool_filter() != config.tools {
                        offers_other_tools = true;
                    }
                    match mount.retune(config) {
                        true => outcome.retuned.push(config.name.clone()),
                        false => outcome.unchanged.push(config.name.clone()),
                    }
                    next.push(mount.clone());
                }
                other => {
                    let mount = Arc::new(build_mount(&self.weak, &self.config, config.clone()));
                    match other {
                        Some(replaced) => {
                            outcome.changed.push(config.name.clone());
                            mount.inherit_catalog(replaced);
                            retired.push(replaced.clone());
                        }
                        None => outcome.added.push(config.name.clone()),
                    }
                    started.push(mount.clone());
                    next.push(mount);
                }
            }
        }
        for mount in running.iter() {
            if !new
                .mounts
                .iter()
                .any(|config| config.name == mount.config.name)
            {
                outcome.removed.push(mount.config.name.clone());
                retired.push(mount.clone());
            }
        }

        // Document order decides who wins a name two pass-through mounts
        // offer: a reload that only reorders them changes what a name
        // reaches, which clients must be told like any other change.
        let reordered = !running
            .iter()
            .map(|mount| &mount.config.name)
            .eq(next.iter().map(|mount| &mount.config.name));

        // A new mount's children start once those of every stdio mount
        // of its name still retiring have exited: the one it replaces,
        // one an earlier reload retired that still lets its requests
        // finish, one removed and now added back. Set before the swap: a
        // call may open a per-session child as soon as the mount is seen.
        {
            let mut retiring = lock(&self.stdio_retiring);
            for mount in retired.iter().filter(|mount| mount.runs_children()) {
                retiring
                    .entry(mount.config.name.clone())
                    .or_default()
                    .push(mount.closed_token());
            }
            retiring.retain(|_, closed| {
                closed.retain(|token| !token.is_cancelled());
                !closed.is_empty()
            });
            for mount in &started {
                let predecessors = retiring.get(&mount.config.name).cloned();
                mount.follow(predecessors.unwrap_or_default());
            }
        }
        // Readiness is latched by asking: asked now, a gateway whose mounts
        // have all started stays ready while the new ones start, whether
        // or not a probe asked before.
        self.is_ready();
        // Swap first, so that from here every lookup by name finds the new
        // mount; then start the new ones and retire the old.
        self.config.store(Arc::new(new));
        self.mounts.store(Arc::new(next));
        self.catalog_changed();
        // Before the new mounts start: their first sessions subscribe to
        // what sessions want of them, moved subscriptions included. Only
        // to those: a running mount's upstream would never be told.
        if outcome.changed_anything() || reordered || !endpoints_changed.is_empty() {
            // Where a URI leads for the sessions of each endpoint (one
            // the reload removed leads nowhere).
            let full = crate::upstream::ClientProfile::FULL;
            let main = self.catalog(full);
            let endpoints: std::collections::HashMap<Arc<str>, _> = self
                .config()
                .endpoints
                .iter()
                .map(|endpoint| {
                    let name = endpoint.name.clone();
                    (name.clone(), self.endpoint_catalog(full, Some(&name)))
                })
                .collect();
            let rerouted = self.sessions.reroute(
                |endpoint, uri| match endpoint {
                    None => main.resolve_uri_claimed(uri),
                    Some(name) => endpoints.get(name)?.resolve_uri_claimed(uri),
                },
                |name| {
                    let shared = |mount: &Arc<Mount>| {
                        mount.config.isolation == crate::config::Isolation::Shared
                    };
                    match self.mount(name) {
                        None => MountNow::Removed,
                        Some(mount)
                            if started.iter().any(|started| Arc::ptr_eq(started, &mount)) =>
                        {
                            MountNow::Starting {
                                shared: shared(&mount),
                            }
                        }
                        Some(mount) => MountNow::Running {
                            shared: shared(&mount),
                        },
                    }
                },
                |endpoint, mount| self.endpoint_serves(endpoint, mount),
            );
            if rerouted.moved + rerouted.ended > 0 {
                tracing::info!(
                    moved = rerouted.moved,
                    ended = rerouted.ended,
                    "subscriptions whose URIs now lead elsewhere, or to a removed mount, moved or ended"
                );
            }
            if let Some(gateway) = self.weak.upgrade() {
                gateway.let_go_of(rerouted.let_go);
            }
        }
        for mount in &started {
            mount.start();
        }
        // Per-session upstreams of mounts taken off an endpoint are closed
        // (those asleep hold none).
        if !endpoints_changed.is_empty() {
            for state in self.hibernation.all_awake() {
                if state
                    .endpoint()
                    .is_some_and(|name| endpoints_changed.contains(name))
                {
                    state.let_go_of_unseen_upstreams(self);
                }
            }
        }
        if outcome.changed_anything() || reordered {
            for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                self.sessions.notify_list_changed(kind, |_, _| true);
            }
        } else if !endpoints_changed.is_empty() || offers_other_tools {
            let endpoint_changed = |endpoint: Option<&str>| {
                endpoint.is_some_and(|name| endpoints_changed.contains(name))
            };
            for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                self.sessions.notify_list_changed(kind, |_, endpoint| {
                    endpoint_changed(endpoint) || (offers_other_tools && kind == ListKind::Tools)
                });
            }
        }
        // In the background: the reload is done, and another may follow,
        // while the old mounts let their requests in flight finish (at
        // most `shutdown_grace`) and close, their per-session upstreams
        // too (bounded), which is what a successor waits for.
        let grace = self.config().server.shutdown_grace;
        for mount in retired {
            self.retiring.spawn(async move {
                mount.let_calls_finish(grace).await;
                mount.retire().await;
            });
        }
        outcome
    }
}
