//! One lock per session for opening its standalone (`GET`) stream.
//!
//! Opening a standalone stream cuts the session's old ones, replays what
//! was kept and registers the new one; two at once (a client's reconnects
//! overlapping) each replayed what was kept, one of them onto rmcp's
//! "shadow" stream, and the client got it twice. So a session's openings
//! (and the sweep's read of what a session falling asleep had not sent)
//! take turns. Only the session's own: an opening waits on the session's
//! rmcp worker, which waits as long as a client that stopped reading its
//! answers lets a full stream wait, and one such client held every other
//! session's `GET` (and the sweep) behind it while the lock was one.
//! An opening gives up after waiting [`OPENING_LIMIT`] for its turn, or as
//! long for the session's worker.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use foldhash::HashMap;

use rmcp::transport::streamable_http_server::session::SessionId;

use super::lock;

/// How long an opening waits for its turn and for the session's rmcp
/// worker: a worker this slow is stuck behind a client that reads nothing.
pub(super) const OPENING_LIMIT: Duration = Duration::from_secs(10);

type TurnLock = Arc<tokio::sync::Mutex<()>>;

/// The sessions with an opening under way or waiting, each with its lock.
#[derive(Default)]
pub(super) struct Openings {
    turns: Mutex<HashMap<SessionId, TurnLock>>,
}

/// A session's turn to open its standalone stream, until dropped.
pub(super) struct Turn<'a> {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    session: SessionId,
    openings: &'a Openings,
}

impl Openings {
    /// Waits for `session`'s turn (other sessions' openings go on).
    pub(super) async fn turn(&self, session: &SessionId) -> Turn<'_> {
        let turn_lock = lock(&self.turns)
            .entry(session.clone())
            .or_default()
            .clone();
        // Made before the wait: a turn given up on (its future dropped)
        // still takes its lock out of the map.
        let mut turn = Turn {
            guard: None,
            session: session.clone(),
            openings: self,
        };
        turn.guard = Some(turn_lock.lock_owned().await);
        turn
    }

    /// [`Self::turn`], waited for at most [`OPENING_LIMIT`]: the turn
    /// ahead may itself wait that long on a held-up worker, and a client
    /// reconnecting again and again would queue behind each.
    pub(super) async fn turn_within_limit(&self, session: &SessionId) -> Option<Turn<'_>> {
        tokio::time::timeout(OPENING_LIMIT, self.turn(session))
            .await
            .ok()
    }

    /// How many sessions have a lock now (an opening under way or waiting).
    #[cfg(test)]
    fn held(&self) -> usize {
        lock(&self.turns).len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut turns = lock(&self.openings.turns);
        // The map's is the last: no turn holds or waits for this lock.
        if turns
            .get(&self.session)
            .is_some_and(|turn_lock| Arc::strong_count(turn_lock) == 1)
        {
            turns.remove(&self.session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn one_sessions_opening_holds_no_other_session_back() {
        let openings = Openings::default();
        let stuck = SessionId::from("stuck");
        let other = SessionId::from("other");
        let held = openings.turn(&stuck).await;
        assert!(
            openings.turn(&other).now_or_never().is_some(),
            "another session's opening waited on a stuck one"
        );
        assert!(
            openings.turn(&stuck).now_or_never().is_none(),
            "a session's two openings went at once"
        );
        drop(held);
        assert!(openings.turn(&stuck).now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_lock_goes_with_the_last_turn_of_its_session() {
        let openings = Openings::default();
        let session = SessionId::from("s");
        let first = openings.turn(&session).await;
        let mut waiting = Box::pin(openings.turn(&session));
        assert!((&mut waiting).now_or_never().is_none());
        drop(first);
        let second = waiting.await;
        assert_eq!(openings.held(), 1, "the waiting turn's lock went early");
        drop(second);
        assert_eq!(openings.held(), 0, "an idle session kept its lock");
        // A turn given up on while it waited, the last, lets go of it too.
        let held = openings.turn(&session).await;
        let mut given_up = Box::pin(openings.turn(&session));
        assert!((&mut given_up).now_or_never().is_none());
        drop(held);
        assert_eq!(openings.held(), 1);
        drop(given_up);
        assert_eq!(openings.held(), 0, "a turn given up on kept its lock");
    }
}
