//! The running gateway: mounts, the merged discovery cache, and the
//! registry of downstream sessions.
//!
//! [`Gateway::new`] builds everything from a [`Config`] without touching the
//! network; [`Gateway::start`] then discovers every mount in the background,
//! each on its own task, so a slow or dead upstream delays only its own
//! tools. The merged catalog is rebuilt whenever one mount's catalog changes
//! and swapped in atomically; readers never lock.

mod calls_in_flight;
mod live_config;
mod mount;
mod outbox;
mod reload;
mod sessions;
mod subscriptions;
mod supervisor;
pub mod watch;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, Weak,
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use rmcp::model::ResourceUpdatedNotificationParam;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use calls_in_flight::CallInFlight;
pub use live_config::LiveConfig;
pub use mount::{EventsFactory, Mount, MountPhase, MountStatus, ProfileSession, UpstreamPermit};
pub use reload::ReloadOutcome;
pub use sessions::{
    notify_list_changed, SessionKey, SessionRegistry, SessionTicket, MAX_SUBSCRIPTIONS_PER_SESSION,
    SHARED_LOG_LEVEL,
};
pub(crate) use subscriptions::bounded;
pub use subscriptions::SubscriptionError;
pub use supervisor::{restart_delay, STABLE_AFTER};

use crate::{
    catalog::{MergedCatalog, MountCatalog, MountView, Route},
    coalesce::Coalescer,
    config::{Config, MountConfig},
    downstream::{
        hibernation::Hibernation, request_streams::RequestStreams, tasks::TaskToolsListed,
        SessionState,
    },
    naming::MountName,
    upstream::{
        discovery::{self, Refreshed},
        ClientProfile, ListKind, UpstreamEvents, UpstreamSession,
    },
};

/// Whose merged catalog: the sessions of a client profile on an endpoint
/// (`None`: the main one, every mount).
type CatalogKey = (ClientProfile, Option<Arc<str>>);

pub struct Gateway {
    /// The config in force; reload swaps it.
    config: Arc<LiveConfig>,
    /// In config order, which decides name collisions; reload swaps it.
    mounts: ArcSwap<Vec<Arc<Mount>>>,
    /// Merged catalogs, built on first use after a change.
    catalogs: Mutex<foldhash::HashMap<CatalogKey, Arc<MergedCatalog>>>,
    /// The last generation given to a merged catalog: each build takes
    /// the next one, so a cursor (which carries it) is good only for the
    /// catalog that issued it, a session's own included.
    generation: AtomicU64,
    /// The generation taken by the last change: a catalog built from
    /// lists read before it is served once but not kept.
    changed_at: AtomicU64,
    sessions: SessionRegistry,
    /// Idle downstream sessions asleep.
    hibernation: Arc<Hibernation>,
    /// Each downstream request's queue for messages related to it.
    request_streams: Arc<RequestStreams>,
    /// Set once a catalog lists a tool with an `execution`.
    task_tools: Arc<TaskToolsListed>,
    /// Tracks live downstream sessions (each holds a token) and the tasks
    /// closing their per-session upstreams, so shutdown can wait for both.
    session_tasks: TaskTracker,
    started: std::time::Instant,
    /// One list refresh at a time per mount, profile and list.
    refreshes: Coalescer<(MountName, ClientProfile, ListKind)>,
    /// Downstream POSTs in flight until their response is sent (each holds
    /// a token), so shutdown can let them finish before ending sessions.
    requests: TaskTracker,
    /// Latched by the first `is_ready` that found every mount started.
    became_ready: std::sync::atomic::AtomicBool,
    /// Set once shutdown begins: new sessions and requests are refused.
    draining: std::sync::atomic::AtomicBool,
    /// Cancelled when shutdown's grace is over: each request still in
    /// flight is then answered with an error (`downstream/admission.rs`).
    cut_off: CancellationToken,
    /// Serializes reloads (a file change and a SIGHUP at once).
    reloading: tokio::sync::Mutex<()>,
    /// The mounts reloads removed or replaced, each letting its requests
    /// in flight finish, then closing (see `reload.rs`); shutdown waits
    /// for them as for the running mounts.
    retiring: TaskTracker,
    /// The `closed` tokens of the stdio mounts reloads retired, by name,
    /// until they close: a mount a reload builds under that name starts
    /// its children after theirs have exited (`Mount::follow`).
    stdio_retiring: Mutex<HashMap<MountName, Vec<CancellationToken>>>,
    weak: Weak<Gateway>,
}

/// After requests in flight had their `shutdown_grace` and were answered
/// with an error: how long writing those answers may take. A client not
/// reading its stream is not waited for longer.
const CUT_OFF_ANSWERS_WAIT: Duration = Duration::from_secs(1);

/// After requests in flight had their `shutdown_grace`: how long ending
/// the downstream sessions and closing their per-session upstreams may take
/// before the process exits anyway (stdio children are then killed with
/// their process group on drop). Closing a child is EOF, then SIGTERM, then
/// SIGKILL, `upstream::child::EXIT_WAIT` apart (6 s, 9 s if its stdin is
/// blocked): a child that ignores the first two is still being closed when
/// this runs out, and dies with its group as the process exits. The shared
/// mounts are closed after this, with no limit of their own (README,
/// "Operating": the whole teardown's worst case).
pub const TEARDOWN_LIMIT: Duration = Duration::from_secs(5);

/// How long a list call waits for a per-session mount's first discovery
/// for a new client profile before answering with what is known.
pub const PROFILE_DISCOVERY_WAIT: Duration = Duration::from_secs(10);

/// How long a list call waits for an upstream's announced change to be
/// read before answering with the list as it was: an upstream slow to
/// list must not hold every listing.
pub const LIST_SETTLE_LIMIT: Duration = Duration::from_secs(2);

impl Gateway {
    pub fn new(config: Config) -> Arc<Self> {
        Arc::new_cyclic(|weak: &Weak<Gateway>| {
            let hibernation = Arc::new(Hibernation::new(
                config.server.session_hibernate_after,
                config.server.session_idle_timeout,
            ));
            let live = LiveConfig::new(config);
            let mounts = live
                .load()
                .mounts
                .iter()
                .map(|mount| Arc::new(build_mount(weak, &live, mount.clone())))
                .collect();
            Gateway {
                config: live,
                mounts: ArcSwap::from_pointee(mounts),
                catalogs: Mutex::default(),
                generation: AtomicU64::new(1),
                changed_at: AtomicU64::new(0),
                sessions: SessionRegistry::default(),
                hibernation,
                request_streams: Arc::default(),
                task_tools: Arc::default(),
                session_tasks: TaskTracker::new(),
                started: std::time::Instant::now(),
                refreshes: Coalescer::default(),
                requests: TaskTracker::new(),
                draining: std::sync::atomic::AtomicBool::new(false),
                cut_off: CancellationToken::new(),
                became_ready: std::sync::atomic::AtomicBool::new(false),
                reloading: tokio::sync::Mutex::new(()),
                retiring: TaskTracker::new(),
                stdio_retiring: Mutex::default(),
                weak: weak.clone(),
            }
        })
    }

    /// Starts every mount's supervisor; each discovers in the background.
    pub fn start(self: &Arc<Self>) {
        for mount in self.mounts().iter() {
            mount.start();
        }
    }

    /// How long this gateway has been running.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// The config in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// The mounts in force now, in config order.
    pub fn mounts(&self) -> Arc<Vec<Arc<Mount>>> {
        self.mounts.load_full()
    }

    /// The client header names some mount forwards now (`forward_headers`),
    /// each given to `take`. Read without touching a shared counter: every
    /// request of every session asks.
    pub fn each_forwarded_client_header(&self, mut take: impl FnMut(&str)) {
        for mount in self.mounts.load().iter() {
            for client_name in mount.config.forward_headers.values() {
                take(client_name);
            }
        }
    }

    pub fn mount(&self, name: &MountName) -> Option<Arc<Mount>> {
        self.mounts
            .load()
            .iter()
            .find(|mount| &mount.config.name == name)
            .cloned()
    }

    pub fn request_streams(&self) -> &Arc<RequestStreams> {
        &self.request_streams
    }

    pub fn task_tools(&self) -> &Arc<TaskToolsListed> {
        &self.task_tools
    }

    pub fn sessions(&self) -> &SessionRegistry {
        &self.sessions
    }

    /// A downstream session ended: it is forgotten, and the shared
    /// upstreams stop watching what only it was subscribed to.
    pub fn session_ended(self: &Arc<Self>, key: SessionKey) {
        self.let_go_of(self.sessions.unregister(key));
    }

    /// Subscriptions to `routes` have ended: the shared upstreams holding
    /// them are told, where no other session wants them (in the
    /// background).
    pub(super) fn let_go_of(self: &Arc<Self>, routes: Vec<Route>) {
        if routes.is_empty() {
            return;
        }
        // Sessions end in drops; at the process's very end there may be no
        // runtime left, and no upstream to tell either.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let gateway = self.clone();
        runtime.spawn(async move {
            for route in routes {
                let Some(mount) = gateway.mount(&route.mount) else {
                    continue;
                };
                // A per-session upstream ends with its session; a shared one
                // that is not live holds nothing (its next session is
                // subscribed to what is wanted then).
                let shared = mount.config.isolation == crate::config::Isolation::Shared;
                let Some(upstream) = mount.live_shared_session().filter(|_| shared) else {
                    continue;
                };
                let timeout = mount.timeouts().request;
                mount
                    .subscriptions
                    .release(&gateway.sessions, &route, &upstream, timeout)
                    .await;
            }
        });
    }

    /// True once every mount's first start has finished, either way, and
    /// from then on: a mount added by a reload is still starting for a
    /// while, and a gateway serving every other mount must not drop out of
    /// its load balancer meanwhile (on every replica at once).
    pub fn is_ready(&self) -> bool {
        if self.became_ready.load(Ordering::Acquire) {
            return true;
        }
        let ready = self
            .mounts()
            .iter()
            .all(|mount| mount.status().phase != MountPhase::Starting);
        if ready {
            self.became_ready.store(true, Ordering::Release);
        }
        ready
    }

    /// Whether every per-session mount `endpoint` serves knows its lists
    /// for `profile`, or lists what a mount a reload replaced knew while
    /// its own discovery, started, runs (`prepare` would neither wait nor
    /// start anything).
    pub fn is_prepared(&self, profile: ClientProfile, endpoint: Option<&str>) -> bool {
        let mounts = self.mounts();
        let prepared = self.served(endpoint, &mounts).all(|mount| {
            let serving = mount.serving_profile(profile);
            serving == ClientProfile::FULL
                || mount.is_discovered(serving)
                || (mount.has_inherited(serving) && mount.discovery_started(serving))
        });
        prepared
    }

    /// Makes sure the per-session mounts `endpoint` serves know their
    /// lists for `profile` (bounded wait); a no-op once done.
    pub async fn prepare(&self, profile: ClientProfile, endpoint: Option<&str>) {
        let mounts = self.mounts();
        let pending: Vec<_> = self
            .served(endpoint, &mounts)
            .filter(|mount| {
                let serving = mount.serving_profile(profile);
                if serving == ClientProfile::FULL || mount.is_discovered(serving) {
                    return false;
                }
                if mount.has_inherited(serving) {
                    // What the mount a reload replaced knew is listed
                    // meanwhile: its discovery starts, unawaited, and
                    // tells what differs.
                    mount.profile_session(serving);
                    return false;
                }
                true
            })
            .map(|mount| async move {
                let serving = mount.serving_profile(profile);
                match tokio::time::timeout(PROFILE_DISCOVERY_WAIT, mount.discover(serving)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(error)) => {
                        tracing::warn!(mount = %mount.config.name, %profile, %error, "discovery for a client profile failed; showing the full list");
                        mount.showed_full_lists(serving);
                        false
                    }
                    Err(_) => {
                        tracing::warn!(mount = %mount.config.name, %profile, "discovery for a client profile is slow; showing the full list meanwhile");
                        mount.showed_full_lists(serving);
                        false
                    }
                }
            })
            .collect();
        if pending.is_empty() {
            return;
        }
        if futures::future::join_all(pending)
            .await
            .into_iter()
            .any(|found| found)
        {
            self.catalog_changed();
        }
    }

    /// The merged catalog of every mount that sessions with `profile` on
    /// the main endpoint see, unless their own per-session upstream
    /// diverged.
    pub fn catalog(&self, profile: ClientProfile) -> Arc<MergedCatalog> {
        self.endpoint_catalog(profile, None)
    }

    /// [`Self::catalog`] for the sessions of `endpoint` (`None`: the main
    /// one): only the mounts it serves.
    pub fn endpoint_catalog(
        &self,
        profile: ClientProfile,
        endpoint: Option<&Arc<str>>,
    ) -> Arc<MergedCatalog> {
        let key = (profile, endpoint.cloned());
        if let Some(catalog) = lock(&self.catalogs).get(&key) {
            return catalog.clone();
        }
        let catalog = Arc::new(self.build_catalog(profile, endpoint, &HashMap::new()));
        let mut catalogs = lock(&self.catalogs);
        if catalog.generation < self.changed_at.load(Ordering::Acquire) {
            // A mount's lists changed while this was built from the old.
            return catalog;
        }
        catalogs.entry(key).or_insert(catalog).clone()
    }

    /// A merged catalog in which some mounts' catalogs are replaced, for a
    /// session (of `endpoint`) whose per-session upstream announced its
    /// own lists.
    pub fn catalog_with(
        &self,
        profile: ClientProfile,
        endpoint: Option<&Arc<str>>,
        overrides: &HashMap<MountName, Arc<MountCatalog>>,
    ) -> MergedCatalog {
        self.build_catalog(profile, endpoint, overrides)
    }

    /// Whether the sessions of `endpoint` (`None`: the main one) see mount
    /// `mount`. An endpoint a reload removed serves none (its sessions go
    /// on, with nothing listed).
    pub fn endpoint_serves(&self, endpoint: Option<&str>, mount: &MountName) -> bool {
        match endpoint {
            None => true,
            Some(name) => self
                .config()
                .endpoint(name)
                .is_some_and(|endpoint| endpoint.serves(mount)),
        }
    }

    /// The mounts of `mounts` (config order kept) that the sessions of
    /// `endpoint` see: [`Self::endpoint_serves`] over a list, the config
    /// read once.
    pub fn served<'a>(
        &self,
        endpoint: Option<&str>,
        mounts: &'a [Arc<Mount>],
    ) -> impl Iterator<Item = &'a Arc<Mount>> + 'a {
        let names: Option<Vec<MountName>> = endpoint.map(|name| {
            self.config()
                .endpoint(name)
                .map(|endpoint| endpoint.mounts.clone())
                .unwrap_or_default()
        });
        mounts.iter().filter(move |mount| {
            names
                .as_ref()
                .is_none_or(|names| names.contains(&mount.config.name))
        })
    }

    fn build_catalog(
        &self,
        profile: ClientProfile,
        endpoint: Option<&Arc<str>>,
        overrides: &HashMap<MountName, Arc<MountCatalog>>,
    ) -> MergedCatalog {
        // Taken before the mounts' lists are read (see `catalog`).
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let endpoint = endpoint.map(|name| name.as_ref());
        let mounts = self.mounts();
        let views: Vec<MountView> = self
            .served(endpoint, &mounts)
            .map(|mount| MountView {
                mount: mount.config.name.clone(),
                namespace: mount.config.namespace.clone(),
                catalog: overrides
                    .get(&mount.config.name)
                    .cloned()
                    .unwrap_or_else(|| mount.catalog_now(mount.serving_profile(profile))),
                tools: mount.tool_filter(),
            })
            .collect();
        let (merged, collisions) =
            MergedCatalog::build(generation, &self.config().server.naming(), &views);
        for collision in collisions {
            tracing::warn!(
                kind = collision.kind,
                name = %collision.name,
                kept = %collision.kept.mount,
                dropped = %collision.dropped.mount,
                "name collision: {collision}"
            );
        }
        merged
    }

    /// Forgets every merged catalog after a mount's catalog changed.
    pub(crate) fn catalog_changed(&self) {
        let mut catalogs = lock(&self.catalogs);
        let changed_at = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.changed_at.store(changed_at, Ordering::Release);
        catalogs.clear();
        drop(catalogs);
        if self
            .mounts()
            .iter()
            .any(|mount| mount.lists_tool_execution())
        {
            self.task_tools.saw_one();
        }
    }

    /// Downstream requests in flight.
    pub fn requests_in_flight(&self) -> &TaskTracker {
        &self.requests
    }

    /// Whether shutdown has begun (new sessions and requests are refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// First step of shutdown: refuse new sessions and requests, and wait
    /// (at most `shutdown_grace`) for requests in flight to be answered.
    pub async fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.requests.close();
        let grace = self.config().server.shutdown_grace;
        let pending = self.requests.len();
        if pending > 0 {
            tracing::info!(pending, ?grace, "waiting for requests in flight");
        }
        if tokio::time::timeout(grace, self.requests.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                pending = self.requests.len(),
                ?grace,
                "requests still in flight after the grace period; ending them"
            );
            // Each is answered with an error: a moment for those answers
            // to be written before the streams close.
            self.cut_off.cancel();
            let _ = tokio::time::timeout(CUT_OFF_ANSWERS_WAIT, self.requests.wait()).await;
        }
    }

    /// Cancelled when shutdown gives up on the requests in flight.
    pub(crate) fn cut_off(&self) -> CancellationToken {
        self.cut_off.clone()
    }

    pub fn hibernation(&self) -> &Arc<Hibernation> {
        &self.hibernation
    }

    /// Where downstream sessions register themselves and spawn the closing
    /// of their per-session upstreams.
    pub fn session_tasks(&self) -> &TaskTracker {
        &self.session_tasks
    }

    /// After the HTTP server stopped: waits (bounded) for the downstream
    /// sessions to end and close their per-session upstreams, then closes
    /// every mount's own sessions.
    pub async fn shutdown(&self) {
        self.hibernation.end_all();
        self.session_tasks.close();
        if tokio::time::timeout(TEARDOWN_LIMIT, self.session_tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(limit = ?TEARDOWN_LIMIT, "sessions still closing; killing what is left");
        }
        let mounts = self.mounts();
        let closing = mounts.iter().map(|mount| mount.close());
        // A mount a reload retired just before is closing too: its
        // requests were answered or cut off like the rest (`drain`).
        self.retiring.close();
        futures::future::join(futures::future::join_all(closing), self.retiring.wait()).await;
    }

    /// Re-reads one list of a mount's profile session after it said the list
    /// changed, then tells the sessions that see that profile's lists.
    /// Reads `kind` of `name`'s lists for `profile` again, after its
    /// upstream announced a change (counted at once, in the caller's
    /// task: a list asked for after it waits for the read).
    fn announce_change(self: &Arc<Self>, name: MountName, profile: ClientProfile, kind: ListKind) {
        let key = (name, profile, kind);
        if !self.refreshes.start(&key) {
            return;
        }
        let gateway = self.clone();
        tokio::spawn(async move { gateway.refresh_mount(&key).await });
    }

    async fn refresh_mount(&self, key: &(MountName, ClientProfile, ListKind)) {
        let (name, profile, kind) = key;
        loop {
            let started = self.refreshes.pass_starts(key);
            let refreshed =
                discovery::refresh_retrying(|| self.refresh_mount_once(name, *profile, *kind))
                    .await;
            self.refreshes.pass_ended(key, started);
            if !self.refreshes.again(key) {
                break;
            }
            if refreshed == Refreshed::Unchanged {
                self.refreshes.pause(key, discovery::UNCHANGED_PAUSE).await;
            }
        }
    }

    /// Waits (bounded, [`LIST_SETTLE_LIMIT`]) until the lists of `kind`
    /// that `state`'s session sees are read again after every change
    /// their upstreams announced so far.
    pub(crate) async fn lists_settled(&self, kind: ListKind, state: &SessionState) {
        if !self.lists_behind(kind, state) {
            return;
        }
        let deadline = tokio::time::Instant::now() + LIST_SETTLE_LIMIT;
        let profile = state.profile();
        let seen = |key: &(MountName, ClientProfile, ListKind)| {
            sees(key, kind, profile) && state.sees_mount(self, &key.0)
        };
        let settled = self.refreshes.settled(seen, deadline).await
            && state
                .list_refreshes()
                .settled(|key| key.1 == kind, deadline)
                .await;
        if !settled {
            tracing::debug!(?kind, "listing before an announced change was read");
        }
    }

    /// Whether an upstream announced a change to lists of `kind` that
    /// `state`'s session sees (of a mount its endpoint serves), not read
    /// yet.
    pub(crate) fn lists_behind(&self, kind: ListKind, state: &SessionState) -> bool {
        let profile = state.profile();
        self.refreshes
            .behind(|key| sees(key, kind, profile) && state.sees_mount(self, &key.0))
            || state.list_refreshes().behind(|key| key.1 == kind)
    }

    async fn refresh_mount_once(
        &self,
        name: &MountName,
        profile: ClientProfile,
        kind: ListKind,
    ) -> Refreshed {
        let Some(mount) = self.mount(name) else {
            return Refreshed::Moot;
        };
        let profile_session = mount.profile_session(profile);
        let Ok(session) = mount.session_for(&profile_session).await else {
            return Refreshed::Moot;
        };
        crate::telemetry::metrics()
            .cache_refreshes
            .get_or_create(&mount.labels())
            .inc();
        let fresh = match discovery::refresh_within(&session, kind, mount.list_limits()).await {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::warn!(mount = %name, %profile, %error, ?kind, "refresh after list_changed failed");
                // An ended session's successor discovers everything anew.
                return match session.is_alive() {
                    true => Refreshed::Failed,
                    false => Refreshed::Moot,
                };
            }
        };
        // A reload may have replaced the mount meanwhile: its successor
        // has lists of its own, which this one's must not overwrite, nor
        // tell sessions about.
        if !self
            .mount(name)
            .is_some_and(|current| Arc::ptr_eq(&current, &mount))
        {
            return Refreshed::Moot;
        }
        // An upstream may announce changes that are none (some do on every
        // call): every session told, every cursor made stale, for nothing.
        let known = profile_session.catalog().unwrap_or_default();
        if !discovery::differs(&known, &fresh, kind) {
            tracing::debug!(mount = %name, %profile, ?kind, "list_changed, but the list is as it was");
            return Refreshed::Unchanged;
        }
        // Only this list is written back: a refresh of another list (or a
        // restart's rediscovery) may have stored its own meanwhile.
        profile_session.update_catalog(|current| {
            let mut catalog = MountCatalog::clone(&current.unwrap_or_default());
            discovery::replace_kind(&mut catalog, kind, fresh.clone());
            catalog
        });
        self.catalog_changed();
        self.notify_mount_changed(&mount, profile, kind);
        Refreshed::Done
    }

    /// Tells the sessions that see `mount`'s lists for `profile` that a list
    /// changed. A change to the full profile reaches, besides its own, the
    /// sessions whose profile has no lists of its own yet (they see the
    /// full ones); not those that have: told before their own discovery
    /// had the change, they listed again and saw the old list. Nor the
    /// sessions of an endpoint that does not serve the mount.
    fn notify_mount_changed(&self, mount: &Mount, profile: ClientProfile, kind: ListKind) {
        self.sessions.notify_list_changed(kind, |client, endpoint| {
            let serving = mount.serving_profile(client);
            (serving == profile
                || (profile == ClientProfile::FULL && mount.shows_full_lists(serving)))
                && self.endpoint_serves(endpoint, &mount.config.name)
        });
    }
}

/// Whether a session of `profile` listing `kind` sees the lists a refresh
/// with `key` reads: the full profile's (shared mounts, and per-session
/// mounts not discovered for `profile` yet) and its own profile's.
fn sees(
    key: &(MountName, ClientProfile, ListKind),
    kind: ListKind,
    profile: ClientProfile,
) -> bool {
    key.2 == kind && (key.1 == ClientProfile::FULL || key.1 == profile)
}

/// Builds a mount whose events reach this gateway.
fn build_mount(gateway: &Weak<Gateway>, live: &Arc<LiveConfig>, config: MountConfig) -> Mount {
    let gateway = gateway.clone();
    let name = config.name.clone();
    let events: EventsFactory = Box::new(move |profile| {
        Arc::new(MountSessionEvents {
            gateway: gateway.clone(),
            mount: name.clone(),
            profile,
        })
    });
    Mount::new(config, live.clone(), events)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Events of a mount's own upstream sessions (one per profile).
struct MountSessionEvents {
    gateway: Weak<Gateway>,
    mount: MountName,
    profile: ClientProfile,
}

impl MountSessionEvents {
    /// The gateway and this mount, if the mount is `shared`: only a shared
    /// mount's session has subscribers (a per-session mount's discovery
    /// sessions are never subscribed).
    fn shared_mount(&self) -> Option<(Arc<Gateway>, Arc<Mount>)> {
        let gateway = self.gateway.upgrade()?;
        let mount = gateway.mount(&self.mount)?;
        (mount.config.isolation == crate::config::Isolation::Shared).then_some((gateway, mount))
    }
}

impl UpstreamEvents for MountSessionEvents {
    fn list_changed(&self, kind: ListKind) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        gateway.announce_change(self.mount.clone(), self.profile, kind);
    }

    fn catalog_replaced(&self, kinds: &[ListKind]) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let Some(mount) = gateway.mount(&self.mount) else {
            return;
        };
        gateway.catalog_changed();
        for kind in kinds {
            gateway.notify_mount_changed(&mount, self.profile, *kind);
        }
    }

    /// A new shared session (a restart, or the first start of a mount a
    /// reload built while sessions were subscribed to it) knows nothing of
    /// the subscriptions the one before held, nor of the log level it was
    /// told: subscribe it to every URI of this mount that a session wants,
    /// and, once a session set a level, to log everything. Only the
    /// full-profile session of a shared mount serves requests, so only it
    /// is told.
    fn session_started(&self, session: Arc<UpstreamSession>) {
        if self.profile != ClientProfile::FULL {
            return;
        }
        let Some((gateway, mount)) = self.shared_mount() else {
            return;
        };
        // Found by name: a retired mount's last session is not this one's.
        let current = mount.live_shared_session();
        if !current.is_some_and(|live| Arc::ptr_eq(&live, &session)) {
            return;
        }
        tokio::spawn(async move {
            let timeout = mount.timeouts().request;
            mount
                .subscriptions
                .renew(&gateway.sessions, &mount.config.name, &session, timeout)
                .await;
            let logs = session
                .peer()
                .peer_info()
                .is_some_and(|info| info.capabilities.logging.is_some());
            if let (true, Some(level)) = (logs, gateway.sessions.shared_log_level()) {
                let params = rmcp::model::SetLevelRequestParams::new(level);
                if let Err(error) =
                    bounded(&session, timeout, session.peer().set_level(params)).await
                {
                    tracing::debug!(mount = %mount.config.name, error = %crate::upstream::http_client::with_causes(&error), "logging/setLevel failed on a new upstream session");
                }
            }
        });
    }

    fn tell_session(&self, session: SessionKey, notification: rmcp::model::ServerNotification) {
        if let Some(gateway) = self.gateway.upgrade() {
            gateway.sessions.tell(session, notification);
        }
    }

    fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let Some((gateway, mount)) = self.shared_mount() else {
            return;
        };
        gateway
            .sessions
            .notify_resource_updated(&mount.config.name, &params.uri, params.meta);
    }
}

#[cfg(test)]
mod tests;
