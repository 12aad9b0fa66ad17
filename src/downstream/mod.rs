//! One downstream MCP session: the gateway as one server to one client.
//!
//! rmcp's Streamable HTTP service creates a [`DownstreamSession`] per client
//! session (its factory) and drops it when the session ends (DELETE, idle
//! timeout, shutdown). The session routes each request to a mount (see
//! [`handler`]), owns the upstream sessions of its `per_session` mounts, and
//! closes them when it is dropped, so a stdio child never outlives the
//! client session it belonged to.

mod admission;
mod errors;
mod forwarded_headers;
mod handler;
pub mod hibernation;
mod lenient_result;
mod observe;
mod per_session;
pub(crate) mod prebuilt;
pub(crate) mod quick_call;
pub mod request_streams;
mod routed;
pub mod tasks;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock, Weak},
    time::Duration,
};

use arc_swap::ArcSwap;
use rmcp::{model::ClientCapabilities, Peer, RoleServer};
use tokio::sync::OnceCell;
use tokio_util::task::task_tracker::TaskTrackerToken;

pub use admission::LIMIT_EXCEEDED;
pub use errors::RouteError;
pub(crate) use observe::is_routed_here;

use crate::{
    catalog::{Listing, MergedCatalog, MountCatalog},
    coalesce::Coalescer,
    config::{Isolation, UpstreamTransport},
    gateway::{Gateway, Mount, MountPhase, SessionKey, SessionTicket},
    header_names,
    naming::MountName,
    upstream::{
        self, Caller, ClientProfile, ListKind, LogLevelSetting, Relay, UpstreamHandler,
        UpstreamSession,
    },
};

/// The headers of the HTTP request behind `context` (rmcp puts the
/// request's `Parts` in its extensions); `None` off HTTP.
pub(crate) fn http_headers(
    context: &rmcp::service::RequestContext<RoleServer>,
) -> Option<&axum::http::HeaderMap> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .map(|parts| &parts.headers)
}

/// The endpoint (`[endpoints.NAME]`) an HTTP request came to, put in its
/// extensions by the route (`http/mod.rs`); absent for the main endpoint.
#[derive(Debug, Clone)]
pub struct ServedEndpoint(pub Arc<str>);

/// The endpoint `context`'s request came to (`None`: the main one).
pub(crate) fn served_endpoint(
    context: &rmcp::service::RequestContext<RoleServer>,
) -> Option<Arc<str>> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    parts
        .extensions
        .get::<ServedEndpoint>()
        .map(|served| served.0.clone())
}

/// The `Mcp-Session-Id` the client sent with `context`'s request.
pub(crate) fn http_session_id(context: &rmcp::service::RequestContext<RoleServer>) -> Option<&str> {
    http_headers(context)?
        .get(&header_names::MCP_SESSION_ID)
        .and_then(|value| value.to_str().ok())
}

/// The rmcp server handler of one downstream session.
pub struct DownstreamSession {
    gateway: Arc<Gateway>,
    /// Replaced once, when a session asleep is woken into this handler
    /// (see [`hibernation`]).
    state: ArcSwap<SessionState>,
}

impl DownstreamSession {
    /// A session holding `ticket`, its place under `max_sessions`.
    pub fn new(gateway: Arc<Gateway>, ticket: SessionTicket) -> Self {
        let key = gateway.sessions().next_key();
        let state = SessionState::new(&gateway, key, ticket, Default::default());
        Self {
            gateway,
            state: ArcSwap::new(state),
        }
    }

    fn state(&self) -> Arc<SessionState> {
        self.state.load_full()
    }
}

type UpstreamSlot = Arc<OnceCell<Arc<UpstreamSession>>>;

/// How long a per-session upstream's reopening waits for the one that
/// ended to close: longer than a close takes (stdin closed, SIGTERM, SIGKILL,
/// each after a 3 s wait), so reached only if something hangs.
const PREDECESSOR_CLOSE_WAIT: Duration = Duration::from_secs(15);

/// A session's own lists for one mount, read from its per-session
/// upstream after that upstream announced a change. They belong to that
/// mount (`mount_id`) and that upstream (`upstream_id`): a mount a reload
/// replaced, or an upstream reopened after its process died, starts again
/// from the lists every session sees.
struct Overlay {
    mount_id: u64,
    upstream_id: u64,
    catalog: Arc<MountCatalog>,
}

/// A session's overlays by mount and the merged catalog last built with
/// them, under one lock: an update that lands while a catalog is being
/// built from the overlays it replaces must not find that catalog kept
/// afterwards (with two locks it could, until the shared catalog next
/// changed).
#[derive(Default)]
struct Overlays {
    by_mount: HashMap<MountName, Overlay>,
    /// The merged catalog with `by_mount` applied, and the shared
    /// catalog's generation it was built over.
    merged: Option<(u64, Arc<MergedCatalog>)>,
}

/// A per-session upstream slot and the mount instance it was opened for (a
/// reload that replaces the mount makes the slot stale).
struct PerSessionSlot {
    mount_id: u64,
    slot: UpstreamSlot,
    /// The session's upstream of this mount that ended before this slot
    /// was made: the slot's upstream starts once it is closed (its child
    /// gone, its place under `max_upstream_sessions` given back), as a
    /// server holding a lock, a port or a browser profile needs.
    predecessor: Weak<UpstreamSession>,
}

/// What a session owns, shared with its per-session upstreams' event
/// handlers (which hold it weakly, so they never keep a session alive).
pub(crate) struct SessionState {
    key: SessionKey,
    /// Set when the session falls asleep: what it is continues as a
    /// [`hibernation::Sleeper`], so dropping this state does not end it.
    asleep: std::sync::atomic::AtomicBool,
    /// The client's `initialize`, which waking the session replays.
    initialize: OnceLock<rmcp::model::InitializeRequestParams>,
    gateway: Weak<Gateway>,
    /// Set at initialize; taken while the session sleeps.
    peer: Mutex<Option<Peer<RoleServer>>>,
    /// rmcp's `Mcp-Session-Id` for it, once initialized.
    rmcp_id: OnceLock<Arc<str>>,
    /// `rmcp_id`'s fingerprint, as logs and traces name the session.
    fingerprint: OnceLock<Arc<str>>,
    client_capabilities: OnceLock<ClientCapabilities>,
    /// The client's latest values of the headers mounts forward (see
    /// [`forwarded_headers`]).
    client_headers: forwarded_headers::HeldClientHeaders,
    /// Derived from `client_capabilities` at initialize.
    profile: OnceLock<ClientProfile>,
    /// The endpoint (`[endpoints.NAME]`) the session was opened on, set at
    /// initialize from the request's path; `None`: the main one. It
    /// decides which mounts the session sees, for its whole life.
    endpoint: OnceLock<Option<Arc<str>>>,
    /// What the client asked for with `logging/setLevel`.
    pub(crate) log_level: LogLevelSetting,
    /// Per-session upstream sessions by mount, opened on first use.
    upstreams: Mutex<HashMap<MountName, PerSessionSlot>>,
    /// Lists announced by this session's own per-session upstreams after a
    /// `list_changed`; they replace the shared view for this session only,
    /// for as long as the upstream that announced them serves it (see
    /// [`Overlay`]).
    overlays: Mutex<Overlays>,
    /// Held while the session lives, so shutdown waits for it.
    _alive: TaskTrackerToken,
    /// One overlay refresh at a time per mount and list.
    refreshes: Coalescer<(MountName, ListKind)>,
    /// Requests in flight, against `max_concurrent_requests`.
    requests: admission::RequestSlots,
    /// The tasks this session created, by the gateway's id for each.
    tasks: tasks::TaskTable,
    /// This session's place under `max_sessions`, until its sleeper takes
    /// it over as it falls asleep.
    ticket: Mutex<Option<SessionTicket>>,
    /// Cancelled when the session ends: every quick call of it runs under
    /// a child of it (on a task of its own, which rmcp's session end does
    /// not reach).
    quick_calls: tokio_util::sync::CancellationToken,
}

impl SessionState {
    fn new(
        gateway: &Arc<Gateway>,
        key: SessionKey,
        ticket: SessionTicket,
        client_headers: forwarded_headers::HeldClientHeaders,
    ) -> Arc<Self> {
        Arc::new(SessionState {
            key,
            asleep: std::sync::atomic::AtomicBool::new(false),
            initialize: OnceLock::new(),
            gateway: Arc::downgrade(gateway),
            peer: Mutex::new(None),
            rmcp_id: OnceLock::new(),
            fingerprint: OnceLock::new(),
            client_capabilities: OnceLock::new(),
            client_headers,
            profile: OnceLock::new(),
            endpoint: OnceLock::new(),
            log_level: LogLevelSetting::new(),
            upstreams: Mutex::new(HashMap::new()),
            overlays: Mutex::new(Overlays::default()),
            _alive: gateway.session_tasks().token(),
            refreshes: Coalescer::default(),
            requests: admission::RequestSlots::new(gateway.cut_off()),
            tasks: tasks::TaskTable::default(),
            ticket: Mutex::new(Some(ticket)),
            quick_calls: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// Takes the values of the headers mounts forward from a request of
    /// this session (see [`forwarded_headers`]).
    pub(crate) fn note_client_headers(&self, gateway: &Gateway, headers: &axum::http::HeaderMap) {
        forwarded_headers::note(&self.client_headers, headers, |take| {
            gateway.each_forwarded_client_header(take)
        });
    }

    /// The token a quick call of this session is cancelled with; already
    /// cancelled if the session has ended.
    pub(crate) fn quick_call_token(&self) -> tokio_util::sync::CancellationToken {
        self.quick_calls.child_token()
    }

    /// The session ended (deleted, or idle): its quick calls are cancelled,
    /// as rmcp cancels the calls it holds, whatever became of them (running
    /// on with nobody waiting, handed over to a session gone by then). Each
    /// holds this state, and with it the per-session upstreams and the
    /// place under `max_sessions`.
    pub(crate) fn end_quick_calls(&self) {
        self.quick_calls.cancel();
    }

    /// Cancelled when the session ends (see [`Self::end_quick_calls`]):
    /// what its requests wait for is then given up.
    pub(crate) fn ended(&self) -> tokio_util::sync::CancellationToken {
        self.quick_calls.clone()
    }

    /// Whether [`Self::end_quick_calls`] was called: the session ended.
    pub(crate) fn quick_calls_ended(&self) -> bool {
        self.quick_calls.is_cancelled()
    }

    /// The state of a session waking up, as it was when it fell asleep.
    fn woken(gateway: &Arc<Gateway>, sleeper: hibernation::Sleeper) -> Arc<Self> {
        let (key, ticket, kept) = sleeper.into_parts();
        // The forwarded headers too: a woken session's first request
        // need not carry them (a client sends its token once, or a stack
        // leaves it off), and without them its per-session upstreams
        // would open with the mount's own credential.
        let headers = kept.client_headers.unwrap_or_default();
        let state = Self::new(gateway, key, ticket, headers);
        if let Some(level) = kept.log_level {
            state.log_level.set(level);
        }
        // Its endpoint as it was opened, whatever path wakes it.
        let _ = state.endpoint.set(kept.endpoint);
        state
    }

    /// The client's session, while initialized and awake.
    pub(crate) fn peer(&self) -> Option<Peer<RoleServer>> {
        lock(&self.peer).clone()
    }

    /// What the session continues as while asleep, if sleeping would lose
    /// nothing: initialized, nothing in flight, no live per-session
    /// upstream (whose relay holds the peer), no task within its TTL. From then on,
    /// dropping this state does not end the session.
    ///
    /// A per-session slot whose upstream has ended, or whose open failed
    /// (nothing is in flight, so none is under way), holds nothing to
    /// lose: the next call opens a fresh one either way. Counting such
    /// slots kept a session awake for good after one failed open or one
    /// crashed child.
    fn fall_asleep(&self, ends_at: std::time::Instant) -> Option<hibernation::Sleeper> {
        let gateway = self.gateway.upgrade()?;
        let initialize = self.initialize.get()?;
        let sleeps = lock(&self.peer).is_some()
            && self.requests.in_flight() == 0
            && lock(&self.upstreams)
                .values()
                .all(|entry| entry.slot.get().is_none_or(|upstream| !upstream.is_alive()))
            && self
                .tasks
                .all_expired(std::time::Instant::now(), |mount, upstream| {
                    // Per-session upstreams have ended (checked above); a
                    // shared one lives while it is the mount's live session.
                    gateway
                        .mount(mount)
                        .and_then(|mount| mount.live_shared_session())
                        .is_some_and(|live| live.id() == upstream)
                });
        if !sleeps {
            return None;
        }
        // The sleeper takes over this state's place under `max_sessions`,
        // so the session counts once throughout.
        let mut place = lock(&self.ticket);
        let ticket = place.take()?;
        let sleeper = match hibernation::Sleeper::new(
            &gateway,
            self.key,
            ticket,
            hibernation::Kept {
                log_level: self.log_level.get(),
                client_headers: forwarded_headers::kept(&self.client_headers),
                endpoint: self.endpoint_name(),
            },
            initialize,
            ends_at,
        ) {
            Ok(sleeper) => sleeper,
            Err(ticket) => {
                *place = Some(ticket);
                return None;
            }
        };
        drop(place);
        lock(&self.peer).take();
        // Its tasks are all past their TTLs.
        self.let_go_of_tasks(&gateway);
        self.asleep
            .store(true, std::sync::atomic::Ordering::Release);
        gateway.sessions().set_asleep(self.key);
        Some(sleeper)
    }

    /// Lets the shared upstreams' relays forget this session's tasks: their
    /// owners hold its peer (and rmcp's session machinery behind it), and
    /// the session is going (asleep, or ended). Kept, they stayed until
    /// newer tasks pushed them out (1,024 per upstream session). What the
    /// upstream still says about them is refused as about a forgotten task,
    /// never given to another session.
    fn let_go_of_tasks(&self, gateway: &Gateway) {
        for (mount, upstream_session) in self.tasks.homes() {
            if let Some(upstream) = gateway
                .mount(&mount)
                .and_then(|mount| mount.live_shared_session())
                .filter(|upstream| upstream.id() == upstream_session)
            {
                upstream.relay().forget_tasks_of(self.key);
            }
        }
    }

    /// Set as the session falls asleep, before this state is let go.
    pub(crate) fn is_asleep(&self) -> bool {
        self.asleep.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The client's capability profile (none before initialize).
    pub(crate) fn profile(&self) -> ClientProfile {
        self.profile.get().copied().unwrap_or_default()
    }

    /// The endpoint the session was opened on (`None`: the main one).
    pub(crate) fn endpoint(&self) -> Option<&str> {
        self.endpoint.get().and_then(Option::as_deref)
    }

    /// [`Self::endpoint`], to be kept.
    pub(crate) fn endpoint_name(&self) -> Option<Arc<str>> {
        self.endpoint.get().cloned().flatten()
    }

    /// The fingerprint logs and traces name the session by, once it is
    /// initialized: worked out once, not on each request (a SHA-256 and
    /// its hex were ~2% of a proxied call's instructions).
    pub(crate) fn fingerprint(&self) -> Option<Arc<str>> {
        let id = self.rmcp_id.get()?;
        Some(
            self.fingerprint
                .get_or_init(|| crate::telemetry::redact::session_fingerprint(id).into())
                .clone(),
        )
    }

    /// Whether the session sees mount `mount` (its endpoint serves it).
    pub(crate) fn sees_mount(&self, gateway: &Gateway, mount: &MountName) -> bool {
        gateway.endpoint_serves(self.endpoint(), mount)
    }

    /// The session's catalog for listing `listing`: once every change to
    /// it its upstreams announced so far has been read (bounded, see
    /// `Gateway::lists_settled`), and the per-session mounts know their
    /// lists for this session's profile.
    pub(crate) async fn listing_catalog(
        &self,
        gateway: &Gateway,
        listing: Listing,
    ) -> Arc<MergedCatalog> {
        gateway.lists_settled(announced_as(listing), self).await;
        self.ready_catalog(gateway).await
    }

    /// Refreshes of this session's overlays (its per-session upstreams'
    /// announced changes).
    pub(crate) fn list_refreshes(&self) -> &Coalescer<(MountName, ListKind)> {
        &self.refreshes
    }

    /// [`Self::catalog`], once the per-session mounts know their lists for
    /// this session's profile: what a request routes and lists by.
    pub(crate) async fn ready_catalog(&self, gateway: &Gateway) -> Arc<MergedCatalog> {
        gateway.prepare(self.profile(), self.endpoint()).await;
        self.catalog(gateway)
    }

    /// The catalog this session sees: the one shared by every session with
    /// its profile, unless its own per-session upstreams announced lists.
    pub(crate) fn catalog(&self, gateway: &Gateway) -> Arc<MergedCatalog> {
        let profile = self.profile();
        let endpoint = self.endpoint.get().and_then(Option::as_ref);
        let shared = gateway.endpoint_catalog(profile, endpoint);
        // Every request reads the catalog: look before anything else.
        let mut overlays = lock(&self.overlays);
        if overlays.by_mount.is_empty() {
            return shared;
        }
        let before = overlays.by_mount.len();
        // A reload replaced or removed the mount.
        overlays.by_mount.retain(|name, overlay| {
            gateway
                .mount(name)
                .is_some_and(|mount| mount.id() == overlay.mount_id)
        });
        if overlays.by_mount.len() != before {
            overlays.merged = None;
        }
        if overlays.by_mount.is_empty() {
            return shared;
        }
        if let Some((base, catalog)) = &overlays.merged {
            if *base == shared.generation {
                return catalog.clone();
            }
        }
        // Built under the lock, so no update can slip in between reading
        // the overlays and keeping what was built from them.
        let overrides: HashMap<MountName, Arc<MountCatalog>> = overlays
            .by_mount
            .iter()
            .map(|(name, overlay)| (name.clone(), overlay.catalog.clone()))
            .collect();
        let catalog = Arc::new(gateway.catalog_with(profile, endpoint, &overrides));
        overlays.merged = Some((shared.generation, catalog.clone()));
        catalog
    }

    /// Replaces this session's overlay for `mount` with what `update` makes
    /// of the current one, atomically.
    /// `upstream` (this session's, for `mount`) announced the lists.
    /// `update` returns `None` when nothing changes; returns whether the
    /// overlay changed.
    pub(crate) fn update_overlay(
        &self,
        mount: &Mount,
        upstream: &UpstreamSession,
        update: impl FnOnce(Option<&MountCatalog>) -> Option<MountCatalog>,
    ) -> bool {
        let mut overlays = lock(&self.overlays);
        let current = overlays
            .by_mount
            .get(&mount.config.name)
            .filter(|overlay| {
                overlay.mount_id == mount.id() && overlay.upstream_id == upstream.id()
            })
            .map(|overlay| &*overlay.catalog);
        let Some(catalog) = update(current) else {
            return false;
        };
        let updated = Overlay {
            mount_id: mount.id(),
            upstream_id: upstream.id(),
            catalog: Arc::new(catalog),
        };
        overlays.by_mount.insert(mount.config.name.clone(), updated);
        overlays.merged = None;
        true
    }

    /// The upstream whose lists `mount`'s overlay holds is gone: this
    /// session sees the lists every session sees again, and is told.
    fn drop_overlay(&self, mount: &MountName) {
        {
            let mut overlays = lock(&self.overlays);
            if overlays.by_mount.remove(mount).is_none() {
                return;
            }
            overlays.merged = None;
        }
        if let Some(peer) = self.peer() {
            for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                tokio::spawn(crate::gateway::notify_list_changed(peer.clone(), kind));
            }
        }
    }

    /// This session's per-session upstream for `mount`, if already open.
    pub(crate) fn open_upstream(&self, mount: &MountName) -> Option<Arc<UpstreamSession>> {
        lock(&self.upstreams)
            .get(mount)
            .and_then(|entry| entry.slot.get().cloned())
            .filter(|session| session.is_alive())
    }

    /// Closes this session's per-session upstreams of mounts it no longer
    /// sees (a reload took them off its endpoint): nothing of the session
    /// reaches them any more, and each (a process, for a stdio mount)
    /// would run until the session ended. A call still running on one is
    /// cut short, as on a mount a reload removes once its grace is over.
    pub(crate) fn let_go_of_unseen_upstreams(&self, gateway: &Gateway) {
        let unseen: Vec<(MountName, Arc<UpstreamSession>)> = {
            let mut upstreams = lock(&self.upstreams);
            let names: Vec<MountName> = upstreams
                .keys()
                .filter(|name| !self.sees_mount(gateway, name))
                .cloned()
                .collect();
            names
                .into_iter()
                .filter_map(|name| {
                    let entry = upstreams.remove(&name)?;
                    Some((name, entry.slot.get()?.clone()))
                })
                .collect()
        };
        for (mount, upstream) in unseen {
            tracing::info!(%mount, session = self.key, "mount taken off the session's endpoint; closing its per-session upstream");
            gateway
                .session_tasks()
                .spawn(async move { upstream.close().await });
        }
    }

    /// Whether this session's per-session slot for `mount`'s name was made
    /// for that mount (not one a reload has since replaced).
    pub(crate) fn upstream_is_of(&self, mount: &Mount) -> bool {
        lock(&self.upstreams)
            .get(&mount.config.name)
            .is_some_and(|entry| entry.mount_id == mount.id())
    }

    /// Like [`Self::open_upstream`], but waits for an open under way (its
    /// events are live before it has finished: what it announces then is
    /// about it). Never starts one.
    pub(crate) async fn open_or_opening_upstream(
        &self,
        mount: &MountName,
    ) -> Option<Arc<UpstreamSession>> {
        let slot = lock(&self.upstreams).get(mount)?.slot.clone();
        // Initialized already, or by the open under way once it ends;
        // otherwise this one's init fails at once and opens nothing.
        let session = slot
            .get_or_try_init(|| async { Err::<Arc<UpstreamSession>, ()>(()) })
            .await
            .ok()?;
        session.is_alive().then(|| session.clone())
    }

    /// The upstream session serving `mount` for this session.
    pub(crate) async fn upstream_for(
        self: &Arc<Self>,
        mount: &Arc<Mount>,
    ) -> Result<Arc<UpstreamSession>, RouteError> {
        let name = &mount.config.name;
        let unavailable = |cause: String| RouteError::MountUnavailable {
            mount: name.clone(),
            cause,
        };
        if mount.config.isolation == Isolation::Shared {
            return mount.shared_session().await.map_err(unavailable);
        }
        // A per-session stdio mount that keeps failing to start is not
        // retried on every call (each would spawn a process): its
        // supervisor retries. A remote one is (one connection each): the
        // server may be back before the supervisor's next attempt, a
        // minute away, and the first open that reaches it brings that
        // attempt forward (`Mount::upstream_reached`).
        let status = mount.status();
        if status.phase == MountPhase::Down && spawns_process(mount) {
            return Err(unavailable(format!(
                "the mount is down after repeated failures (last: {})",
                status.last_error.unwrap_or_default()
            )));
        }
        let (slot, predecessor) = {
            let mut upstreams = lock(&self.upstreams);
            let entry = upstreams
                .entry(name.clone())
                .or_insert_with(|| PerSessionSlot {
                    mount_id: mount.id(),
                    slot: UpstreamSlot::default(),
                    predecessor: Weak::new(),
                });
            if entry.mount_id != mount.id() {
                // The mount was replaced by a reload; the old session is
                // closed by its watcher (and the new mount's start waits
                // for the old mount's children).
                *entry = PerSessionSlot {
                    mount_id: mount.id(),
                    slot: UpstreamSlot::default(),
                    predecessor: Weak::new(),
                };
            } else if let Some(ended) = entry.slot.get().filter(|session| !session.is_alive()) {
                // The child exited or the HTTP session ended: the next call
                // opens a fresh one rather than failing forever.
                tracing::info!(mount = %name, session = self.key, "per-session upstream ended; reopening");
                crate::telemetry::metrics()
                    .upstream_restarts
                    .get_or_create(&mount.labels())
                    .inc();
                entry.predecessor = Arc::downgrade(ended);
                entry.slot = UpstreamSlot::default();
                // The new process starts from the lists every session sees.
                self.drop_overlay(name);
            }
            (entry.slot.clone(), entry.predecessor.clone())
        };
        let session = slot
            .get_or_try_init(|| Box::pin(self.open_per_session(mount, predecessor)))
            .await
            .map_err(unavailable)?;
        Ok(session.clone())
    }

    async fn open_per_session(
        self: &Arc<Self>,
        mount: &Arc<Mount>,
        predecessor: Weak<UpstreamSession>,
    ) -> Result<Arc<UpstreamSession>, String> {
        // The upstream that ended is closed first (its watcher may be at
        // it already: a second close waits for the first): until then its
        // child may still hold what the new one needs, and its place. In a
        // task of its own: a caller giving up (a cancelled call) must not
        // drop a close halfway, which would leave the watcher's close to
        // SIGKILL the child in the middle of its graceful exit.
        if let Some(ended) = predecessor.upgrade() {
            let retired = mount.retired_token();
            let closing = tokio::spawn(async move { ended.close().await });
            tokio::select! {
                _ = tokio::time::timeout(PREDECESSOR_CLOSE_WAIT, closing) => {}
                _ = retired.cancelled() => {}
            }
        }
        let permit = mount.reserve_upstream()?;
        // The upstream sees the real client's capabilities, so features that
        // depend on them (sampling, elicitation, roots) appear as they would
        // without the gateway.
        let capabilities = self.client_capabilities.get().cloned().unwrap_or_default();
        let info = upstream::connect::client_config(capabilities);
        let events = Arc::new(per_session::PerSessionEvents::new(
            Arc::downgrade(self),
            mount.config.name.clone(),
        ));
        // Everything this upstream sends belongs to this one session.
        let Some(peer) = self.peer() else {
            return Err("the client session has not finished initializing".to_owned());
        };
        let relay = Arc::new(Relay::owned_by(Caller {
            session: self.key,
            peer,
            request_id: None,
            progress_token: None,
            profile: self.profile(),
            log_level: self.log_level.clone(),
            request_stream: None,
            handoff: None,
        }));
        let handler = UpstreamHandler::new(info, events, relay);
        // A reload retiring this mount meanwhile ends the wait: no child is
        // started for it, and the caller goes to its successor.
        let retired = mount.retired_token();
        tokio::select! {
            _ = mount.predecessor_gone() => {}
            _ = retired.cancelled() => {}
        }
        if mount.is_retired() {
            return Err("the mount was removed".to_owned());
        }
        // With the client's latest values of the headers the mount
        // forwards on every request, so that a renewed token is used as
        // soon as the client sends it.
        let live = forwarded_headers::live_for(&self.client_headers, &mount.config);
        let session = match upstream::open(&mount.config, mount.timeouts(), handler, live).await {
            Ok(session) => session,
            Err(error) => {
                // Its server may be gone for the mount's own sessions too.
                mount.check_own_sessions_alive();
                return Err(error.to_string());
            }
        };
        // A process started here says nothing of the mount's own.
        if !spawns_process(mount) {
            mount.upstream_reached();
        }
        let told = Arc::downgrade(mount);
        session.when_unreachable(move || {
            if let Some(mount) = told.upgrade() {
                mount.check_own_sessions_alive();
            }
        });
        // Each bounded: this open holds the session's calls to the mount.
        let limit = mount.timeouts().request;
        // A level the client chose before this upstream existed applies to
        // it too.
        if let Some(level) = self.log_level.get() {
            let declares_logging = session
                .peer()
                .peer_info()
                .is_some_and(|info| info.capabilities.logging.is_some());
            if declares_logging {
                let params = rmcp::model::SetLevelRequestParams::new(level);
                // The error in its redacted form: an HTTP error's `Debug`
                // shows the upstream URL, keys and password included.
                match tokio::time::timeout(limit, session.peer().set_level(params)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::debug!(mount = %mount.config.name, error = %crate::upstream::http_client::with_causes(&error), "could not set the log level")
                    }
                    Err(_) => {
                        tracing::debug!(mount = %mount.config.name, "could not set the log level: no answer in time")
                    }
                }
            }
        }
        // So do the subscriptions this session made on an upstream of this
        // mount that ended (or that a reload replaced).
        if let Some(gateway) = self.gateway.upgrade() {
            for uri in gateway
                .sessions()
                .subscriptions_on(self.key, &mount.config.name)
            {
                let params = rmcp::model::SubscribeRequestParams::new(uri.clone());
                let renewed =
                    crate::gateway::bounded(&session, limit, session.peer().subscribe(params))
                        .await;
                if let Err(error) = renewed {
                    let error = crate::upstream::http_client::with_causes(&error);
                    tracing::warn!(mount = %mount.config.name, %uri, %error, "could not renew a subscription on a reopened upstream");
                }
            }
        }
        tracing::info!(mount = %mount.config.name, session = self.key, pid = session.pid(), "per-session upstream open");
        let session = Arc::new(session);
        session.hold_until_closed(permit);
        watch_per_session(mount, &session, Arc::downgrade(self));
        Ok(session)
    }
}

/// Waits for `session` to end, then closes what is left of it (which
/// gives back its place under the mount's `max_upstream_sessions`) and drops the lists it announced to `state` (its downstream
/// session); closes it at once if the mount is retired first (removed or
/// replaced by a reload, or shutdown).
fn watch_per_session(mount: &Mount, session: &Arc<UpstreamSession>, state: Weak<SessionState>) {
    let retired = mount.retired_token();
    let ended = session.ended_token();
    let session = Arc::downgrade(session);
    let name = mount.config.name.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = ended.cancelled() => {
                // The child exited (or the HTTP session ended): what it
                // started goes now, not when the session next calls the
                // mount or ends, which may be hours away (its process
                // group id could be another's by then).
                if let Some(session) = session.upgrade() {
                    session.close().await;
                }
                // Its lists went with it: the session sees (and is told of)
                // the lists every session sees, unless a new upstream of
                // its own has already taken over.
                if let Some(state) = state.upgrade() {
                    if state.open_upstream(&name).is_none() {
                        state.drop_overlay(&name);
                    }
                }
            }
            _ = retired.cancelled() => {
                if let Some(session) = session.upgrade() {
                    tracing::info!(mount = %name, "mount retired; closing its per-session upstream");
                    session.close().await;
                }
            }
        }
    });
}

impl Drop for SessionState {
    fn drop(&mut self) {
        if self.asleep.load(std::sync::atomic::Ordering::Acquire) {
            // It goes on as a `Sleeper`; it has no per-session upstream.
            return;
        }
        if let Some(gateway) = self.gateway.upgrade() {
            gateway.session_ended(self.key);
            if let Some(id) = self.rmcp_id.get() {
                gateway.hibernation().ended(id);
            }
            self.let_go_of_tasks(&gateway);
        }
        let upstreams: Vec<_> = lock(&self.upstreams)
            .drain()
            .filter_map(|(_, entry)| entry.slot.get().cloned())
            .collect();
        if upstreams.is_empty() {
            return;
        }
        tracing::info!(
            session = self.key,
            count = upstreams.len(),
            "session ended; closing its per-session upstreams"
        );
        let tracker = self
            .gateway
            .upgrade()
            .map(|gateway| gateway.session_tasks().clone());
        match (tokio::runtime::Handle::try_current(), tracker) {
            (Ok(runtime), Some(tracker)) => {
                for upstream in upstreams {
                    tracker.spawn_on(async move { upstream.close().await }, &runtime);
                }
            }
            // Outside a runtime (or with the gateway gone) the sessions' own
            // drop kills the children.
            _ => drop(upstreams),
        }
    }
}

/// Locks a std mutex, recovering from poisoning: the data guarded here stays
/// consistent even if a holder panicked (every update is a single insert).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `list_changed` notification that announces a change to `listing`.
pub(crate) fn announced_as(listing: Listing) -> ListKind {
    match listing {
        Listing::Tools => ListKind::Tools,
        Listing::Prompts => ListKind::Prompts,
        Listing::Resources | Listing::ResourceTemplates => ListKind::Resources,
    }
}

/// Whether opening an upstream of `mount` starts a process (stdio).
fn spawns_process(mount: &Mount) -> bool {
    matches!(mount.config.transport, UpstreamTransport::Stdio { .. })
}
