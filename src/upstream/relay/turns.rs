//! The order of an upstream's progress and log notifications: rmcp hands
//! each to a task of its own, and they are relayed in the order they
//! arrived ([`Relay::wait_turn`]), each answer after those before it
//! ([`Relay::drain`]).

use std::{
    sync::{atomic::Ordering, Arc},
    time::Instant,
};

use tokio::sync::Notify;

use super::{lock, Relay, TURN_LIMIT};
use crate::wait_for_zero::count_down;

/// Marks a notification counted as pending ([`Relay::notification_arrived`]),
/// carried in its extensions from the transport to the handler; with its
/// place in its upstream's wire order when it is relayed in that order
/// (progress, log messages), and where it was read among every message
/// the transport read (answers included: see [`Relay::answer_read`]).
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    place: Option<u64>,
    pub(super) read_at: u64,
    /// When it was read: how long ago a request ended counts from then,
    /// not from when a task got round to it.
    pub(super) read_when: Instant,
}

/// Where an upstream's request (sampling, elicitation, roots) was read
/// among every message the transport read, carried in its extensions:
/// a request read after an abandoned call's answer is not that call's.
#[derive(Clone, Copy, Debug)]
pub struct RequestRead(pub(super) u64);

impl Relay {
    /// A request of the upstream's was read (called in wire order).
    pub fn request_arrived(&self) -> RequestRead {
        RequestRead(self.reads.fetch_add(1, Ordering::AcqRel))
    }

    /// A notification an answer must wait for arrived (called in wire
    /// order): it is pending until handled, and, if it is relayed `in_order`
    /// (progress, logs), gets its place in that order. Others (a cancel, a
    /// `list_changed`) take no turn: one handled at once must not let a
    /// later progress overtake an earlier one.
    pub fn notification_arrived(&self, in_order: bool) -> Arrival {
        self.pending_notifications.fetch_add(1, Ordering::AcqRel);
        Arrival {
            place: in_order.then(|| self.arrivals.fetch_add(1, Ordering::AcqRel)),
            read_at: self.reads.fetch_add(1, Ordering::AcqRel),
            read_when: Instant::now(),
        }
    }

    /// A notification counted by `notification_arrived` has been handled
    /// (`None`: one that was not counted); the next one's turn comes.
    pub fn notification_relayed(&self, arrival: Option<Arrival>) {
        let Some(Arrival { place, .. }) = arrival else {
            return;
        };
        if let Some(place) = place {
            let turn = self
                .turn
                .fetch_max(place + 1, Ordering::AcqRel)
                .max(place + 1);
            let due = {
                let mut waiting = lock(&self.turn_waiters);
                let later = waiting.split_off(&(turn + 1));
                std::mem::replace(&mut *waiting, later)
            };
            for woken in due.into_values() {
                woken.notify_one();
            }
        }
        // `drain` waits for none pending (a waiter per answer).
        let before = count_down(&self.pending_notifications, &self.relayed);
        debug_assert!(before > 0, "more notifications relayed than arrived");
    }

    /// Waits (bounded, [`TURN_LIMIT`]) until every progress or log
    /// notification that arrived before `arrival` has been relayed. rmcp
    /// hands each notification to a task of its own; without this they
    /// reach the client in whatever order those tasks run, progress 2
    /// before progress 1.
    pub async fn wait_turn(&self, arrival: Arrival) {
        let Some(place) = arrival.place else {
            return;
        };
        if self.turn.load(Ordering::Acquire) >= place {
            return;
        }
        let woken = Arc::new(Notify::new());
        lock(&self.turn_waiters).insert(place, woken.clone());
        // Checked again once registered: a relay that advanced the turn
        // before seeing this waiter is seen here (it advances the turn
        // before it looks for waiters); one after leaves a permit.
        if self.turn.load(Ordering::Acquire) < place
            && tokio::time::timeout(TURN_LIMIT, woken.notified())
                .await
                .is_err()
        {
            tracing::debug!("relaying a notification before an earlier one");
        }
        lock(&self.turn_waiters).remove(&place);
    }
}
