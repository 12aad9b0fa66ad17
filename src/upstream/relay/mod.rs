//! Who, downstream, an upstream's message is for.
//!
//! Every request the gateway sends upstream is registered here with its
//! [`Caller`]: the downstream session and request that caused it. When the
//! upstream then sends progress, a log message or a request of its own
//! (sampling, elicitation, roots), [`Relay::attribute`] finds the caller,
//! by the rules in `attribute.rs`; anything ambiguous is refused, never
//! guessed or broadcast.
//!
//! Here: the [`Relay`] of one upstream session, its state and its bounds.
//! The registry of requests in flight and what an ended one leaves behind
//! are in `inflight.rs`, the attribution in `attribute.rs`, a [`Caller`]
//! and how a message reaches it in `caller.rs`, the upstream's requests
//! being forwarded to clients in `forwarding.rs`, the owners of tasks in
//! `tasks.rs`, the order notifications are relayed in in `turns.rs`.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, AtomicUsize},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use rmcp::model::{CustomNotification, RequestId};

mod attribute;
mod caller;
mod forwarding;
mod inflight;
mod tasks;
#[cfg(test)]
mod tests;
mod turns;

pub use attribute::Unattributed;
pub use caller::{Caller, LogLevelSetting};
pub use forwarding::Forwarding;
pub use inflight::{AwaitingClient, InflightGuard, SendingGuard};
pub use tasks::{related_task, set_related_task, TaskOwner, RELATED_TASK};
use tasks::{FORGOTTEN_TASKS_MAX, TASKS_MAX};
pub use turns::{Arrival, RequestRead};

use super::bounded_map::BoundedMap;
use crate::wait_for_zero::wait_for_zero;
use inflight::{AbandonedRequest, Ended, Inflight};

/// Bound on the URL elicitations remembered per upstream session.
const ELICITATIONS_MAX: usize = 1024;
/// The JSON-RPC error of a request that needs URL elicitations first
/// (2025-11-25); its `data.elicitations` lists them.
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

#[derive(Default)]
pub struct Relay {
    /// Upstream request id → the request in flight.
    inflight: Mutex<HashMap<RequestId, Inflight>>,
    /// URL-mode elicitation id → the downstream session it was relayed
    /// to, so the upstream's `notifications/elicitation/complete` reaches
    /// only it. The session's key, not its caller: a completion is told to
    /// the session however long the client takes in its browser, asleep
    /// or awake, and a caller would keep the peer of a session gone to
    /// sleep (and rmcp's machinery behind it) as long as the entry lives.
    elicitations: Mutex<BoundedMap<u64, ELICITATIONS_MAX>>,
    /// Upstream task id → its owner.
    tasks: Mutex<BoundedMap<TaskOwner, TASKS_MAX>>,
    /// Tasks whose owner went from `tasks` to keep it bounded. A message
    /// naming one of them belongs to a session no longer known here: it
    /// must not go to whichever session the other rules would pick (an
    /// elicitation of one client's task answered by another).
    forgotten_tasks: Mutex<BoundedMap<(), FORGOTTEN_TASKS_MAX>>,
    /// Status notifications of tasks no session is known to own yet: a
    /// server may announce a task before it answers the request that
    /// created it. Kept for [`LINGER`], at most [`RECENT_MAX`].
    early_statuses: Mutex<VecDeque<(Instant, String, CustomNotification)>>,
    /// The one session of a per-session upstream.
    owner: OnceLock<Caller>,
    /// A `per_session` mount's own session, which only reads what the
    /// server offers (discovery) and serves no client: a request the
    /// upstream makes outside the gateway's own requests is for nobody.
    serves_no_client: bool,
    /// Requests that ended within [`RECENT_KEPT`], at most [`RECENT_MAX`],
    /// newest last: a log message the upstream wrote during a request can
    /// reach the gateway just after the answer (servers need not order
    /// them), and claims made for such a message count from when it was
    /// read ([`LINGER`]).
    recent: Mutex<VecDeque<Ended>>,
    /// Requests abandoned unanswered within [`ABANDONED_LINGER`], newest
    /// last, at most [`ABANDONED_MAX`], with their sessions. Locked after
    /// `inflight` when both are.
    abandoned: Mutex<VecDeque<AbandonedRequest>>,
    /// Progress and log notifications received but not yet relayed.
    pending_notifications: AtomicUsize,
    relayed: Notify,
    /// The number the next progress or log notification to arrive gets.
    arrivals: AtomicU64,
    /// The number the next message the transport reads (a counted
    /// notification or an answer) gets: their wire order.
    reads: AtomicU64,
    /// The arrival whose turn it is to be relayed: every one before it has
    /// been (or was given up on, [`TURN_LIMIT`]).
    turn: AtomicU64,
    /// Notifications waiting for their turn, by arrival: each is woken
    /// once, when its turn comes (waking every waiter on every relay made
    /// a burst of N notifications cost N² wake-ups).
    turn_waiters: Mutex<BTreeMap<u64, Arc<Notify>>>,
    /// Requests handed to rmcp whose id is not registered yet: rmcp picks
    /// the id while sending, so the upstream can answer (with a sampling
    /// request, progress) before the request is in `inflight`.
    sending: AtomicUsize,
    registered: Notify,
    /// Answers read (with their read number) while requests were being
    /// sent, to ids not registered yet: a quick answer can be read before
    /// its request is (see [`Relay::answer_read`]). Emptied when nothing
    /// is being sent; at most [`EARLY_ANSWERS_KEPT`].
    early_answers: Mutex<VecDeque<(RequestId, u64)>>,
    /// Requests answered but still in flight: their caller is recording
    /// what the answer created (a task, `RawExchange::inflight`).
    answered_in_flight: AtomicUsize,
    released: Notify,
    /// The upstream's requests being forwarded to a client, by the
    /// upstream's id; each token is cancelled when its forwarding ends
    /// (see [`Relay::forwarding`]).
    forwarding: Mutex<HashMap<RequestId, Arc<CancellationToken>>>,
    /// The ids of the latest requests the upstream sent the clients
    /// ([`Relay::first_sent`]).
    requests_seen: Mutex<BoundedMap<(), REQUESTS_SEEN_MAX>>,
}

/// How many of the upstream's request ids a session remembers to tell a
/// replayed request from a new one.
const REQUESTS_SEEN_MAX: usize = 1024;

/// Most answers to requests not registered yet remembered at once
/// ([`Relay::answer_read`]); only requests being sent have such answers.
const EARLY_ANSWERS_KEPT: usize = 64;

/// How long a finished request still claims late log messages.
pub const LINGER: Duration = Duration::from_secs(1);

/// How long a finished request still counts for a log message on an HTTP
/// upstream's `GET` stream while others are in flight (see
/// [`Relay::attribute_as`]): that stream and the answers' run apart by
/// about a round trip; much longer, and every line of a busy shared mount
/// would be ambiguous.
const GET_STREAM_LINGER: Duration = Duration::from_millis(250);

/// Bound on the finished requests remembered (see [`RECENT_KEPT`]).
const RECENT_MAX: usize = 256;

/// How long a finished request is remembered: a line read within
/// [`LINGER`] of its end may be handled much later (a burst of large lines,
/// a client slow to take them), and is still judged as of its reading.
const RECENT_KEPT: Duration = Duration::from_secs(10);

/// How long a request abandoned unanswered may still be at work upstream,
/// as far as attribution goes (see the module doc). A server that ignores
/// cancellation for longer can have its messages refused as ambiguous,
/// then given by rule 2 or 3, as before.
pub const ABANDONED_LINGER: Duration = Duration::from_secs(30);

/// Bound on the abandoned requests remembered for [`ABANDONED_LINGER`].
const ABANDONED_MAX: usize = 256;

/// Bound on sending a notification to a client by rmcp, which waits while
/// the session's channel to its client is full (a client not reading).
const SEND_LIMIT: Duration = Duration::from_secs(1);

/// Bound on how long an answer waits for earlier notifications to be
/// relayed; a stuck client stream must not hold every answer.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Bound on how long a notification waits for the ones that arrived
/// before it to be relayed; one stuck on a slow client must not hold the
/// rest for long.
pub const TURN_LIMIT: Duration = Duration::from_secs(1);

/// Bound on how long a message that found no caller waits for requests
/// being sent to be registered. Registration follows the send within
/// microseconds unless the machine is overloaded.
pub const SETTLE_LIMIT: Duration = Duration::from_millis(500);

impl Relay {
    /// A relay for a per-session upstream owned by one downstream session.
    pub fn owned_by(owner: Caller) -> Self {
        let relay = Relay::default();
        let _ = relay.owner.set(owner.session_only());
        relay
    }

    /// A relay for a `per_session` mount's own session, which only lists
    /// what the server offers: no client is behind it.
    pub fn serving_no_client() -> Self {
        Relay {
            serves_no_client: true,
            ..Relay::default()
        }
    }

    /// Whether no client is behind this upstream session (see
    /// [`Self::serving_no_client`]).
    pub fn serves_no_client(&self) -> bool {
        self.serves_no_client
    }

    /// Waits (bounded) until every notification that arrived so far has
    /// been relayed.
    pub async fn drain(&self) {
        if !wait_for_zero(&self.pending_notifications, &self.relayed, DRAIN_LIMIT).await {
            tracing::debug!("answering before every earlier notification was relayed");
        }
    }

    pub fn remember_elicitation(&self, elicitation_id: String, session: u64) {
        lock(&self.elicitations).insert(elicitation_id, session);
    }

    pub fn take_elicitation(&self, elicitation_id: &str) -> Option<u64> {
        lock(&self.elicitations).remove(elicitation_id)
    }

    /// Requests in flight (for tests and diagnostics).
    pub fn inflight_count(&self) -> usize {
        lock(&self.inflight).len()
    }
}

/// A std mutex: held for map operations only, never across an await.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
