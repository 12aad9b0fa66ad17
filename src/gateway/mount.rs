//! One running mount: its config, its own upstream sessions and catalogs,
//! and its health.
//!
//! A mount keeps one upstream session per client profile it has to know the
//! lists for (see [`ClientProfile`]), each kept running by a supervisor
//! (`supervisor.rs`). The [`ClientProfile::FULL`] session starts with the
//! mount: for a `shared` mount it is *the* shared session that serves every
//! downstream session; for a `per_session` mount it only discovers. A
//! `per_session` mount starts another discovery session the first time a
//! client with a different profile asks for lists, so each client sees
//! exactly what its own per-session upstream will offer. Discovery sessions
//! stay open so their `list_changed` keeps the cache correct.
//!
//! A mount is immutable once built; a reload that changes it builds a new
//! one and *retires* this one, which stops its supervisors and closes every
//! upstream session opened for it, per-session ones included.

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use foldhash::HashMap;

use arc_swap::ArcSwapOption;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::LiveConfig;
use crate::{
    catalog::MountCatalog,
    config::{Isolation, MountConfig, Supervision, Timeouts, UpstreamTransport},
    telemetry::metrics::MountLabels,
    tool_filter::ToolFilter,
    upstream::{
        self, ClientProfile, ListKind, Relay, RequestLimit, UpstreamError, UpstreamEvents,
        UpstreamHandler, UpstreamSession,
    },
};

/// Where a mount is in its life, as shown by `/readyz` and the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MountPhase {
    /// First start not finished yet.
    Starting,
    /// Started and discovered; serving.
    Ready,
    /// Its upstream session failed or ended; restarting with backoff. Calls
    /// fail with the reason until it is back.
    Degraded,
    /// Failed too many times in a row; retried slowly. Its tools stay
    /// listed from the last good catalog; calls fail with the reason.
    Down,
}

impl MountPhase {
    pub const ALL: [MountPhase; 4] = [
        MountPhase::Starting,
        MountPhase::Ready,
        MountPhase::Degraded,
        MountPhase::Down,
    ];

    /// As serialized (`/status.json`) and in the `mount_state` metric.
    pub fn as_str(self) -> &'static str {
        match self {
            MountPhase::Starting => "starting",
            MountPhase::Ready => "ready",
            MountPhase::Degraded => "degraded",
            MountPhase::Down => "down",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MountStatus {
    pub phase: MountPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Start attempts after the first (restarts after a crash, retries after
    /// a failed start).
    pub restarts: u64,
}

/// Makes the event sink of a mount's own session for one profile.
pub type EventsFactory = Box<dyn Fn(ClientProfile) -> Arc<dyn UpstreamEvents> + Send + Sync>;

pub struct Mount {
    /// As the mount was built; its tuning (`timeouts`,
    /// `max_upstream_sessions`) is [`Mount::tuning`]'s, which a reload
    /// changes in place.
    pub config: MountConfig,
    tuning: arc_swap::ArcSwap<MountTuning>,
    live: Arc<LiveConfig>,
    profiles: Mutex<HashMap<ClientProfile, Arc<ProfileSession>>>,
    status: Mutex<MountStatus>,
    events: EventsFactory,
    /// Cancelled when the mount is removed, replaced or shut down.
    retired: CancellationToken,
    /// The supervisors, so retiring can wait for their sessions to close.
    supervisors: TaskTracker,
    /// Per-session upstream sessions open now (`per_session` mounts).
    per_session_open: Arc<PerSessionCount>,
    /// The requests sent upstream and not answered yet, which a reload
    /// that replaces the mount lets finish.
    calls: Arc<super::calls_in_flight::CallsInFlight>,
    /// When a failed request was last logged (`RouteError::upstream`).
    failures_said: crate::said_at_most::SaidAtMost,
    /// Cancelled when [`Mount::retire`] has finished: every upstream
    /// session opened for this mount is closed, its children have exited.
    closed: CancellationToken,
    /// The `closed` of every stdio mount of this name still retiring when
    /// a reload built this one: its children start only once theirs have
    /// exited (see [`Mount::follow`]).
    predecessors_closed: std::sync::OnceLock<Vec<CancellationToken>>,
    /// Distinguishes this mount from a later one with the same name.
    id: u64,
    /// What the shared session is subscribed to (`shared` mounts).
    pub subscriptions: super::subscriptions::UpstreamSubscriptions,
    /// The catalogs of the mount this one replaced in a reload, by
    /// profile, each listed until this one's first discovery for that
    /// profile (see [`Mount::inherit_catalog`]). Set once, before the
    /// mount serves.
    inherited: std::sync::OnceLock<HashMap<ClientProfile, Arc<MountCatalog>>>,
    /// Wakes the supervisors' backoff (see [`Mount::upstream_reached`]).
    reached: watch::Sender<u64>,
}

/// The parts of a mount's table that a reload applies to the running
/// mount: changing a timeout must not restart an upstream, failing its
/// calls in flight and losing its state.
#[derive(Debug, PartialEq)]
struct MountTuning {
    timeouts: crate::config::MountTimeouts,
    max_upstream_sessions: Option<usize>,
    tools: Arc<ToolFilter>,
}

impl MountTuning {
    fn of(config: &MountConfig) -> Self {
        Self {
            timeouts: config.timeouts.clone(),
            max_upstream_sessions: config.max_upstream_sessions,
            tools: Arc::new(config.tools.clone()),
        }
    }
}

/// What a [`ProfileSession`]'s supervisor says about its upstream session.
#[derive(Clone)]
pub enum SessionSlot {
    /// A start attempt is running: the first, or one after a session that
    /// ended without failing (an HTTP upstream that forgot it).
    Starting,
    /// A start attempt is running after `error` (`down`: after repeated
    /// failures). Callers are not held by it: it may take as long as the
    /// `initialize` timeout, and the last one failed.
    Retrying {
        error: String,
        down: bool,
    },
    Live(Arc<UpstreamSession>),
    /// The last attempt failed or the session ended; the next attempt is at
    /// `retry_at`.
    Waiting {
        error: String,
        down: bool,
        retry_at: tokio::time::Instant,
    },
    /// The mount was retired.
    Retired,
}

/// The upstream session and catalog of one mount for one client profile.
pub struct ProfileSession {
    profile: ClientProfile,
    catalog: ArcSwapOption<MountCatalog>,
    slot: watch::Sender<SessionSlot>,
    /// Whether a first start attempt has finished (either way).
    attempted: watch::Sender<bool>,
    /// Whether sessions of this profile were shown the full profile's lists
    /// because this one's first discovery failed or was slow
    /// (`Gateway::prepare`): its discovery must then tell them.
    showed_full: std::sync::atomic::AtomicBool,
}

impl ProfileSession {
    fn new(profile: ClientProfile) -> Self {
        Self {
            profile,
            catalog: ArcSwapOption::empty(),
            slot: watch::Sender::new(SessionSlot::Starting),
            attempted: watch::Sender::new(false),
            showed_full: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn profile(&self) -> ClientProfile {
        self.profile
    }

    pub fn catalog(&self) -> Option<Arc<MountCatalog>> {
        self.catalog.load_full()
    }

    pub fn store_catalog(&self, catalog: MountCatalog) {
        self.catalog.store(Some(Arc::new(catalog)));
    }

    /// Replaces the catalog with what `update` makes of the current one,
    /// atomically (retried if another writer got in between).
    pub fn update_catalog(&self, update: impl Fn(Option<Arc<MountCatalog>>) -> MountCatalog) {
        self.catalog
            .rcu(|current| Some(Arc::new(update(current.clone()))));
    }

    pub(super) fn publish(&self, slot: SessionSlot) {
        let starting = matches!(slot, SessionSlot::Starting | SessionSlot::Retrying { .. });
        self.slot.send_replace(slot);
        if !starting {
            self.mark_attempted();
        }
    }

    pub(super) fn mark_attempted(&self) {
        self.attempted
            .send_if_modified(|done| !std::mem::replace(done, true));
    }

    fn live_session(&self) -> Option<Arc<UpstreamSession>> {
        match &*self.slot.borrow() {
            SessionSlot::Live(session) if session.is_alive() => Some(session.clone()),
            _ => None,
        }
    }
}

/// Held while a per-session upstream session is open; counts it against
/// the mount's `max_upstream_sessions`.
pub struct UpstreamPermit(Arc<PerSessionCount>);

impl Drop for UpstreamPermit {
    fn drop(&mut self) {
        crate::wait_for_zero::count_down(&self.0.open, &self.0.none_open);
    }
}

/// A mount's per-session upstream sessions open (or opening) now.
#[derive(Default)]
struct PerSessionCount {
    open: AtomicUsize,
    /// Woken when the count drops to zero.
    none_open: tokio::sync::Notify,
}

/// How long a retired mount's close waits for its per-session upstream
/// sessions to close (each closes on its own as the mount retires, in at
/// most ~11 s: see the README's shutdown bound).
const PER_SESSION_CLOSE_WAIT: Duration = Duration::from_secs(15);

/// How long a mount replacing a stdio mount waits for the old one's
/// children to exit before starting its own anyway, once the old one's
/// requests in flight had `shutdown_grace` to finish.
const PREDECESSOR_WAIT: Duration = Duration::from_secs(20);

static NEXT_MOUNT_ID: AtomicU64 = AtomicU64::new(1);

impl Mount {
    pub fn new(config: MountConfig, live: Arc<LiveConfig>, events: EventsFactory) -> Self {
        Self {
            tuning: arc_swap::ArcSwap::from_pointee(MountTuning::of(&config)),
            config,
            live,
            profiles: Mutex::new(HashMap::default()),
            status: Mutex::new(MountStatus {
                phase: MountPhase::Starting,
                last_error: None,
                restarts: 0,
            }),
            events,
            retired: CancellationToken::new(),
            supervisors: TaskTracker::new(),
            per_session_open: Default::default(),
            calls: Default::default(),
            failures_said: Default::default(),
            reached: watch::Sender::new(0),
            closed: CancellationToken::new(),
            predecessors_closed: Default::default(),
            id: NEXT_MOUNT_ID.fetch_add(1, Ordering::Relaxed),
            subscriptions: Default::default(),
            inherited: std::sync::OnceLock::new(),
        }
    }

    /// Lists what `replaced` (the mount of the same name this one replaces
    /// in a reload) last knew until this one's first discovery, as a
    /// restarted mount lists its last good catalog: its names stay
    /// routable (a call waits for the start rather than being refused, or
    /// going to a pass-through mount that offers the same name), and that
    /// discovery tells clients only the lists that really changed.
    ///
    /// Every profile's: a per-session mount is listed to most clients
    /// under a profile other than the full one (which needs every
    /// capability at once); with the full profile's alone, each of their
    /// lists waited for a new discovery, or showed them the full lists.
    pub(super) fn inherit_catalog(&self, replaced: &Mount) {
        // Only what the replaced mount discovered itself: lists it had
        // inherited for a profile it never discovered are from an older
        // config still. The full profile's alone falls back to them, as a
        // restart lists its last good catalog.
        let mut catalogs: HashMap<ClientProfile, Arc<MountCatalog>> = lock(&replaced.profiles)
            .iter()
            .filter_map(|(profile, session)| Some((*profile, session.catalog()?)))
            .collect();
        if let Some(full) = replaced.inherited_catalog(ClientProfile::FULL) {
            catalogs.entry(ClientProfile::FULL).or_insert(full);
        }
        let _ = self.inherited.set(catalogs);
    }

    /// Starts the discovery of every other profile this mount inherited
    /// lists for (see [`Self::inherit_catalog`]); called once its own
    /// start is done (so that one comes first). Their sessions are shown
    /// the replaced mount's lists meanwhile; a profile's discovery began
    /// only when one of its clients listed, so until then its clients, told
    /// at the reload that their lists changed, listed the old upstream's
    /// names, with no end in time.
    pub(super) fn discover_inherited_profiles(self: &Arc<Self>) {
        let Some(inherited) = self.inherited.get() else {
            return;
        };
        for profile in inherited.keys() {
            // Only profiles this mount serves lists of: a shared mount
            // (one that was per_session before the reload) lists the full
            // profile's to everyone, and a session for another would be
            // an upstream (a child) serving nothing.
            if *profile != ClientProfile::FULL && self.serving_profile(*profile) == *profile {
                self.profile_session(*profile);
            }
        }
    }

    /// The catalog inherited for `profile`, if any.
    fn inherited_catalog(&self, profile: ClientProfile) -> Option<Arc<MountCatalog>> {
        self.inherited.get()?.get(&profile).cloned()
    }

    /// Whether lists for `profile` are known to show while its discovery
    /// runs: inherited from the mount this one replaced.
    pub fn has_inherited(&self, profile: ClientProfile) -> bool {
        self.inherited_catalog(profile).is_some()
    }

    /// This mount takes the name of stdio mounts still retiring, whose
    /// `closed` tokens are `retiring` (the one it replaces, and any that
    /// earlier reloads retired and that are still letting their requests
    /// finish, or a removed one it is added back in place of): its start
    /// waits until their children have exited. A server holding something
    /// exclusive (a fixed port, a lock file, a browser profile) otherwise
    /// failed its first starts against an old child still running, and
    /// could go `down` for `down_retry`. Streamable HTTP upstreams do not
    /// count: the server is the same either way.
    pub(super) fn follow(&self, retiring: Vec<CancellationToken>) {
        if !retiring.is_empty() {
            let _ = self.predecessors_closed.set(retiring);
        }
    }

    /// Whether this mount runs stdio children, which a successor waits
    /// for (see [`Mount::follow`]).
    pub(super) fn runs_children(&self) -> bool {
        matches!(self.config.transport, UpstreamTransport::Stdio { .. })
    }

    /// Cancelled once this mount has retired and its children exited.
    pub(super) fn closed_token(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// Waits (bounded) until the mounts this one follows have closed (see
    /// [`Mount::follow`]); at once if there are none.
    pub async fn predecessor_gone(&self) {
        let Some(predecessors) = self.predecessors_closed.get() else {
            return;
        };
        // The old ones first let their requests in flight finish.
        let wait = self.live.load().server.shutdown_grace + PREDECESSOR_WAIT;
        let all_closed =
            futures::future::join_all(predecessors.iter().map(|closed| closed.cancelled()));
        if tokio::time::timeout(wait, all_closed).await.is_err() {
            tracing::warn!(mount = %self.config.name, "the replaced mount's upstreams are still closing; starting the new ones anyway");
        }
    }

    /// Unique among every mount this process ever built.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Starts the full-profile session (and keeps it running).
    pub fn start(self: &Arc<Self>) {
        self.profile_session(ClientProfile::FULL);
    }

    /// This mount's timeouts: `[timeouts]` with its own overrides.
    pub fn timeouts(&self) -> Timeouts {
        self.live
            .load()
            .timeouts
            .for_mount(&self.tuning.load().timeouts)
    }

    /// How long reading its lists may take (see
    /// [`crate::upstream::discovery::ListLimits`]).
    pub fn list_limits(&self) -> crate::upstream::discovery::ListLimits {
        let timeouts = self.timeouts();
        crate::upstream::discovery::ListLimits {
            page: timeouts.request,
            whole: timeouts.request_ceiling,
        }
    }

    /// Takes `config`'s tuning (a reload of a mount whose upstream is the
    /// same, see [`MountConfig::same_upstream`]); whether it changed.
    pub fn retune(&self, config: &MountConfig) -> bool {
        let tuning = MountTuning::of(config);
        if **self.tuning.load() == tuning {
            return false;
        }
        self.tuning.store(Arc::new(tuning));
        true
    }

    /// Which of the upstream's tools this mount offers (the running
    /// config's: a reload changes it in place).
    pub fn tool_filter(&self) -> Arc<ToolFilter> {
        self.tuning.load().tools.clone()
    }

    /// The limit for one request to this mount (`tool` is the upstream's
    /// own name, for `tools/call`).
    pub fn request_limit(&self, tool: Option<&str>) -> RequestLimit {
        let timeouts = self.timeouts();
        let idle = tool
            .and_then(|tool| self.tuning.load().timeouts.tools.get(tool).copied())
            .unwrap_or(timeouts.request);
        RequestLimit {
            idle,
            ceiling: timeouts.request_ceiling,
        }
    }

    pub fn supervision(&self) -> Supervision {
        self.live.load().supervision
    }

    /// Resolves at each config change (a reload) after this call.
    pub fn config_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.live.changes()
    }

    /// The profile whose lists (and, for shared mounts, whose session) a
    /// downstream session with `client` profile uses.
    pub fn serving_profile(&self, client: ClientProfile) -> ClientProfile {
        match self.config.isolation {
            Isolation::Shared => ClientProfile::FULL,
            Isolation::PerSession => client,
        }
    }

    pub fn status(&self) -> MountStatus {
        lock(&self.status).clone()
    }

    pub(super) fn record_ready(&self, restarts: u64) {
        let mut status = lock(&self.status);
        if status.phase != MountPhase::Ready {
            tracing::info!(mount = %self.config.name, restarts, "mount ready");
        }
        status.phase = MountPhase::Ready;
        status.last_error = None;
        status.restarts = restarts;
    }

    pub(super) fn record_failure(&self, down: bool, error: &str, attempts: u64) {
        let mut status = lock(&self.status);
        status.phase = if down {
            MountPhase::Down
        } else {
            MountPhase::Degraded
        };
        status.last_error = Some(error.to_owned());
        status.restarts = attempts.saturating_sub(1);
    }

    /// The session of `profile`, creating it (and its supervisor) on first
    /// use.
    pub fn profile_session(self: &Arc<Self>, profile: ClientProfile) -> Arc<ProfileSession> {
        let mut profiles = lock(&self.profiles);
        if let Some(existing) = profiles.get(&profile) {
            return existing.clone();
        }
        let created = Arc::new(ProfileSession::new(profile));
        profiles.insert(profile, created.clone());
        drop(profiles);
        if self.retired.is_cancelled() {
            created.publish(SessionSlot::Retired);
        } else {
            self.supervisors
                .spawn(super::supervisor::supervise(self.clone(), created.clone()));
        }
        created
    }

    /// Pings each of the mount's own live sessions, ending those nobody
    /// answers (see `UpstreamSession::check_alive`). A `per_session`
    /// mount's own sessions only discover, so no call finds out that their
    /// server went away: its per-session upstreams, which failed to reach
    /// it, say so here, and the supervisor then shows the mount degraded
    /// and restarts it, as a shared mount's failed call does.
    pub fn check_own_sessions_alive(&self) {
        let profiles: Vec<_> = lock(&self.profiles).values().cloned().collect();
        for profile_session in profiles {
            if let Some(session) = profile_session.live_session() {
                session.check_alive();
            }
        }
    }

    /// A per-session upstream of this remote mount has just opened: if
    /// the mount's own sessions are failing (its server was away), their
    /// supervisors may try again now rather than at the end of their
    /// backoff, so `/readyz` and discovery follow the server's return
    /// (once per run of failures: see `supervisor.rs`).
    pub fn upstream_reached(&self) {
        if self.status().phase != MountPhase::Ready {
            self.reached
                .send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    /// Changes at each [`Self::upstream_reached`]. A watch, not a notify:
    /// a supervisor that was busy with an attempt when it happened still
    /// sees it when it next waits.
    pub(super) fn reached(&self) -> watch::Receiver<u64> {
        self.reached.subscribe()
    }

    /// The catalog known now for `profile`, without waiting. Falls back to
    /// what the replaced mount knew for it, then to the full profile's
    /// catalog, while the profile's own is not known.
    pub fn catalog_now(&self, profile: ClientProfile) -> Arc<MountCatalog> {
        let profiles = lock(&self.profiles);
        profiles
            .get(&profile)
            .and_then(|p| p.catalog())
            .or_else(|| self.inherited_catalog(profile))
            .or_else(|| profiles.get(&ClientProfile::FULL).and_then(|p| p.catalog()))
            .or_else(|| self.inherited_catalog(ClientProfile::FULL))
            .unwrap_or_default()
    }

    /// Whether sessions of `profile` are shown the full profile's lists
    /// ([`Self::catalog_now`]): none known for their own.
    pub fn shows_full_lists(&self, profile: ClientProfile) -> bool {
        let own = lock(&self.profiles)
            .get(&profile)
            .is_some_and(|p| p.catalog().is_some());
        !own && self.inherited_catalog(profile).is_none()
    }

    /// Whether any catalog known for this mount has a tool declaring an
    /// `execution` (2025-11-25 task support).
    pub fn lists_tool_execution(&self) -> bool {
        lock(&self.profiles)
            .values()
            .filter_map(|p| p.catalog())
            .any(|catalog| !catalog.tool_execution.is_empty())
    }

    /// Whether `profile`'s discovery has been started.
    pub fn discovery_started(&self, profile: ClientProfile) -> bool {
        lock(&self.profiles).contains_key(&profile)
    }

    /// Whether `profile`'s first start has finished (either way).
    pub fn is_discovered(&self, profile: ClientProfile) -> bool {
        lock(&self.profiles)
            .get(&profile)
            .is_some_and(|p| *p.attempted.borrow())
    }

    /// Sessions of `profile` are shown the full profile's lists for now
    /// (its first discovery failed or is slow); its discovery tells them
    /// what differs.
    pub fn showed_full_lists(self: &Arc<Self>, profile: ClientProfile) {
        self.profile_session(profile)
            .showed_full
            .store(true, Ordering::Release);
    }

    /// Waits for `profile`'s first start; `Ok` when its lists are known.
    pub async fn discover(self: &Arc<Self>, profile: ClientProfile) -> Result<(), String> {
        let profile_session = self.profile_session(profile);
        let mut attempted = profile_session.attempted.subscribe();
        let _ = attempted.wait_for(|done| *done).await;
        if profile_session.catalog().is_some() {
            return Ok(());
        }
        let slot = profile_session.slot.borrow().clone();
        match slot {
            SessionSlot::Waiting { error, .. } | SessionSlot::Retrying { error, .. } => Err(error),
            SessionSlot::Retired => Err("the mount was removed".to_owned()),
            _ => Err("the upstream has not listed anything yet".to_owned()),
        }
    }

    /// The live shared session (full profile).
    pub async fn shared_session(self: &Arc<Self>) -> Result<Arc<UpstreamSession>, String> {
        let profile_session = self.profile_session(ClientProfile::FULL);
        self.session_for(&profile_session).await
    }

    /// The full-profile session if it is live now, without waiting or
    /// starting anything.
    pub fn live_shared_session(&self) -> Option<Arc<UpstreamSession>> {
        let profiles = lock(&self.profiles);
        let slot = profiles.get(&ClientProfile::FULL)?.slot.borrow();
        match &*slot {
            SessionSlot::Live(session) if session.is_alive() => Some(session.clone()),
            _ => None,
        }
    }

    /// The live session of a profile. While a first start is running this
    /// waits for it (bounded by the mount's initialize and request
    /// timeouts); after a failure, while the supervisor backs off or tries
    /// again, it fails at once with the reason, so no client waits on a
    /// crash-looping upstream.
    pub async fn session_for(
        &self,
        profile_session: &ProfileSession,
    ) -> Result<Arc<UpstreamSession>, String> {
        let timeouts = self.timeouts();
        let bound = timeouts.initialize + timeouts.request;
        let mut slot = profile_session.slot.subscribe();
        let waited = tokio::time::timeout(bound, async {
            loop {
                let current = slot.borrow_and_update().clone();
                match current {
                    SessionSlot::Live(session) if session.is_alive() => return Ok(session),
                    SessionSlot::Waiting {
                        error,
                        down,
                        retry_at,
                    } => {
                        let next = humantime::format_duration(round_for_people(
                            retry_at.saturating_duration_since(tokio::time::Instant::now()),
                        ));
                        return Err(if down {
                            format!("the mount is down after repeated failures (last: {error}); next attempt in {next}")
                        } else {
                            format!("the upstream is restarting after a failure ({error}); next attempt in {next}")
                        });
                    }
                    SessionSlot::Retrying { error, down } => {
                        return Err(if down {
                            format!("the mount is down after repeated failures (last: {error}); an attempt to start it is under way")
                        } else {
                            format!("the upstream is restarting after a failure ({error}); an attempt to start it is under way")
                        });
                    }
                    SessionSlot::Retired => return Err("the mount was removed".to_owned()),
                    // Starting, or live but just ended (the supervisor has
                    // not noticed yet): wait for the next word.
                    _ => {
                        if slot.changed().await.is_err() {
                            return Err("the mount was removed".to_owned());
                        }
                    }
                }
            }
        })
        .await;
        match waited {
            Ok(result) => result,
            // A start reads every page of every list, each within the
            // request timeout: it may still be going.
            Err(_) => Err(format!(
                "the upstream did not start and list what it offers within {}; it may still be starting",
                humantime::format_duration(bound)
            )),
        }
    }

    /// Opens one of the mount's own sessions (for the supervisor).
    pub(super) async fn open_own_session(
        &self,
        profile: ClientProfile,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        self.predecessor_gone().await;
        let info = upstream::connect::client_config(profile.capabilities());
        // A mount's own sessions serve many downstream sessions: no owner.
        // A `per_session` mount's serve none: they only list.
        let relay = Arc::new(match self.config.isolation {
            Isolation::PerSession => Relay::serving_no_client(),
            Isolation::Shared => Relay::default(),
        });
        let handler = UpstreamHandler::new(info, (self.events)(profile), relay);
        let session =
            Box::pin(upstream::open(&self.config, self.timeouts(), handler, None)).await?;
        Ok(Arc::new(session))
    }

    /// Stores what a (re)start discovered and tells the sessions that see
    /// this profile's lists about the lists that changed.
    pub(super) fn catalog_discovered(
        &self,
        profile_session: &ProfileSession,
        catalog: MountCatalog,
    ) {
        let old = profile_session.catalog().or_else(|| {
            if let Some(inherited) = self.inherited_catalog(profile_session.profile) {
                // What was listed meanwhile.
                Some(inherited)
            } else if profile_session.profile == ClientProfile::FULL {
                None
            } else if profile_session.showed_full.load(Ordering::Acquire) {
                // What those sessions were shown instead.
                lock(&self.profiles)
                    .get(&ClientProfile::FULL)
                    .and_then(|full| full.catalog())
                    .or_else(|| Some(Arc::default()))
            } else {
                None
            }
        });
        let changed: Vec<ListKind> = match &old {
            // A first discovery for a client profile is awaited by the list
            // call that needs it (`Gateway::prepare`): nobody saw a
            // different list to be told about.
            None if profile_session.profile != ClientProfile::FULL => Vec::new(),
            None => vec![ListKind::Tools, ListKind::Prompts, ListKind::Resources],
            Some(old) => [ListKind::Tools, ListKind::Prompts, ListKind::Resources]
                .into_iter()
                .filter(|kind| crate::upstream::discovery::differs(old, &catalog, *kind))
                .collect(),
        };
        profile_session.store_catalog(catalog);
        if !changed.is_empty() {
            (self.events)(profile_session.profile).catalog_replaced(&changed);
        }
    }

    /// A profile's session is live (first start or restart).
    pub(super) fn session_started(&self, profile: ClientProfile, session: Arc<UpstreamSession>) {
        (self.events)(profile).session_started(session);
    }

    /// Reserves a slot for one more per-session upstream session, or says
    /// why not.
    pub fn reserve_upstream(&self) -> Result<UpstreamPermit, String> {
        let limit = self
            .tuning
            .load()
            .max_upstream_sessions
            .unwrap_or(self.live.load().limits.max_upstream_sessions);
        let open = self.per_session_open.open.fetch_add(1, Ordering::AcqRel);
        let permit = UpstreamPermit(self.per_session_open.clone());
        if open >= limit {
            return Err(format!(
                "the mount is at its limit of {limit} per-session upstream sessions (max_upstream_sessions); try again when another client session ends"
            ));
        }
        Ok(permit)
    }

    /// Per-session upstream sessions open now.
    pub fn per_session_open(&self) -> usize {
        self.per_session_open.open.load(Ordering::Acquire)
    }

    /// The upstream's own `instructions`, from its full-profile session if
    /// that is live (never opens one).
    pub fn instructions(&self) -> Option<String> {
        let session = lock(&self.profiles)
            .get(&ClientProfile::FULL)?
            .live_session()?;
        session.peer().peer_info()?.instructions.clone()
    }

    pub fn labels(&self) -> MountLabels {
        MountLabels {
            mount: self.config.name.as_str().to_owned(),
        }
    }

    /// Cancelled when this mount is retired; per-session upstream sessions
    /// opened for it close then.
    pub fn retired_token(&self) -> CancellationToken {
        self.retired.clone()
    }

    pub fn is_retired(&self) -> bool {
        self.retired.is_cancelled()
    }

    /// Counts a request about to be sent upstream on this mount until the
    /// guard drops; `None` once a reload replaced the mount: the request
    /// goes to the mount serving the name now.
    pub fn call_started(&self) -> Option<super::CallInFlight> {
        self.calls.start()
    }

    /// When this mount's failed requests were last logged.
    pub fn failures_said(&self) -> &crate::said_at_most::SaidAtMost {
        &self.failures_said
    }

    /// Whether a reload replaced (or removed) this mount: it serves the
    /// requests already sent on it, no new one.
    pub fn is_replaced(&self) -> bool {
        self.calls.is_replaced()
    }

    /// For a reload that replaced or removed the mount: waits (at most
    /// `grace`) for the requests in flight on it to be answered, before
    /// its upstreams are closed.
    pub async fn let_calls_finish(&self, grace: Duration) {
        let (pending, unanswered) = self.calls.replaced_let_finish(grace).await;
        if pending == 0 {
            return;
        }
        let mount = &self.config.name;
        match unanswered {
            0 => {
                tracing::info!(%mount, requests = pending, "the replaced mount's requests in flight were answered; closing it")
            }
            _ => {
                tracing::warn!(%mount, requests = unanswered, ?grace, "the replaced mount's requests still in flight after server.shutdown_grace; closing it, which fails them")
            }
        }
    }

    /// Retires the mount: supervisors stop and close their sessions,
    /// per-session sessions opened for it close. Returns once the
    /// supervisors' sessions are closed.
    pub async fn close(&self) {
        self.retired.cancel();
        self.supervisors.close();
        self.supervisors.wait().await;
    }

    /// Retires the mount for a reload: [`Mount::close`], then waits
    /// (bounded, [`PER_SESSION_CLOSE_WAIT`]) for its per-session upstream
    /// sessions to close too, and tells the mount replacing it (see
    /// [`Mount::follow`]). Shutdown closes its running mounts without
    /// this wait (it bounds the sessions' teardown itself), and waits for
    /// the retirements under way, each bounded so.
    pub async fn retire(&self) {
        self.close().await;
        let count = &self.per_session_open;
        if !crate::wait_for_zero::wait_for_zero(
            &count.open,
            &count.none_open,
            PER_SESSION_CLOSE_WAIT,
        )
        .await
        {
            tracing::debug!(mount = %self.config.name, "per-session upstreams still closing");
        }
        self.closed.cancel();
    }
}

/// Whole seconds (at least one) read better in an error message.
/// `duration` as a person reads a wait: whole seconds, rounded up, or
/// under a second, tenths of one (a first restart waits ~250 ms, which
/// "1s" overstated fourfold).
fn round_for_people(duration: Duration) -> Duration {
    if duration < Duration::from_secs(1) {
        let tenths = (duration.as_millis() as u64).div_ceil(100).max(1);
        return Duration::from_millis(tenths * 100);
    }
    Duration::from_secs(duration.as_secs_f64().ceil() as u64)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod wait_tests {
    use super::*;

    #[test]
    fn waits_read_as_people_read_them() {
        let shown = |millis: u64| {
            humantime::format_duration(round_for_people(Duration::from_millis(millis))).to_string()
        };
        assert_eq!(shown(0), "100ms");
        assert_eq!(shown(188), "200ms");
        assert_eq!(shown(1000), "1s");
        assert_eq!(shown(1001), "2s");
        assert_eq!(shown(29_400), "30s");
    }
}
