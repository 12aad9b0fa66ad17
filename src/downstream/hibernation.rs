//! Idle sessions asleep: their state kept, rmcp's machinery gone.
//!
//! Each live rmcp session costs ~55 KiB (its worker task, service loop and
//! their channels; BENCHMARKS.md), whatever the client does with it. A
//! session that has had nothing in flight, no stream open and no request
//! for `server.session_hibernate_after` is put to sleep: its
//! [`SessionState`] moves here and rmcp's session is closed. Its next
//! request wakes it: rmcp finds no session, asks its session store (this
//! module, [`HibernationStore`]), which knows the id only while it is
//! asleep, re-creates the session and replays `initialize` with a
//! `SessionRestoreMarker`; the new handler takes the kept state back
//! ([`Hibernation::wake`]). The client sees one session throughout: same
//! id, log level, subscriptions and tasks.
//!
//! Only a session that would lose nothing sleeps: no `GET` stream (so no
//! message could reach it meanwhile anyway), no request in flight, no
//! per-session upstream (its relay holds the session's peer). A session
//! asleep past `session_idle_timeout` (counted from its last request) or
//! deleted by its client ends as an awake one would.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError, Weak,
    },
    time::{Duration, Instant},
};

use rmcp::{
    model::InitializeRequestParams,
    transport::streamable_http_server::session::store::{
        SessionState as StoredSession, SessionStore, SessionStoreError,
    },
};

use super::SessionState;

/// Sessions asleep and what waking them needs.
pub struct Hibernation {
    /// `None`: sessions never sleep.
    after: Option<Duration>,
    idle_timeout: Duration,
    /// Every initialized session, by rmcp's id (weak: never keeps one alive).
    live: Mutex<HashMap<Arc<str>, Weak<SessionState>>>,
    asleep: Mutex<HashMap<Arc<str>, Asleep>>,
    /// Each session's `initialize` params, which rmcp replays on waking.
    params: Mutex<HashMap<Arc<str>, InitializeRequestParams>>,
    /// Set at shutdown: no session falls asleep after.
    closed: AtomicBool,
}

struct Asleep {
    state: Arc<SessionState>,
    /// When it ends unless woken.
    ends_at: Instant,
}

impl Hibernation {
    /// `after` `None` turns sleeping off.
    pub fn new(after: Option<Duration>, idle_timeout: Duration) -> Self {
        Self {
            after,
            idle_timeout,
            live: Mutex::default(),
            asleep: Mutex::default(),
            params: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// How long a session must be idle to sleep, if sessions sleep.
    pub fn after(&self) -> Option<Duration> {
        self.after
    }

    /// `state` is the session rmcp calls `id`.
    pub(crate) fn initialized(&self, id: &str, state: &Arc<SessionState>) {
        lock(&self.live).insert(id.into(), Arc::downgrade(state));
    }

    /// The session `id` has ended for good.
    pub(crate) fn ended(&self, id: &str) {
        lock(&self.live).remove(id);
        lock(&self.params).remove(id);
    }

    /// Puts session `id` to sleep if it would lose nothing; the caller then
    /// closes rmcp's session. Its state stays here until woken or ended.
    pub fn put_to_sleep(&self, id: &str) -> bool {
        let Some(after) = self.after else {
            return false;
        };
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let Some(state) = lock(&self.live).get(id).and_then(Weak::upgrade) else {
            return false;
        };
        if !state.may_sleep() {
            return false;
        }
        state.fall_asleep();
        let ends_at = Instant::now() + self.idle_timeout.saturating_sub(after);
        lock(&self.asleep).insert(id.into(), Asleep { state, ends_at });
        crate::telemetry::metrics().downstream_sessions_asleep.inc();
        true
    }

    /// The kept state of session `id`, which is now awake again.
    pub(crate) fn wake(&self, id: &str) -> Option<Arc<SessionState>> {
        let asleep = lock(&self.asleep).remove(id)?;
        crate::telemetry::metrics().downstream_sessions_asleep.dec();
        Some(asleep.state)
    }

    pub fn is_asleep(&self, id: &str) -> bool {
        lock(&self.asleep).contains_key(id)
    }

    /// Ends session `id` if it is asleep (its client deleted it); whether it was.
    pub fn end_asleep(&self, id: &str) -> bool {
        let Some(asleep) = lock(&self.asleep).remove(id) else {
            return false;
        };
        crate::telemetry::metrics().downstream_sessions_asleep.dec();
        drop(asleep);
        self.ended(id);
        true
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
        let expired: Vec<(Arc<str>, Asleep)> = {
            let mut asleep = lock(&self.asleep);
            let ids: Vec<Arc<str>> = asleep
                .iter()
                .filter(|(_, entry)| entry.ends_at <= now)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| asleep.remove(&id).map(|entry| (id, entry)))
                .collect()
        };
        let mut ids = Vec::with_capacity(expired.len());
        for (id, entry) in expired {
            crate::telemetry::metrics().downstream_sessions_asleep.dec();
            // Dropping the state ends the session (`SessionState::drop`).
            drop(entry);
            self.ended(&id);
            ids.push(id);
        }
        ids
    }
}

/// rmcp's session store: the `initialize` params of sessions asleep. An
/// id awake, ended or never seen is unknown here, so rmcp answers 404 for
/// it as without a store.
pub struct HibernationStore(pub Arc<Hibernation>);

#[async_trait::async_trait]
impl SessionStore for HibernationStore {
    async fn load(&self, session_id: &str) -> Result<Option<StoredSession>, SessionStoreError> {
        if !self.0.is_asleep(session_id) {
            return Ok(None);
        }
        Ok(lock(&self.0.params)
            .get(session_id)
            .cloned()
            .map(StoredSession::new))
    }

    async fn store(
        &self,
        session_id: &str,
        state: &StoredSession,
    ) -> Result<(), SessionStoreError> {
        lock(&self.0.params).insert(session_id.into(), state.initialize_params.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.0.end_asleep(session_id);
        lock(&self.0.params).remove(session_id);
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
