//! When each session was last used, and which ones are asleep.
//!
//! Every request names its session to rmcp's session manager first
//! (`has_session`), so that call marks the session used; streams it opens
//! count as use for as long as they are open. A session unused for
//! `session_hibernate_after` with no stream open is a candidate to sleep
//! (`downstream::hibernation` decides). While it is being put to sleep it
//! is `Closing`: a request arriving then waits the moment out, and then
//! wakes it, rather than being told the session does not exist. While it
//! wakes it is `Waking`: rmcp has its new session in place but has not
//! replayed its handshake yet, and a request reaching it then would stop
//! it (rmcp's worker takes nothing before `initialize`); a request arriving
//! then waits too, and finds it awake. The first request to find a session
//! asleep claims its wake (`WakeClaimed`), and those after it wait for that
//! wake: rmcp joins only restores that overlap, so a request that found the
//! session asleep but reached rmcp's restore after the wake was done would
//! find nothing to restore and be told the session does not exist.

use std::{
    cell::Cell,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use foldhash::HashMap;

use rmcp::transport::streamable_http_server::session::SessionId;
// Tokio's clock, so that the tests can move it instead of sleeping.
use tokio::{sync::Notify, time::Instant};

/// How long a request waits for a session being put to sleep or woken.
const CLOSING_WAIT: Duration = Duration::from_secs(5);

thread_local! {
    /// Set by `restore_session` for the session factory rmcp calls next,
    /// on the same thread with no await between (see `take_waking`).
    static WAKING: Cell<bool> = const { Cell::new(false) };
}

/// Tells the session factory that the session it is about to make is a
/// session waking up (which already holds its place under `max_sessions`).
pub(super) fn mark_waking() {
    WAKING.with(|waking| waking.set(true));
}

/// Whether the session being made is one waking up.
pub fn take_waking() -> bool {
    WAKING.with(|waking| waking.replace(false))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Awake,
    Closing,
    Asleep,
    /// Asleep, and a request has begun to wake it (see
    /// [`Activity::used_claiming_wake`]).
    WakeClaimed,
    /// Restored, its handshake not replayed yet.
    Waking,
}

/// What a caller of [`Activity::settle`] waits out, and what it takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// A use: waits while the session closes or wakes.
    Use,
    /// A use by a request that wakes the session if it is asleep.
    UseClaimingWake,
    /// The wake itself: waits only while the session closes.
    Wake,
}

struct Entry {
    last_used: Instant,
    open_streams: usize,
    phase: Phase,
    /// rmcp closes a session once more after its service ends; for a
    /// session put to sleep that call must do nothing.
    closed_for_sleep: bool,
}

#[derive(Default)]
pub(super) struct Activity {
    sessions: Mutex<HashMap<SessionId, Entry>>,
    /// Woken whenever a session's phase changes (it leaves `Closing`, or
    /// a wake is done) or its entry goes.
    settled: Notify,
}

impl Activity {
    pub(super) fn created(&self, id: &SessionId) {
        self.created_in(id, Phase::Awake);
    }

    /// A sleeping session restored (see [`Phase::Waking`]).
    pub(super) fn waking(&self, id: &SessionId) {
        self.created_in(id, Phase::Waking);
    }

    fn created_in(&self, id: &SessionId, phase: Phase) {
        let mut sessions = lock(&self.sessions);
        // Woken before rmcp's late close of its sleeping self came: that
        // close must still do nothing, not end the woken session.
        let late_close_pending = sessions.get(id).is_some_and(|entry| entry.closed_for_sleep);
        sessions.insert(
            id.clone(),
            Entry {
                last_used: Instant::now(),
                open_streams: 0,
                phase,
                closed_for_sleep: late_close_pending,
            },
        );
    }

    /// Marks `id` used now; its phase once it is neither `Closing` nor
    /// waking (`None`: unknown here), or after [`CLOSING_WAIT`].
    pub(super) async fn used(&self, id: &SessionId) -> Option<Phase> {
        self.settle(id, Settle::Use).await
    }

    /// Marks `id` used now if it is awake, and says whether it was; waits
    /// for nothing (a session changing state is [`Activity::used`]'s or
    /// [`Activity::used_claiming_wake`]'s to wait for).
    pub(super) fn used_if_awake(&self, id: &SessionId) -> bool {
        let mut sessions = lock(&self.sessions);
        match sessions.get_mut(id) {
            Some(entry) if entry.phase == Phase::Awake => {
                entry.last_used = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// As [`Activity::used`], for a request that wakes the session if it
    /// is asleep: only the first to find it `Asleep` is told so, and claims
    /// the wake; those after it wait for that wake and find it awake. A
    /// claim whose request went away before waking it (its client gone)
    /// is taken over after [`CLOSING_WAIT`].
    pub(super) async fn used_claiming_wake(&self, id: &SessionId) -> Option<Phase> {
        self.settle(id, Settle::UseClaimingWake).await
    }

    /// Waits while `id` is being put to sleep, for the wake that follows.
    pub(super) async fn closed(&self, id: &SessionId) {
        self.settle(id, Settle::Wake).await;
    }

    async fn settle(&self, id: &SessionId, how: Settle) -> Option<Phase> {
        let deadline = Instant::now() + CLOSING_WAIT;
        loop {
            let settled = self.settled.notified();
            {
                let mut sessions = lock(&self.sessions);
                let entry = sessions.get_mut(id)?;
                let waits = match entry.phase {
                    Phase::Closing => true,
                    Phase::WakeClaimed | Phase::Waking => how != Settle::Wake,
                    Phase::Awake | Phase::Asleep => false,
                };
                if !waits || Instant::now() >= deadline {
                    let phase = match entry.phase {
                        // Not woken (yet): still asleep.
                        Phase::WakeClaimed => Phase::Asleep,
                        phase => phase,
                    };
                    if how == Settle::UseClaimingWake && phase == Phase::Asleep {
                        entry.phase = Phase::WakeClaimed;
                    }
                    entry.last_used = Instant::now();
                    return Some(phase);
                }
            }
            let _ = tokio::time::timeout_at(deadline, settled).await;
        }
    }

    /// Not a use: a session refused sleep (a per-session upstream open, a
    /// task) goes back to `Awake` as idle as it was, so that
    /// `session_idle_timeout` still ends it.
    pub(super) fn set_phase(&self, id: &SessionId, phase: Phase) {
        if let Some(entry) = lock(&self.sessions).get_mut(id) {
            entry.phase = phase;
        }
        self.settled.notify_waiters();
    }

    /// `id` is about to be closed to sleep (see `Entry::closed_for_sleep`).
    pub(super) fn closing_for_sleep(&self, id: &SessionId) {
        if let Some(entry) = lock(&self.sessions).get_mut(id) {
            entry.closed_for_sleep = true;
        }
    }

    /// Whether this close of `id` is rmcp's, after it was closed to sleep.
    pub(super) fn take_close_for_sleep(&self, id: &SessionId) -> bool {
        lock(&self.sessions)
            .get_mut(id)
            .is_some_and(|entry| std::mem::take(&mut entry.closed_for_sleep))
    }

    /// Gives `id`'s entry a key allocated now (`fresh_id`, the same id):
    /// rmcp's was allocated with
    /// the session, among blocks now freed, and would keep their page
    /// resident while the session sleeps.
    pub(super) fn rekey(&self, id: &SessionId, fresh_id: &SessionId) {
        let mut sessions = lock(&self.sessions);
        if let Some(entry) = sessions.remove(id) {
            sessions.insert(fresh_id.clone(), entry);
        }
    }

    pub(super) fn forget(&self, id: &SessionId) {
        lock(&self.sessions).remove(id);
        self.settled.notify_waiters();
    }

    /// A stream of `id` opened; the session counts as used until the
    /// returned guard is dropped.
    pub(super) fn stream_opened(self: &Arc<Self>, id: &SessionId) -> OpenStream {
        if let Some(entry) = lock(&self.sessions).get_mut(id) {
            entry.open_streams += 1;
            entry.last_used = Instant::now();
        }
        OpenStream {
            activity: self.clone(),
            id: id.clone(),
        }
    }

    /// Awake sessions unused for `limit` with no stream open: idle, for
    /// `session_idle_timeout`. Left as they are (the caller ends them).
    pub(super) fn idle_for(&self, limit: Duration) -> Vec<SessionId> {
        let now = Instant::now();
        lock(&self.sessions)
            .iter()
            .filter(|(_, entry)| {
                entry.phase == Phase::Awake
                    && entry.open_streams == 0
                    && now.duration_since(entry.last_used) >= limit
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Awake sessions unused for `after` with no stream open, now marked
    /// `Closing` (the caller settles each one), with how long each has
    /// been unused (it may have been refused sleep before).
    pub(super) fn begin_sleep(&self, after: Duration) -> Vec<(SessionId, Duration)> {
        let now = Instant::now();
        let mut sessions = lock(&self.sessions);
        sessions
            .iter_mut()
            .filter(|(_, entry)| {
                entry.phase == Phase::Awake
                    && entry.open_streams == 0
                    && now.duration_since(entry.last_used) >= after
            })
            .map(|(id, entry)| {
                entry.phase = Phase::Closing;
                (id.clone(), now.duration_since(entry.last_used))
            })
            .collect()
    }
}

/// Held by an open stream (see [`Activity::stream_opened`]).
pub(super) struct OpenStream {
    activity: Arc<Activity>,
    id: SessionId,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Some(entry) = lock(&self.activity.sessions).get_mut(&self.id) {
            entry.open_streams = entry.open_streams.saturating_sub(1);
            entry.last_used = Instant::now();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmcp's late close of a session put to sleep may come after a
    /// request has woken it: that close is still the one to ignore, once.
    #[test]
    fn a_late_close_of_the_sleeping_session_spares_the_woken_one() {
        let activity = Activity::default();
        let id: SessionId = "s1".into();
        activity.created(&id);
        activity.closing_for_sleep(&id);
        activity.set_phase(&id, Phase::Asleep);
        // Woken (restored) before the old rmcp session's close came.
        activity.created(&id);
        assert!(activity.take_close_for_sleep(&id), "the late close");
        assert!(!activity.take_close_for_sleep(&id), "a real close after it");
        // Woken after the late close came: nothing left to ignore.
        activity.closing_for_sleep(&id);
        assert!(activity.take_close_for_sleep(&id));
        activity.created(&id);
        assert!(!activity.take_close_for_sleep(&id));
    }

    #[tokio::test(start_paused = true)]
    async fn only_unused_sessions_without_streams_begin_to_sleep() {
        let activity = Arc::new(Activity::default());
        let (quiet, streaming): (SessionId, SessionId) = ("quiet".into(), "streaming".into());
        activity.created(&quiet);
        activity.created(&streaming);
        let stream = activity.stream_opened(&streaming);
        tokio::time::advance(Duration::from_millis(20)).await;
        assert_eq!(
            activity.begin_sleep(Duration::from_millis(10)),
            [(quiet.clone(), Duration::from_millis(20))]
        );
        assert_eq!(activity.begin_sleep(Duration::from_millis(10)), []);
        drop(stream);
        // Just used (its stream closed): not yet.
        assert!(activity.begin_sleep(Duration::from_millis(10)).is_empty());
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(
            activity.begin_sleep(Duration::from_millis(10)),
            [(streaming.clone(), Duration::from_millis(10))]
        );
        activity.set_phase(&quiet, Phase::Asleep);
        assert_eq!(activity.used(&quiet).await, Some(Phase::Asleep));
        assert_eq!(activity.used(&"unknown".into()).await, None);
    }

    /// A session refused sleep (a per-session upstream open, say) is as
    /// unused as before: the idle timeout and its sleep's end still count
    /// from its last use.
    #[tokio::test(start_paused = true)]
    async fn a_refused_sleep_is_not_a_use() {
        let activity = Arc::new(Activity::default());
        let id: SessionId = "kept-awake".into();
        activity.created(&id);
        tokio::time::advance(Duration::from_millis(20)).await;
        assert_eq!(
            activity.begin_sleep(Duration::from_millis(10)),
            [(id.clone(), Duration::from_millis(20))]
        );
        activity.set_phase(&id, Phase::Awake);
        tokio::time::advance(Duration::from_millis(20)).await;
        assert_eq!(
            activity.idle_for(Duration::from_millis(30)),
            std::slice::from_ref(&id)
        );
        assert_eq!(
            activity.begin_sleep(Duration::from_millis(10)),
            [(id.clone(), Duration::from_millis(40))]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_means_unused_with_no_stream_open() {
        let activity = Arc::new(Activity::default());
        let (quiet, streaming, busy): (SessionId, SessionId, SessionId) =
            ("quiet".into(), "streaming".into(), "busy".into());
        for id in [&quiet, &streaming, &busy] {
            activity.created(id);
        }
        let _stream = activity.stream_opened(&streaming);
        tokio::time::advance(Duration::from_millis(20)).await;
        activity.used(&busy).await;
        assert_eq!(
            activity.idle_for(Duration::from_millis(10)),
            std::slice::from_ref(&quiet)
        );
        // Still there: ending it is the caller's.
        assert_eq!(activity.used(&quiet).await, Some(Phase::Awake));
    }

    /// A request using `id`, shown still waiting halfway through the
    /// wait's bound (paused time).
    async fn still_waiting_to_use(
        activity: &Arc<Activity>,
        id: &SessionId,
    ) -> tokio::task::JoinHandle<Option<Phase>> {
        let waiter = {
            let activity = activity.clone();
            let id = id.clone();
            tokio::spawn(async move { activity.used(&id).await })
        };
        tokio::time::advance(CLOSING_WAIT / 2).await;
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "it waits for the session to settle");
        waiter
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_while_its_session_is_closing() {
        let activity = Arc::new(Activity::default());
        let id: SessionId = "s".into();
        activity.created(&id);
        assert_eq!(
            activity.begin_sleep(Duration::ZERO),
            [(id.clone(), Duration::ZERO)]
        );
        let waiter = still_waiting_to_use(&activity, &id).await;
        activity.set_phase(&id, Phase::Asleep);
        assert_eq!(waiter.await.unwrap(), Some(Phase::Asleep));
    }

    /// A request for a session being woken waits until its handshake has
    /// been replayed, and finds it awake.
    #[tokio::test(start_paused = true)]
    async fn a_request_waits_while_its_session_wakes() {
        let activity = Arc::new(Activity::default());
        let id: SessionId = "s".into();
        activity.waking(&id);
        let waiter = still_waiting_to_use(&activity, &id).await;
        activity.set_phase(&id, Phase::Awake);
        assert_eq!(waiter.await.unwrap(), Some(Phase::Awake));
    }

    /// Of requests finding a session asleep together, only the first wakes
    /// it; the others wait for that wake and find the session awake (rmcp
    /// would answer 404 to one reaching its restore after the wake).
    #[tokio::test(start_paused = true)]
    async fn only_the_first_request_to_find_a_session_asleep_wakes_it() {
        let activity = Arc::new(Activity::default());
        let id: SessionId = "s".into();
        activity.created(&id);
        activity.set_phase(&id, Phase::Asleep);
        assert_eq!(
            activity.used_claiming_wake(&id).await,
            Some(Phase::Asleep),
            "the first wakes it"
        );
        let second = {
            let (activity, id) = (activity.clone(), id.clone());
            tokio::spawn(async move { activity.used_claiming_wake(&id).await })
        };
        tokio::time::advance(CLOSING_WAIT / 2).await;
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "the second waits for the wake");
        // The wake itself does not wait for its own claim.
        activity.closed(&id).await;
        activity.waking(&id);
        activity.set_phase(&id, Phase::Awake);
        assert_eq!(second.await.unwrap(), Some(Phase::Awake));
    }

    /// A wake claimed by a request that went away is taken over by the
    /// next request once the wait is over; a close then finds it asleep.
    #[tokio::test(start_paused = true)]
    async fn an_abandoned_wake_is_taken_over() {
        let activity = Arc::new(Activity::default());
        let id: SessionId = "s".into();
        activity.created(&id);
        activity.set_phase(&id, Phase::Asleep);
        assert_eq!(activity.used_claiming_wake(&id).await, Some(Phase::Asleep));
        let started = Instant::now();
        assert_eq!(activity.used_claiming_wake(&id).await, Some(Phase::Asleep));
        assert_eq!(started.elapsed(), CLOSING_WAIT);
        assert_eq!(activity.used(&id).await, Some(Phase::Asleep));
    }
}
