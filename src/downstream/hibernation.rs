//! Idle sessions asleep: their state kept, rmcp's machinery gone.
//!
//! Each live rmcp session costs ~55 KiB (its worker task, service loop and
//! their channels; BENCHMARKS.md), whatever the client does with it. A
//! session that has had nothing in flight, no stream open and no request
//! for `server.session_hibernate_after` is put to sleep: what it is
//! continues as a [`Sleeper`] here (its key, place under `max_sessions`,
//! log level, forwarded headers and `initialize`; its subscriptions stay in the session
//! registry) and both its `SessionState` and rmcp's session are dropped.
//! Its next request wakes it: rmcp finds no session, asks its session
//! store (this module, [`HibernationStore`]), which knows the id only while
//! it is asleep, re-creates the session and replays `initialize` with a
//! `SessionRestoreMarker`; the new handler rebuilds its state from the
//! sleeper ([`Hibernation::wake`]). The client sees one session throughout:
//! same id, log level, forwarded headers and subscriptions.
//!
//! A sleeper is made of allocations made when it falls asleep, not kept
//! from the session's creation: those sat among rmcp's freed blocks and
//! would hold their pages resident (glibc frees only whole pages).
//!
//! Only a session that would lose nothing sleeps: no `GET` stream, no
//! request in flight, no per-session upstream (its relay holds the
//! session's peer), no task within its TTL on a live upstream (the relay holds the peer for
//! its status and in-task requests; past the TTL the upstream may have
//! deleted it, and the session forgets it asleep). What rmcp held for its next `GET` is kept by
//! the session registry, with what it is told asleep, and told on waking
//! (`http::resumable`'s sweep hands it over before closing rmcp's session). A
//! session asleep past `session_idle_timeout` (counted from its last
//! request) or deleted by its client ends as an awake one would.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError, Weak,
    },
    time::{Duration, Instant},
};

use foldhash::HashMap;

use rmcp::{
    model::{InitializeRequestParams, LoggingLevel},
    transport::streamable_http_server::session::store::{
        SessionState as StoredSession, SessionStore, SessionStoreError,
    },
};

use super::{forwarded_headers::HeldClientHeaders, SessionState};
use crate::gateway::{Gateway, SessionKey, SessionTicket};

/// Sessions asleep and what waking them needs.
pub struct Hibernation {
    /// `None`: sessions never sleep.
    after: Option<Duration>,
    idle_timeout: Duration,
    /// Every initialized session awake, by rmcp's id (weak: never keeps
    /// one alive).
    live: Mutex<HashMap<Arc<str>, Weak<SessionState>>>,
    asleep: Mutex<HashMap<Arc<str>, Sleeper>>,
    /// Set at shutdown: no session falls asleep after.
    closed: AtomicBool,
}

/// What a session asleep keeps of its state, besides its `initialize`.
#[derive(Default)]
pub(crate) struct Kept {
    pub log_level: Option<LoggingLevel>,
    /// The client's values of the headers mounts forward, if it sent any.
    pub client_headers: Option<HeldClientHeaders>,
    /// The endpoint it was opened on (`None`: the main one).
    pub endpoint: Option<Arc<str>>,
}

/// A session asleep: what waking it needs.
pub(crate) struct Sleeper {
    key: SessionKey,
    ticket: Option<SessionTicket>,
    kept: Kept,
    /// The client's `initialize` params as JSON: one allocation rather
    /// than one per string in them.
    initialize: Box<str>,
    /// When it ends unless woken.
    ends_at: Instant,
    /// To leave the session registry when it ends asleep.
    gateway: Weak<Gateway>,
}

impl Sleeper {
    /// What a session continues as asleep, holding its place `ticket`;
    /// gives the ticket back if it cannot sleep (an `initialize` that does
    /// not serialize).
    pub(crate) fn new(
        gateway: &Arc<Gateway>,
        key: SessionKey,
        ticket: SessionTicket,
        kept: Kept,
        initialize: &InitializeRequestParams,
        ends_at: Instant,
    ) -> Result<Self, SessionTicket> {
        let Ok(initialize) = serde_json::to_string(initialize) else {
            // The session stays awake and keeps its place.
            return Err(ticket);
        };
        Ok(Self {
            key,
            ticket: Some(ticket),
            kept,
            initialize: initialize.into_boxed_str(),
            ends_at,
            gateway: Arc::downgrade(gateway),
        })
    }

    /// Its key, place under `max_sessions` and what it kept, as it wakes.
    pub(crate) fn into_parts(mut self) -> (SessionKey, SessionTicket, Kept) {
        let ticket = self.ticket.take().expect("a sleeper holds its ticket");
        (self.key, ticket, std::mem::take(&mut self.kept))
    }
}

impl Drop for Sleeper {
    /// Ending asleep (not woken): the session is gone.
    fn drop(&mut self) {
        if self.ticket.is_some() {
            if let Some(gateway) = self.gateway.upgrade() {
                gateway.session_ended(self.key);
            }
        }
    }
}

impl Hibernation {
    /// `after` `None` turns sleeping off.
    pub fn new(after: Option<Duration>, idle_timeout: Duration) -> Self {
        Self {
            after,
            idle_timeout,
            live: Mutex::default(),
            asleep: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// How long a session must be idle to sleep, if sessions sleep.
    pub fn after(&self) -> Option<Duration> {
        self.after
    }

    /// `state` is the session rmcp calls `id`.
    pub(crate) fn initialized(&self, id: &Arc<str>, state: &Arc<SessionState>) {
        lock(&self.live).insert(id.clone(), Arc::downgrade(state));
    }

    /// The state of session `id`, initialized and awake.
    pub(crate) fn awake(&self, id: &str) -> Option<Arc<SessionState>> {
        lock(&self.live).get(id).and_then(Weak::upgrade)
    }

    /// The session `id` has ended for good.
    pub(crate) fn ended(&self, id: &str) {
        lock(&self.live).remove(id);
    }

    /// Puts session `id`, unused for `unused_for`, to sleep if it would
    /// lose nothing, keyed by `fresh_id` (the same id, allocated now:
    /// rmcp's was allocated with the session and would pin a page), and
    /// returns its key; the caller then keeps what rmcp holds undelivered
    /// for it and closes rmcp's session. It ends `session_idle_timeout`
    /// after its last use, as an awake one would.
    pub fn put_to_sleep(
        &self,
        id: &str,
        fresh_id: &Arc<str>,
        unused_for: Duration,
    ) -> Option<SessionKey> {
        self.after?;
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let state = lock(&self.live).get(id).and_then(Weak::upgrade)?;
        let ends_at = Instant::now() + self.idle_timeout.saturating_sub(unused_for);
        let sleeper = state.fall_asleep(ends_at)?;
        let key = sleeper.key;
        lock(&self.live).remove(id);
        lock(&self.asleep).insert(fresh_id.clone(), sleeper);
        crate::telemetry::metrics().downstream_sessions_asleep.inc();
        Some(key)
    }

    /// Session `id`, asleep until now.
    pub(crate) fn wake(&self, id: &str) -> Option<Sleeper> {
        let sleeper = lock(&self.asleep).remove(id)?;
        crate::telemetry::metrics().downstream_sessions_asleep.dec();
        Some(sleeper)
    }

    /// The `initialize` session `id` fell asleep with, if it is asleep.
    /// rmcp asks as a request for the session arrives, to wake it: that is
    /// a use, so its idle timeout counts from now. The sweep ended a
    /// session between this and the replayed `initialize` otherwise, and
    /// the request got 500 (the wake failed) where it would have got 404
    /// a moment earlier.
    fn initialize_of(&self, id: &str) -> Option<InitializeRequestParams> {
        let mut asleep = lock(&self.asleep);
        let sleeper = asleep.get_mut(id)?;
        sleeper.ends_at = sleeper.ends_at.max(Instant::now() + self.idle_timeout);
        serde_json::from_str(&sleeper.initialize).ok()
    }

    /// Ends session `id` if it is asleep (its client deleted it); whether it was.
    pub fn end_asleep(&self, id: &str) -> bool {
        let Some(sleeper) = lock(&self.asleep).remove(id) else {
            return false;
        };
        crate::telemetry::metrics().downstream_sessions_asleep.dec();
        drop(sleeper);
        true
    }

    /// Every session initialized and awake.
    pub(crate) fn all_awake(&self) -> Vec<Arc<SessionState>> {
        self.awake_by_id()
            .into_iter()
            .map(|(_, state)| state)
            .collect()
    }

    /// Every session initialized and awake, with rmcp's id for it. The
    /// states are taken out of the lock before they are upgraded: the
    /// last one dropped would end its session under it.
    fn awake_by_id(&self) -> Vec<(Arc<str>, Arc<SessionState>)> {
        let live: Vec<(Arc<str>, Weak<SessionState>)> = lock(&self.live)
            .iter()
            .map(|(id, state)| (id.clone(), state.clone()))
            .collect();
        live.into_iter()
            .filter_map(|(id, state)| Some((id, state.upgrade()?)))
            .collect()
    }

    /// The sessions opened on an endpoint `exists` no longer finds (a
    /// reload removed it): the ids of those awake, for the caller to end,
    /// and of those asleep, ended here. Clients of such a session get 404
    /// on its endpoint's path, but one holding a stream open would keep
    /// it (and its place under `max_sessions`) for as long as it stayed.
    pub(crate) fn of_removed_endpoints(
        &self,
        exists: impl Fn(&str) -> bool,
    ) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        let gone = |endpoint: Option<&str>| endpoint.is_some_and(|name| !exists(name));
        let awake = self
            .awake_by_id()
            .into_iter()
            .filter(|(_, state)| gone(state.endpoint()))
            .map(|(id, _)| id)
            .collect();
        let asleep: Vec<Arc<str>> = lock(&self.asleep)
            .iter()
            .filter(|(_, sleeper)| gone(sleeper.kept.endpoint.as_deref()))
            .map(|(id, _)| id.clone())
            .collect();
        let ended = asleep
            .into_iter()
            .filter(|id| self.end_asleep(id))
            .collect();
        (awake, ended)
    }

    /// Ends every session asleep (shutdown).
    pub fn end_all(&self) {
        self.closed.store(true, Ordering::Release);
        let all: Vec<Arc<str>> = lock(&self.asleep).keys().cloned().collect();
        for id in all {
            self.end_asleep(&id);
        }
    }

    /// Ends the sessions asleep past their idle timeout; their ids.
    pub fn expire(&self, now: Instant) -> Vec<Arc<str>> {
        let expired: Vec<Arc<str>> = lock(&self.asleep)
            .iter()
            .filter(|(_, sleeper)| sleeper.ends_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        expired
            .into_iter()
            .filter(|id| self.end_asleep(id))
            .collect()
    }
}

/// rmcp's session store: the `initialize` of sessions asleep. An id awake,
/// ended or never seen is unknown here, so rmcp answers 404 for it as
/// without a store.
pub struct HibernationStore(pub Arc<Hibernation>);

#[async_trait::async_trait]
impl SessionStore for HibernationStore {
    async fn load(&self, session_id: &str) -> Result<Option<StoredSession>, SessionStoreError> {
        Ok(self.0.initialize_of(session_id).map(StoredSession::new))
    }

    /// Nothing to do: a session's `initialize` is kept in its state, and
    /// only here once it sleeps.
    async fn store(
        &self,
        _session_id: &str,
        _state: &StoredSession,
    ) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.0.end_asleep(session_id);
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session asleep whose wake has begun (rmcp loaded its
    /// `initialize`) is not ended by the sweep before it wakes.
    #[test]
    fn a_session_being_woken_is_not_expired_under_it() {
        let gateway = Gateway::new(crate::config::embedded_for_tests());
        let hibernation = Hibernation::new(Some(Duration::from_secs(1)), Duration::from_secs(60));
        let ticket = gateway.sessions().reserve(1).expect("a place");
        let initialize = InitializeRequestParams::default();
        let due = Instant::now();
        let sleeper = Sleeper::new(&gateway, 7, ticket, Kept::default(), &initialize, due)
            .unwrap_or_else(|_| panic!("a sleeper"));
        lock(&hibernation.asleep).insert(Arc::from("s"), sleeper);
        assert!(hibernation.initialize_of("s").is_some(), "its wake begins");
        assert!(
            hibernation.expire(Instant::now()).is_empty(),
            "ended under the wake"
        );
        assert!(hibernation.initialize_of("s").is_some());
    }
}
