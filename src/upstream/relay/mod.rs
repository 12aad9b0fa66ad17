//! Who, downstream, an upstream's message is for.
//!
//! Every request the gateway sends upstream is registered here with its
//! [`Caller`]: the downstream session and request that caused it. When the
//! upstream then sends progress, a log message or a request of its own
//! (sampling, elicitation, roots), [`Relay::attribute`] finds the caller,
//! in this order:
//!
//! 1. the upstream request whose HTTP response stream the message arrived
//!    on (Streamable HTTP upstreams; rmcp records it as
//!    [`InboundStreamOrigin`]), or the progress token for progress;
//! 2. the single request in flight on this upstream session;
//! 3. the single downstream session with requests in flight;
//! 4. the owner, for a per-session upstream (it has exactly one session),
//!    once no request is being sent (the message may be that one's).
//!
//! A request the gateway stopped waiting for (its client cancelled it, it
//! timed out, its caller went away) may still be running upstream, since
//! cancellation is advisory: for [`ABANDONED_LINGER`], or until its answer
//! is read after all, it still counts in rules 1 to 3, for its session
//! alone, so that what the upstream goes on sending for it never passes
//! for another session's single request.
//!
//! A message that finds no caller waits (bounded) for requests still being
//! sent to be registered, then is looked up again: rmcp learns a request's
//! id only as it sends it, and the upstream may answer at once. A log
//! message that still finds nothing goes to the one session whose request
//! ended within [`LINGER`] (servers need not order a log line before the
//! answer), never before that wait. For the same reason such a request
//! still counts in rules 2 and 3 for a log message on an HTTP upstream's
//! `GET` stream while others are in flight (that stream is unordered with
//! the answers; for [`GET_STREAM_LINGER`]): a line another session's
//! request wrote before its answer but that arrived after it is not the
//! single in-flight request's. "Within" counts from when the message was
//! read, and a request sent after that never counts for it: a burst
//! handled late is judged as of its reading. On one ordered stream
//! (stdio), a line read after another session's answer while a request is
//! in flight goes to that request: a line the other wrote after its answer
//! (a server logging its cleanup) cannot be told from the in-flight
//! request's own, and refusing both lost every log line of a session that
//! called just after another.
//!
//! A log message the transport read after a request's answer is not that
//! request's, though the request is still in flight until its call takes
//! the answer: it counts as a request that just ended (rules 2 and 3 skip
//! it), so that it never rides the request's stream ahead of the answer.
//!
//! A message that names a task in its related-task `_meta` goes to the
//! session that created the task (a request of that session in flight on
//! this upstream, if exactly one is, else the session itself) before rules
//! 2 and 3 are tried; `notifications/tasks/status` goes to it alone. The
//! call that creates a task stays in flight until its owner is recorded,
//! and a request naming a task not known yet waits (bounded) for answers
//! being recorded.
//!
//! Anything else is ambiguous and is refused, never guessed or broadcast.
//!
//! Here: the registry of requests in flight and the attribution. A
//! [`Caller`] and how a message reaches it are in `caller.rs`, the owners
//! of tasks in `tasks.rs`, the order notifications are relayed in in
//! `turns.rs`.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use rmcp::{
    model::{CustomNotification, Extensions, ProgressToken, RequestId},
    service::InboundStreamOrigin,
};

mod caller;
mod tasks;
mod turns;

pub use caller::{Caller, LogLevelSetting};
pub use tasks::{related_task, set_related_task, TaskOwner, RELATED_TASK};
use tasks::{FORGOTTEN_TASKS_MAX, TASKS_MAX};
pub use turns::{Arrival, RequestRead};

use super::bounded_map::BoundedMap;
use crate::wait_for_zero::{count_down, wait_for_zero};

/// Why a message could not be attributed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unattributed {
    #[error("no client request is in flight on this upstream session")]
    Nobody,
    /// How many sessions it could be for: in the log, not in the text,
    /// which reaches the upstream and perhaps, through it, a client, who
    /// would learn how busy the others are.
    #[error("several client sessions have requests in flight on this shared upstream session, and the message does not say which one it is for")]
    Ambiguous(usize),
    #[error("the message is about task {0}, whose client session is no longer remembered")]
    ForgottenTask(String),
    #[error("the message came on the answer stream of a request no client waits for any more")]
    RequestEnded,
}

/// What is being attributed (see [`Relay::attribute_as`]).
#[derive(Clone, Copy)]
enum Attributing {
    /// A request of the upstream's (sampling, elicitation, roots), read
    /// where its [`RequestRead`] says (if the transport counted it).
    Request { read_at: Option<u64> },
    /// A notification (a log message), read where its [`Arrival`] says
    /// (if the transport counted it); `late`: on an HTTP upstream's `GET`
    /// stream, unordered with the answers, where a request that just ended
    /// may claim it too; `settled`: requests being sent were waited for.
    Notification {
        late: bool,
        arrival: Option<Arrival>,
        settled: bool,
    },
}

struct Inflight {
    caller: Caller,
    progress_token: ProgressToken,
    activity: Arc<Activity>,
    /// Where the upstream's answer was read among the messages the
    /// transport read ([`Relay::answer_read`]), once it was (its call may
    /// not have taken it yet): a log line read after it is not the
    /// request's.
    answer_read_at: Option<u64>,
    /// The read number (`Relay::reads`) before it was sent: a message read
    /// earlier cannot be about it.
    sent_at: u64,
}

/// What says an upstream request not yet answered is still being worked
/// on, which keeps its idle timeout from running out.
#[derive(Default)]
struct Activity {
    /// Poked on each progress notification, and when the client answers
    /// a request the upstream sent within it.
    progressed: Notify,
    /// The upstream's requests within it (sampling, elicitation, roots)
    /// waiting for the client: a person may take minutes to answer, and
    /// an upstream waiting for them is not silent.
    awaiting_client: AtomicUsize,
}

/// Held while an upstream request's request to the client waits for the
/// client's answer (see [`Relay::awaiting_client`]).
pub struct AwaitingClient(Vec<Arc<Activity>>);

impl Drop for AwaitingClient {
    fn drop(&mut self) {
        for activity in &self.0 {
            activity.awaiting_client.fetch_sub(1, Ordering::AcqRel);
            // The answer is news from the request: its idle time starts
            // again.
            activity.progressed.notify_one();
        }
    }
}

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

/// Held while an upstream's request is forwarded to its client
/// ([`Relay::forwarding`]).
pub struct Forwarding {
    relay: Arc<Relay>,
    id: RequestId,
    done: Arc<CancellationToken>,
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        let mut forwarding = lock(&self.relay.forwarding);
        // A server reusing an id while its first request is forwarded
        // replaced the entry: that one is not this guard's to remove.
        if forwarding
            .get(&self.id)
            .is_some_and(|done| Arc::ptr_eq(done, &self.done))
        {
            forwarding.remove(&self.id);
        }
        drop(forwarding);
        self.done.cancel();
    }
}

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

/// A request that ended, for the messages read just after it.
struct Ended {
    at: Instant,
    /// As [`Inflight::sent_at`].
    sent_at: u64,
    id: RequestId,
    caller: Caller,
}

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

    /// Marks a request as being sent (its id not known yet) until the guard
    /// is dropped, which must happen after it is registered.
    pub fn sending(self: &Arc<Self>) -> SendingGuard {
        self.sending.fetch_add(1, Ordering::AcqRel);
        SendingGuard {
            relay: self.clone(),
            reads_before: self.reads.load(Ordering::Acquire),
        }
    }

    /// Waits (bounded) until no request is between send and registration,
    /// so that attribution sees every request in flight.
    pub async fn settle(&self) {
        wait_for_zero(&self.sending, &self.registered, SETTLE_LIMIT).await;
    }

    /// Records an upstream request sent while `sending` was held, until
    /// the guard is dropped.
    pub fn register_sent(
        self: &Arc<Self>,
        sending: SendingGuard,
        id: RequestId,
        progress_token: ProgressToken,
        caller: Caller,
    ) -> InflightGuard {
        let inflight = self.register_as_sent_at(sending.reads_before, id, progress_token, caller);
        drop(sending);
        inflight
    }

    /// Records an upstream request being sent now, until the guard is
    /// dropped.
    pub fn register(
        self: &Arc<Self>,
        id: RequestId,
        progress_token: ProgressToken,
        caller: Caller,
    ) -> InflightGuard {
        let sent_at = self.reads.load(Ordering::Acquire);
        self.register_as_sent_at(sent_at, id, progress_token, caller)
    }

    fn register_as_sent_at(
        self: &Arc<Self>,
        sent_at: u64,
        id: RequestId,
        progress_token: ProgressToken,
        caller: Caller,
    ) -> InflightGuard {
        let activity = Arc::new(Activity::default());
        // Held across the insert (`early_answers` before `inflight`, as in
        // `answer_read`): an answer read in between is either taken here
        // or finds the request registered.
        let mut early = lock(&self.early_answers);
        let answer_read_at = early
            .iter()
            .position(|(answered, _)| *answered == id)
            .and_then(|at| early.remove(at))
            .map(|(_, read_at)| read_at);
        lock(&self.inflight).insert(
            id.clone(),
            Inflight {
                caller,
                progress_token,
                activity: activity.clone(),
                answer_read_at,
                sent_at,
            },
        );
        drop(early);
        InflightGuard {
            relay: self.clone(),
            id,
            activity,
            answered: false,
        }
    }

    /// The answer to request `id` has been read off the wire (called in
    /// wire order, by the transport): a log message read after it belongs
    /// to the session, not to the request, whose stream the client is
    /// about to have closed by that answer. (The request stays in flight
    /// for everything else until its call takes the answer: a task it
    /// created is recorded then.)
    pub fn answer_read(&self, id: &RequestId) {
        let read_at = self.reads.fetch_add(1, Ordering::AcqRel);
        {
            let mut inflight = lock(&self.inflight);
            if let Some(entry) = inflight.get_mut(id) {
                entry.answer_read_at = Some(read_at);
                return;
            }
            // An abandoned request answered after all (`inflight` held: a
            // request being abandoned is in one or the other).
            let mut abandoned = lock(&self.abandoned);
            if let Some(request) = abandoned.iter_mut().rev().find(|request| request.id == *id) {
                request.answer_read_at.get_or_insert(read_at);
                return;
            }
        }
        // Its request may be between send and registration; `register`
        // takes the mark. Looked at again under the lock `register` holds
        // while it registers (and the last `SendingGuard` empties it with).
        let mut early = lock(&self.early_answers);
        if let Some(entry) = lock(&self.inflight).get_mut(id) {
            entry.answer_read_at = Some(read_at);
            return;
        }
        if self.sending.load(Ordering::Acquire) > 0 {
            if early.len() == EARLY_ANSWERS_KEPT {
                early.pop_front();
            }
            early.push_back((id.clone(), read_at));
        }
    }

    /// The upstream request that `caller` (a server→client request's
    /// attribution) stands for waits on its client until the guard drops:
    /// its idle timeout does not run meanwhile, and starts again at the
    /// answer. A caller that is a session, not one of its requests (it had
    /// several in flight here, or the message named its task), stands for
    /// every request of that session in flight here: any of them may be
    /// the one waiting, and none is silent while its client answers.
    pub fn awaiting_client(&self, caller: &Caller) -> AwaitingClient {
        let inflight = lock(&self.inflight);
        let waiting: Vec<Arc<Activity>> = inflight
            .values()
            .filter(|entry| {
                entry.caller.session == caller.session
                    && (caller.request_id.is_none() || entry.caller.request_id == caller.request_id)
            })
            .map(|entry| {
                entry
                    .activity
                    .awaiting_client
                    .fetch_add(1, Ordering::AcqRel);
                entry.activity.clone()
            })
            .collect();
        AwaitingClient(waiting)
    }

    /// The caller of the request that used this upstream progress token;
    /// that request's timeout starts again.
    pub fn progress(&self, token: &ProgressToken) -> Option<Caller> {
        let inflight = lock(&self.inflight)
            .values()
            .find(|inflight| &inflight.progress_token == token)
            .map(|inflight| {
                inflight.activity.progressed.notify_one();
                inflight.caller.clone()
            });
        inflight.or_else(|| {
            // A task's progress after its `CreateTaskResult`.
            lock(&self.tasks)
                .values()
                .find_map(|owner| match &owner.progress {
                    Some((upstream, caller)) if upstream == token => Some(caller.clone()),
                    _ => None,
                })
        })
    }

    /// Finds the caller of an upstream request (sampling, elicitation,
    /// roots): once requests being sent are registered, and, for one that
    /// names a task not known yet, once the answers being recorded are (a
    /// task-augmented call's answer is recorded as its task's owner just
    /// after it arrives, and the upstream may ask about the task at once).
    /// Both waits are bounded.
    pub async fn attribute_request(
        &self,
        extensions: &Extensions,
        related_task: Option<&str>,
    ) -> Result<Caller, Unattributed> {
        self.settle().await;
        if related_task.is_some_and(|id| self.task_owner(id).is_none()) {
            wait_for_zero(&self.answered_in_flight, &self.released, DRAIN_LIMIT).await;
        }
        self.or_owner(self.attribute(extensions, related_task))
    }

    /// A message on the stream of a request no longer in flight (nor being
    /// sent: call after [`Self::settle`]) is the per_session upstream's
    /// owner's, if it has one.
    fn or_owner(&self, attributed: Result<Caller, Unattributed>) -> Result<Caller, Unattributed> {
        match (attributed, self.owner.get()) {
            (Err(Unattributed::RequestEnded), Some(owner)) => Ok(owner.clone()),
            (other, _) => other,
        }
    }

    /// Finds the downstream caller of an upstream request (see the module
    /// doc for the rule).
    pub fn attribute(
        &self,
        extensions: &Extensions,
        related_task: Option<&str>,
    ) -> Result<Caller, Unattributed> {
        // On an HTTP upstream's `GET` stream (unordered with the answers
        // on the `POST` streams) a request read after a call's answer may
        // have been written before it: its read number says nothing.
        let unordered = matches!(
            extensions.get::<InboundStreamOrigin>(),
            Some(InboundStreamOrigin::Unassociated)
        );
        let read_at = extensions
            .get::<RequestRead>()
            .filter(|_| !unordered)
            .map(|read| read.0);
        self.attribute_as(extensions, related_task, Attributing::Request { read_at })
    }

    /// [`Self::attribute`]; with `late_claims` (a notification on an HTTP
    /// upstream's `GET` stream, which is unordered with the answers on
    /// the `POST` streams), a request of another session that ended
    /// within [`GET_STREAM_LINGER`] before it was read counts as well while
    /// requests are in flight (see the module doc).
    fn attribute_as(
        &self,
        extensions: &Extensions,
        related_task: Option<&str>,
        attributing: Attributing,
    ) -> Result<Caller, Unattributed> {
        let (late_claims, line, settled, request_read_at) = match attributing {
            Attributing::Request { read_at } => (false, None, true, read_at),
            Attributing::Notification {
                late,
                arrival,
                settled,
            } => (late, arrival, settled, None),
        };
        let read_at = line.map(|line| line.read_at);
        let all_inflight = lock(&self.inflight);
        let abandoned = self.abandoned_callers(read_at.or(request_read_at));
        if let Some(InboundStreamOrigin::OutboundRequest(id)) =
            extensions.get::<InboundStreamOrigin>()
        {
            if let Some(found) = all_inflight.get(id) {
                return Ok(found.caller.clone());
            }
            if let Some(caller) = abandoned.of(id) {
                return Ok(caller.clone());
            }
        }
        if let Some(owner) = related_task.and_then(|id| self.task_owner(id)) {
            let mut of_owner = all_inflight
                .values()
                .filter(|entry| entry.caller.session == owner.caller.session);
            return Ok(match (of_owner.next(), of_owner.next()) {
                (Some(only), None) => only.caller.clone(),
                _ => owner.caller,
            });
        }
        if let Some(id) = related_task {
            if self.owner.get().is_none() && lock(&self.forgotten_tasks).get(id).is_some() {
                return Err(Unattributed::ForgottenTask(id.to_owned()));
            }
        }
        // A message on a request's stream is about that request, never
        // another session's, even once the request has ended (its answer
        // went ahead after waiting its limit for the messages before).
        if let Some(InboundStreamOrigin::OutboundRequest(id)) =
            extensions.get::<InboundStreamOrigin>()
        {
            let ended = lock(&self.recent)
                .iter()
                .find(|ended| ended.id == *id)
                .map(|ended| ended.caller.clone());
            // (Not found, it may also be one being sent: the owner of a
            // per_session upstream takes it only once that has settled,
            // `or_owner`.)
            return ended.ok_or(Unattributed::RequestEnded);
        }
        // A notification read after its request's answer is not that
        // request's (the answer is about to close the request's stream,
        // and would be overtaken): the request counts as one just ended.
        // Nor is it the request of one sent after it was read (the upstream
        // cannot write about a request before it has it): a burst of lines
        // handled late found a request sent meanwhile alone in flight, and
        // gave another session's lines to it.
        let (answered, inflight): (Vec<&Inflight>, Vec<&Inflight>) = all_inflight
            .values()
            .filter(|entry| read_at.is_none_or(|read| entry.sent_at <= read))
            .partition(|entry| {
                matches!((entry.answer_read_at, read_at), (Some(answer), Some(read)) if answer < read)
            });
        // With nothing in flight, an abandoned request's session is not
        // alone: a request that just ended may have written the message
        // after its answer, and that session counts too. With requests in
        // flight, so it does for a notification (see `attribute_as`).
        let mut recent = if inflight.is_empty() && !abandoned.sessions.is_empty() {
            self.recently_ended_callers(LINGER, line)
        } else if late_claims && !(inflight.is_empty() && answered.is_empty()) {
            // An answered request is one that just ended, among the others
            // that did: the line may be any of theirs.
            self.recently_ended_callers(GET_STREAM_LINGER, line)
        } else {
            Vec::new()
        };
        recent.extend(answered.iter().map(|entry| entry.caller.session_only()));
        if inflight.len() == 1 {
            if let Some(only) = inflight.first() {
                if abandoned
                    .sessions
                    .iter()
                    .chain(recent.iter())
                    .all(|caller| caller.session == only.caller.session)
                {
                    return Ok(only.caller.clone());
                }
            }
        }
        let mut sessions: Vec<&Caller> = Vec::new();
        let callers = inflight
            .iter()
            .map(|entry| &entry.caller)
            .chain(abandoned.sessions.iter())
            .chain(recent.iter());
        for caller in callers {
            if !sessions.iter().any(|c| c.session == caller.session) {
                sessions.push(caller);
            }
        }
        if let [only] = sessions.as_slice() {
            // One session with several requests in flight: which one the
            // message is for is not known, but any of their streams
            // reaches the client, which its GET stream may not (a client
            // need not open one; a server request parked there waited,
            // and held its requests' timers, for ever).
            if let Some(entry) = inflight
                .iter()
                .find(|entry| entry.caller.session == only.session)
            {
                return Ok(entry.caller.clone());
            }
            return Ok(only.session_only());
        }
        // The owner takes what no request claims, but not while a request
        // is being sent: the message may be that request's (the upstream
        // answered before rmcp told us its id), and would leave its stream
        // for the session's.
        if let Some(owner) = self.owner.get() {
            if settled || self.sending.load(Ordering::Acquire) == 0 {
                return Ok(owner.clone());
            }
            return Err(Unattributed::Nobody);
        }
        if sessions.is_empty() {
            Err(Unattributed::Nobody)
        } else {
            Err(Unattributed::Ambiguous(sessions.len()))
        }
    }

    /// Like [`Self::attribute`], for a notification (a log message). A
    /// request still being sent may be the one it belongs to (the upstream
    /// can log before rmcp has told us the request's id), so that is waited
    /// for first (bounded, [`Self::settle`]). Only when nothing is in
    /// flight then does a request that just ended claim the message, and
    /// only if it was the one session to finish one within [`LINGER`]:
    /// claiming it before settling gave one session's message to the
    /// session whose request had ended just before.
    pub async fn attribute_notification(
        &self,
        extensions: &Extensions,
        related_task: Option<&str>,
    ) -> Result<Caller, Unattributed> {
        let late_claims = matches!(
            extensions.get::<InboundStreamOrigin>(),
            Some(InboundStreamOrigin::Unassociated)
        );
        let arrival = extensions.get::<Arrival>().copied();
        let attributing = |settled| Attributing::Notification {
            late: late_claims,
            arrival,
            settled,
        };
        if let Ok(caller) = self.attribute_as(extensions, related_task, attributing(false)) {
            return Ok(caller);
        }
        self.settle().await;
        match self.or_owner(self.attribute_as(extensions, related_task, attributing(true))) {
            Err(Unattributed::Nobody) => self.recently_ended(extensions.get::<Arrival>().copied()),
            other => other,
        }
    }

    /// The requests abandoned within [`ABANDONED_LINGER`] (the older ones
    /// forgotten), and the sessions of those still running as of `read_at`
    /// (the read number of the message being attributed): a request whose
    /// answer was read before it is over, and claims no message for its
    /// session any more. A message without a read number (not counted by
    /// its transport) may have been read before the answer: for it the
    /// request still runs.
    fn abandoned_callers(&self, read_at: Option<u64>) -> Abandoned {
        let mut abandoned = lock(&self.abandoned);
        let now = Instant::now();
        while abandoned
            .front()
            .is_some_and(|request| now.duration_since(request.at) > ABANDONED_LINGER)
        {
            abandoned.pop_front();
        }
        let mut found = Abandoned::default();
        for request in abandoned.iter() {
            let caller = &request.caller;
            found.ids.push((request.id.clone(), caller.session));
            let over = request
                .answer_read_at
                .is_some_and(|answer| read_at.is_some_and(|read| answer < read));
            if over {
                continue;
            }
            if !found
                .sessions
                .iter()
                .any(|known| known.session == caller.session)
            {
                found.sessions.push(caller.clone());
            }
        }
        found
    }

    /// The one session whose request ended within [`LINGER`].
    fn recently_ended(&self, line: Option<Arrival>) -> Result<Caller, Unattributed> {
        match self.recently_ended_callers(LINGER, line).as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(Unattributed::Nobody),
            many => Err(Unattributed::Ambiguous(many.len())),
        }
    }

    /// The sessions whose requests ended within `within` before `line` was
    /// read (or before now), or after it, sent before it was read; one
    /// caller each.
    fn recently_ended_callers(&self, within: Duration, line: Option<Arrival>) -> Vec<Caller> {
        let (read_when, read_at) = match line {
            Some(line) => (line.read_when, line.read_at),
            None => (Instant::now(), u64::MAX),
        };
        let recent = lock(&self.recent);
        let mut sessions: Vec<Caller> = Vec::new();
        for ended in recent.iter() {
            if ended.sent_at <= read_at
                && read_when.saturating_duration_since(ended.at) <= within
                && !sessions.iter().any(|c| c.session == ended.caller.session)
            {
                sessions.push(ended.caller.clone());
            }
        }
        sessions
    }

    /// Whether this is the first time the upstream sent a request with
    /// `id` (ids are unique within a session). A second one is a replay:
    /// some servers resend, on a resumed stream, what every stream of the
    /// session carried, and on a shared mount another client's sampling
    /// request would reach the client whose stream was resumed.
    pub fn first_sent(&self, id: &RequestId) -> bool {
        let key = match id {
            RequestId::Number(n) => format!("n{n}"),
            RequestId::String(s) => format!("s{s}"),
        };
        let mut seen = lock(&self.requests_seen);
        if seen.get(&key).is_some() {
            return false;
        }
        seen.insert(key, ());
        true
    }

    /// Marks the upstream's request `id` as being forwarded to a client
    /// until the guard drops (after a cancel of it was relayed, if it was
    /// cancelled).
    pub fn forwarding(self: &Arc<Self>, id: RequestId) -> Forwarding {
        let done = Arc::new(CancellationToken::new());
        lock(&self.forwarding).insert(id.clone(), done.clone());
        Forwarding {
            relay: self.clone(),
            id,
            done,
        }
    }

    /// Waits (bounded, [`DRAIN_LIMIT`]) until the forwarding of the
    /// upstream's request `id`, which it has cancelled, has ended: the
    /// forwarding task relays the cancel to the client, and the answer
    /// the upstream may write right after its cancel must not end the
    /// call's stream before it (the cancel would then be lost).
    pub async fn cancel_relayed(&self, id: &RequestId) {
        let Some(done) = lock(&self.forwarding).get(id).cloned() else {
            return;
        };
        if tokio::time::timeout(DRAIN_LIMIT, done.cancelled())
            .await
            .is_err()
        {
            tracing::debug!(%id, "answering before a cancel was relayed");
        }
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

/// A request the gateway stopped waiting for before its answer.
struct AbandonedRequest {
    at: Instant,
    id: RequestId,
    /// Its session.
    caller: Caller,
    /// The read number of its answer, once the upstream sent one after
    /// all (a server that answers a cancelled request, as the Python SDK
    /// does): what is read after it is not the request's.
    answer_read_at: Option<u64>,
}

/// What [`Relay::abandoned_callers`] finds: the abandoned requests' ids
/// and one caller per session among those still running.
#[derive(Default)]
struct Abandoned {
    ids: Vec<(RequestId, u64)>,
    sessions: Vec<Caller>,
}

impl Abandoned {
    /// The session of abandoned request `id`.
    fn of(&self, id: &RequestId) -> Option<&Caller> {
        let (_, session) = self.ids.iter().find(|(abandoned, _)| abandoned == id)?;
        self.sessions
            .iter()
            .find(|caller| caller.session == *session)
    }
}

/// Held from before a request is sent until it is registered.
pub struct SendingGuard {
    relay: Arc<Relay>,
    /// The read number before the request was sent.
    reads_before: u64,
}

impl Drop for SendingGuard {
    fn drop(&mut self) {
        // Its request is registered (or was never sent): an early answer
        // still unclaimed when nothing is being sent is no request's here.
        let relay = &self.relay;
        let mut early = lock(&relay.early_answers);
        count_down(&relay.sending, &relay.registered);
        if relay.sending.load(Ordering::Acquire) == 0 {
            early.clear();
        }
    }
}

/// Removes an in-flight entry when the request ends, however it ends; one
/// that ends unanswered is remembered as abandoned.
pub struct InflightGuard {
    relay: Arc<Relay>,
    id: RequestId,
    activity: Arc<Activity>,
    /// Set when the upstream answered (with a result or an error).
    answered: bool,
}

impl InflightGuard {
    /// The upstream answered: nothing more is expected for this request.
    pub fn answered(&mut self) {
        if !self.answered {
            self.answered = true;
            self.relay.answered_in_flight.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Resolves at the next progress notification for this request (one
    /// that arrived since the last call counts).
    pub async fn progressed(&self) {
        self.activity.progressed.notified().await
    }

    /// Whether a request the upstream sent within this one waits for the
    /// client's answer.
    pub fn awaiting_client(&self) -> bool {
        self.activity.awaiting_client.load(Ordering::Acquire) > 0
    }

    /// The request was answered with `error`: if that is a -32042, each
    /// URL elicitation its data lists is remembered as this request's
    /// caller's, like one sent as `elicitation/create`.
    pub fn elicitations_required(&self, error: &rmcp::ErrorData) {
        if error.code.0 != URL_ELICITATION_REQUIRED {
            return;
        }
        let ids = required_elicitation_ids(error.data.as_ref());
        if ids.is_empty() {
            return;
        }
        let Some(session) = lock(&self.relay.inflight)
            .get(&self.id)
            .map(|inflight| inflight.caller.session)
        else {
            return;
        };
        for id in ids {
            self.relay.remember_elicitation(id, session);
        }
    }
}

/// The ids of the URL elicitations a -32042 error's data lists.
fn required_elicitation_ids(data: Option<&serde_json::Value>) -> Vec<String> {
    data.and_then(|data| data.get("elicitations"))
        .and_then(|list| list.as_array())
        .into_iter()
        .flatten()
        .filter_map(|elicitation| elicitation.get("elicitationId")?.as_str())
        .map(str::to_owned)
        .collect()
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let mut inflight = lock(&self.relay.inflight);
        let removed = inflight.remove(&self.id);
        if self.answered {
            count_down(&self.relay.answered_in_flight, &self.relay.released);
        }
        let Some(ended) = removed else {
            return;
        };
        let now = Instant::now();
        if !self.answered {
            // Under `inflight`, so that an answer read meanwhile finds the
            // request in one or the other (`answer_read`).
            let mut abandoned = lock(&self.relay.abandoned);
            if abandoned.len() >= ABANDONED_MAX {
                abandoned.pop_front();
            }
            abandoned.push_back(AbandonedRequest {
                at: now,
                id: self.id.clone(),
                caller: ended.caller.session_only(),
                // Read before it was given up on, unclaimed by its call.
                answer_read_at: ended.answer_read_at,
            });
        }
        drop(inflight);
        let mut recent = lock(&self.relay.recent);
        while recent.len() >= RECENT_MAX
            || recent
                .front()
                .is_some_and(|first| now.duration_since(first.at) > RECENT_KEPT)
        {
            recent.pop_front();
        }
        recent.push_back(Ended {
            at: now,
            sent_at: ended.sent_at,
            id: self.id.clone(),
            caller: ended.caller.session_only(),
        });
    }
}

/// A std mutex: held for map operations only, never across an await.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use rmcp::RoleServer;

    use super::*;
    use crate::upstream::ClientProfile;

    /// A server handler that offers nothing: a peer to build callers on.
    struct Nothing;
    impl rmcp::ServerHandler for Nothing {}

    /// A caller from downstream session `session`, and the service its
    /// peer sends to (kept alive by the test).
    fn caller(session: u64) -> (Caller, rmcp::service::RunningService<RoleServer, Nothing>) {
        let (transport, _other_end) = tokio::io::duplex(64);
        let service = rmcp::service::serve_directly(Nothing, transport, None);
        let caller = Caller {
            session,
            peer: service.peer().clone(),
            request_id: None,
            progress_token: None,
            profile: ClientProfile::default(),
            log_level: LogLevelSetting::new(),
            request_stream: None,
            handoff: None,
        };
        (caller, service)
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    /// Request `id` of `caller`, sent and answered.
    fn answered(relay: &Arc<Relay>, id: i64, caller: Caller) {
        relay
            .register(RequestId::Number(id), token(id), caller)
            .answered();
    }

    /// A session falling asleep lets go of its tasks (and the peer their
    /// owners hold); what the upstream says of them then is refused as
    /// about a forgotten task. Another session's stay.
    #[tokio::test]
    async fn a_sleeping_sessions_tasks_are_let_go() {
        let relay = Arc::new(Relay::default());
        let (sleeper, _sleeper_peer) = caller(1);
        let (other, _other_peer) = caller(2);
        relay.remember_task("u1", sleeper, "m/u1".into(), token(1));
        relay.remember_task("u2", other, "m/u2".into(), token(2));
        relay.forget_tasks_of(1);
        assert!(relay.task_owner("u1").is_none());
        assert!(relay.task_owner("u2").is_some());
        assert!(matches!(
            relay.attribute(&Extensions::new(), Some("u1")),
            Err(Unattributed::ForgottenTask(_))
        ));
    }

    /// A server→client request waiting for its client keeps the upstream
    /// requests it stands for from going idle: its own request, or, when
    /// attributed to the session alone (it had two in flight on a stdio
    /// upstream), every request of that session here; no other session's.
    #[tokio::test]
    async fn a_request_waiting_for_its_client_is_not_idle() {
        let relay = Arc::new(Relay::default());
        let (session, _peer) = caller(1);
        let (other, _other_peer) = caller(2);
        let of_request = |id: i64| Caller {
            request_id: Some(RequestId::Number(id)),
            ..session.clone()
        };
        let first = relay.register(RequestId::Number(1), token(1), of_request(10));
        let second = relay.register(RequestId::Number(2), token(2), of_request(20));
        let others = relay.register(RequestId::Number(3), token(3), other);
        let waiting = relay.awaiting_client(&of_request(20));
        assert!(!first.awaiting_client() && second.awaiting_client());
        drop(waiting);
        assert!(!second.awaiting_client());
        let waiting = relay.awaiting_client(&session.session_only());
        assert!(first.awaiting_client() && second.awaiting_client());
        assert!(!others.awaiting_client());
        drop(waiting);
        assert!(!first.awaiting_client() && !second.awaiting_client());
    }

    /// What an upstream goes on sending for a request its client cancelled
    /// (or that timed out) is not another session's, though that session
    /// now has the one request in flight: on the cancelled request's own
    /// stream it is the first session's, without a stream it is ambiguous.
    #[tokio::test]
    async fn a_cancelled_requests_messages_do_not_go_to_another_session() {
        let relay = Arc::new(Relay::default());
        let (cancelling, _cancelling_peer) = caller(1);
        let (other, _other_peer) = caller(2);
        drop(relay.register(RequestId::Number(1), token(1), cancelling));
        let _inflight = relay.register(RequestId::Number(2), token(2), other);
        let mut on_its_stream = Extensions::new();
        on_its_stream.insert(InboundStreamOrigin::OutboundRequest(RequestId::Number(1)));
        let attributed = relay.attribute(&on_its_stream, None);
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
        let attributed = relay.attribute(&Extensions::new(), None);
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
    }

    /// An upstream may ask about a task (an elicitation naming it) as soon
    /// as it has answered the call that created it, before the gateway has
    /// recorded who owns the task: the request waits for that, rather than
    /// being refused as ambiguous or, once the creating call no longer
    /// counted, going to the one session with a request in flight.
    #[tokio::test]
    async fn a_request_about_a_task_just_created_waits_for_its_owner() {
        let relay = Arc::new(Relay::default());
        let (creator, _creator_peer) = caller(1);
        let (other, _other_peer) = caller(2);
        let mut creating = relay.register(RequestId::Number(1), token(1), creator.clone());
        creating.answered();
        let _other = relay.register(RequestId::Number(2), token(2), other);
        let extensions = Extensions::new();
        let attribution = relay.attribute_request(&extensions, Some("u1"));
        tokio::pin!(attribution);
        assert!(futures::poll!(&mut attribution).is_pending());
        relay.remember_task("u1", creator, "m/u1".into(), token(1));
        drop(creating);
        assert_eq!(attribution.await.ok().map(|caller| caller.session), Some(1));
    }

    /// A request that just ended may write a log line after its answer:
    /// with another session's request abandoned and nothing in flight,
    /// that line is not the abandoned session's to claim.
    #[tokio::test]
    async fn an_abandoned_request_does_not_claim_a_line_written_after_another_answer() {
        let relay = Arc::new(Relay::default());
        let (cancelling, _cancelling_peer) = caller(1);
        let (answered_just_now, _answered_peer) = caller(2);
        drop(relay.register(RequestId::Number(1), token(1), cancelling));
        answered(&relay, 2, answered_just_now);
        let attributed = relay.attribute_notification(&Extensions::new(), None).await;
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
    }

    /// With nothing else in flight, the abandoned request's session gets
    /// what its request still causes (a log line, a sampling request).
    #[tokio::test]
    async fn an_abandoned_requests_messages_go_to_its_session() {
        let relay = Arc::new(Relay::default());
        let (cancelling, _cancelling_peer) = caller(1);
        drop(relay.register(RequestId::Number(1), token(1), cancelling));
        let attributed = relay.attribute(&Extensions::new(), None);
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
        // An answered request leaves nothing behind to claim them.
        let relay = Arc::new(Relay::default());
        let (done, _done_peer) = caller(1);
        answered(&relay, 1, done);
        assert!(matches!(
            relay.attribute(&Extensions::new(), None),
            Err(Unattributed::Nobody)
        ));
    }

    /// An abandoned request the upstream answered after all (the Python
    /// SDK answers every cancelled request) claims nothing read after its
    /// answer: for 30 s, another session's server requests and log lines
    /// were refused as ambiguous (black-box helper).
    #[tokio::test]
    async fn an_abandoned_request_answered_after_all_claims_nothing_read_after() {
        let relay = Arc::new(Relay::default());
        let (cancelling, _cancelling_peer) = caller(1);
        let (busy, _busy_peer) = caller(2);
        drop(relay.register(RequestId::Number(1), token(1), cancelling));
        let _inflight = relay.register(RequestId::Number(2), token(2), busy);
        let line = || {
            let mut extensions = Extensions::new();
            extensions.insert(relay.notification_arrived(true));
            extensions
        };
        let before = line();
        relay.answer_read(&RequestId::Number(1));
        let after = line();
        let attributed = relay.attribute_notification(&before, None).await;
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "a line read before the answer may be the abandoned request's: {:?}",
            attributed.ok().map(|caller| caller.session)
        );
        let attributed = relay.attribute_notification(&after, None).await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
        // A server request likewise, by where it was read; one the
        // transport did not count may be the abandoned call's.
        let request_read = |read: RequestRead| {
            let mut extensions = Extensions::new();
            extensions.insert(read);
            extensions
        };
        let (read_before, read_after) = (RequestRead(0), relay.request_arrived());
        let attributed = relay
            .attribute_request(&request_read(read_after), None)
            .await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
        let mut on_get_stream = request_read(relay.request_arrived());
        on_get_stream.insert(InboundStreamOrigin::Unassociated);
        for (extensions, when) in [
            (request_read(read_before), "read before the answer"),
            (Extensions::new(), "not counted"),
            (
                on_get_stream,
                "on the GET stream, unordered with the answer",
            ),
        ] {
            let attributed = relay.attribute_request(&extensions, None).await;
            assert!(
                matches!(attributed, Err(Unattributed::Ambiguous(2))),
                "{when}: went to session {:?}",
                attributed.ok().map(|caller| caller.session)
            );
        }
    }

    #[tokio::test]
    async fn a_log_message_waits_for_a_request_being_sent_before_one_just_ended_claims_it() {
        let relay = Arc::new(Relay::default());
        let (quiet, _quiet_peer) = caller(1);
        let (chatty, _chatty_peer) = caller(2);
        answered(&relay, 1, quiet);
        // chatty's request is on its way: the upstream logs for it before
        // its id is registered.
        let sending = relay.sending();
        let extensions = Extensions::new();
        let attribution = relay.attribute_notification(&extensions, None);
        tokio::pin!(attribution);
        assert!(
            futures::poll!(&mut attribution).is_pending(),
            "not given to the session whose request just ended"
        );
        let _inflight = relay.register(RequestId::Number(2), token(2), chatty);
        drop(sending);
        assert_eq!(attribution.await.ok().map(|caller| caller.session), Some(2));
    }

    /// On a per_session upstream, a log line read while its owner's request
    /// is being sent (the server wrote it before rmcp told us the id) is
    /// that request's, for its stream, not the owner's session's: the
    /// owner took it at once, and a call lost its first log line to the
    /// `GET` stream now and then (a flaky relay test).
    #[tokio::test]
    async fn a_line_read_while_the_owners_request_is_sent_is_that_requests() {
        let (owner, _owner_peer) = caller(1);
        let relay = Arc::new(Relay::owned_by(owner.clone()));
        let sending = relay.sending();
        let mut extensions = Extensions::new();
        extensions.insert(relay.notification_arrived(true));
        let attribution = relay.attribute_notification(&extensions, None);
        tokio::pin!(attribution);
        assert!(
            futures::poll!(&mut attribution).is_pending(),
            "not given to the owner's session while its request is sent"
        );
        let request = Caller {
            request_id: Some(RequestId::Number(7)),
            ..owner
        };
        let _inflight = relay.register_sent(sending, RequestId::Number(3), token(3), request);
        let attributed = attribution.await.ok().and_then(|caller| caller.request_id);
        assert_eq!(attributed, Some(RequestId::Number(7)));
        // Nothing being sent: the owner's session takes a line no request
        // claims, at once.
        let (owner, _owner_peer) = caller(2);
        let idle = Relay::owned_by(owner);
        let no_origin = Extensions::new();
        let unclaimed = idle.attribute_notification(&no_origin, None);
        tokio::pin!(unclaimed);
        let attributed = futures::poll!(&mut unclaimed);
        assert!(
            matches!(&attributed, std::task::Poll::Ready(Ok(caller)) if caller.session == 2),
            "{:?}",
            attributed.map(|caller| caller.map(|caller| caller.session))
        );
    }

    /// A message about a task whose owner was let go (the table is
    /// bounded) reaches no session, rather than the one session that
    /// happens to have a request in flight.
    #[tokio::test]
    async fn a_message_about_a_forgotten_task_goes_to_nobody() {
        let relay = Arc::new(Relay::default());
        let (first, _first_peer) = caller(1);
        let (other, _other_peer) = caller(2);
        relay.remember_task("task-of-1", first, "t1".into(), token(0));
        for n in 0..TASKS_MAX {
            relay.remember_task(
                &format!("task-{n}"),
                other.clone(),
                format!("o{n}"),
                token(0),
            );
        }
        assert!(
            relay.task_owner("task-of-1").is_none(),
            "let go, to stay bounded"
        );
        let _inflight = relay.register(RequestId::Number(7), token(7), other);
        let extensions = Extensions::new();
        let attributed = relay.attribute(&extensions, Some("task-of-1"));
        assert!(
            matches!(attributed, Err(Unattributed::ForgottenTask(_))),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
        // A task not known yet (its creating request not answered) still
        // goes by the other rules.
        let attributed = relay.attribute(&extensions, Some("not-yet-known"));
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
    }

    /// A client's answer names a task as the client knows it; the
    /// upstream gets its own id back. Other ids and other keys stay, and
    /// so does another session's task (an id guessed: upstream ids are
    /// often sequential), which never reaches the upstream as that task.
    #[tokio::test]
    async fn a_client_named_task_goes_back_under_the_upstreams_id() {
        let relay = Relay::default();
        let (owner, _peer) = caller(1);
        relay.remember_task("u-7", owner, "tasks/u-7".into(), token(0));
        let named = |id: &str| {
            serde_json::json!({ RELATED_TASK: { "taskId": id }, "x-other": 1 })
                .as_object()
                .cloned()
                .expect("an object")
        };
        let mut meta = named("tasks/u-7");
        relay.name_task_as_upstream(1, &mut meta);
        assert_eq!(meta, named("u-7"));
        let mut unknown = named("someone-else");
        relay.name_task_as_upstream(1, &mut unknown);
        assert_eq!(unknown, named("someone-else"));
        let mut not_its_own = named("tasks/u-7");
        relay.name_task_as_upstream(2, &mut not_its_own);
        assert_eq!(not_its_own, named("tasks/u-7"));
    }

    /// A log line arriving on an HTTP upstream's `GET` stream after
    /// another session's answer (the streams are unordered) is not the
    /// one in-flight request's: it is ambiguous. On stdio (no stream) it
    /// is, and so is a request the upstream sends.
    #[tokio::test]
    async fn a_late_log_line_on_the_get_stream_is_not_the_one_in_flight_requests() {
        let relay = Arc::new(Relay::default());
        let (in_flight, _in_flight_peer) = caller(1);
        let (answered_just_now, _answered_peer) = caller(2);
        let _inflight = relay.register(RequestId::Number(1), token(1), in_flight);
        answered(&relay, 2, answered_just_now);
        let mut on_get_stream = Extensions::new();
        on_get_stream.insert(InboundStreamOrigin::Unassociated);
        let attributed = relay.attribute_notification(&on_get_stream, None).await;
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
        for attributed in [
            relay.attribute_notification(&Extensions::new(), None).await,
            relay.attribute_request(&on_get_stream, None).await,
        ] {
            assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
        }
    }

    /// A message on the answer stream of a request that has ended (its
    /// answer went ahead) is that request's session's, or nobody's once
    /// forgotten: never the one request in flight's, of another session.
    #[tokio::test]
    async fn a_message_on_an_ended_requests_stream_is_not_another_sessions() {
        let relay = Arc::new(Relay::default());
        let (ended, _ended_peer) = caller(1);
        let (in_flight, _in_flight_peer) = caller(2);
        answered(&relay, 1, ended);
        let _inflight = relay.register(RequestId::Number(2), token(2), in_flight);
        let on_stream_of = |id: i64| {
            let mut extensions = Extensions::new();
            extensions.insert(InboundStreamOrigin::OutboundRequest(RequestId::Number(id)));
            extensions
        };
        let attributed = relay.attribute_notification(&on_stream_of(1), None).await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
        let attributed = relay.attribute_request(&on_stream_of(99), None).await;
        assert!(
            matches!(attributed, Err(Unattributed::RequestEnded)),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
        // A per_session upstream's: its owner's.
        let (owner, _owner_peer) = caller(3);
        let owned = Arc::new(Relay::owned_by(owner));
        let attributed = owned.attribute_notification(&on_stream_of(99), None).await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(3));
    }

    /// A line read just after one session's request ended, but handled
    /// only after that request's linger (a burst of large lines, a client
    /// slow to take them), is that session's, not the request of another
    /// session sent meanwhile and alone in flight (black-box helper: 400 of
    /// 400 lines went to the other session).
    #[tokio::test]
    async fn a_line_handled_late_is_not_a_request_sent_after_it_was_read() {
        let relay = Arc::new(Relay::default());
        let (ended, _ended_peer) = caller(1);
        let (sent_later, _later_peer) = caller(2);
        answered(&relay, 1, ended);
        let mut read_then = Extensions::new();
        read_then.insert(relay.notification_arrived(true));
        tokio::time::sleep(LINGER + Duration::from_millis(100)).await;
        let _inflight = relay.register(RequestId::Number(2), token(2), sent_later);
        let attributed = relay.attribute_notification(&read_then, None).await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    }

    /// A line on the `GET` stream read after the one request in flight
    /// was answered, while another session's request ended just before,
    /// may be either's: the answered request's session does not take it
    /// for being the only one left in flight.
    #[tokio::test]
    async fn a_line_after_the_last_answer_is_not_that_sessions_while_another_just_ended() {
        let relay = Arc::new(Relay::default());
        let (answered_now, _answered_peer) = caller(1);
        let (ended_before, _ended_peer) = caller(2);
        answered(&relay, 2, ended_before);
        let _inflight = relay.register(RequestId::Number(1), token(1), answered_now);
        relay.answer_read(&RequestId::Number(1));
        let mut on_get_stream = Extensions::new();
        on_get_stream.insert(InboundStreamOrigin::Unassociated);
        on_get_stream.insert(relay.notification_arrived(true));
        let attributed = relay.attribute_notification(&on_get_stream, None).await;
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
    }

    /// An answer read before its request is registered (a fast upstream
    /// answers while rmcp is still handing the id back) still marks it:
    /// a line read after it is not the request's to carry.
    #[tokio::test]
    async fn an_answer_read_before_its_request_is_registered_still_counts() {
        let relay = Arc::new(Relay::default());
        let (mut only, _peer) = caller(1);
        only.request_id = Some(RequestId::Number(77));
        let sending = relay.sending();
        relay.answer_read(&RequestId::Number(1));
        let _inflight = relay.register(RequestId::Number(1), token(1), only);
        drop(sending);
        let mut after_answer = Extensions::new();
        after_answer.insert(relay.notification_arrived(true));
        let attributed = relay
            .attribute_notification(&after_answer, None)
            .await
            .expect("the session's");
        assert_eq!(attributed.session, 1);
        assert_eq!(
            attributed.request_id, None,
            "a line read after the answer went to the answered request"
        );
    }

    #[tokio::test]
    async fn a_late_log_message_goes_to_the_one_session_whose_request_just_ended() {
        let relay = Arc::new(Relay::default());
        let (only, _peer) = caller(1);
        answered(&relay, 1, only);
        let extensions = Extensions::new();
        let attributed = relay.attribute_notification(&extensions, None).await;
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_waits_for_the_ones_that_arrived_before_it() {
        let relay = Relay::default();
        let first = relay.notification_arrived(true);
        let second = relay.notification_arrived(true);
        let second_turn = relay.wait_turn(second);
        tokio::pin!(second_turn);
        assert!(futures::poll!(&mut second_turn).is_pending());
        relay.wait_turn(first).await;
        relay.notification_relayed(Some(first));
        // Woken by the relay, not by its time running out (paused time
        // would run out the shorter timer here first).
        tokio::time::timeout(TURN_LIMIT / 2, second_turn)
            .await
            .expect("its turn once the first is relayed");
    }

    #[test]
    fn a_request_id_is_first_sent_once() {
        let relay = Relay::default();
        let (number, text) = (RequestId::Number(1), RequestId::String("1".into()));
        assert!(relay.first_sent(&number));
        assert!(relay.first_sent(&text), "a string id is not the number");
        assert!(!relay.first_sent(&number));
        assert!(!relay.first_sent(&text));
    }

    /// A notification that takes no turn (a `list_changed`, a cancel),
    /// handled at once, lets no later progress overtake an earlier one.
    #[tokio::test(start_paused = true)]
    async fn one_taking_no_turn_moves_no_turn_on() {
        let relay = Relay::default();
        let first = relay.notification_arrived(true);
        let unordered = relay.notification_arrived(false);
        let second = relay.notification_arrived(true);
        relay.wait_turn(unordered).await;
        relay.notification_relayed(Some(unordered));
        let second_turn = relay.wait_turn(second);
        tokio::pin!(second_turn);
        assert!(
            futures::poll!(&mut second_turn).is_pending(),
            "the first is not relayed yet"
        );
        relay.notification_relayed(Some(first));
        tokio::time::timeout(TURN_LIMIT / 2, second_turn)
            .await
            .expect("its turn once the first is relayed");
        relay.notification_relayed(Some(second));
        // And nothing is left pending for an answer's drain.
        tokio::time::timeout(Duration::from_millis(1), relay.drain())
            .await
            .expect("none pending");
        // One never counted marks nothing.
        relay.notification_relayed(None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_whose_predecessor_never_goes_waits_only_so_long() {
        let relay = Relay::default();
        let _lost = relay.notification_arrived(true);
        let next = relay.notification_arrived(true);
        let started = tokio::time::Instant::now();
        relay.wait_turn(next).await;
        assert!(started.elapsed() >= TURN_LIMIT);
        relay.notification_relayed(Some(next));
        let after = relay.notification_arrived(true);
        let started = tokio::time::Instant::now();
        relay.wait_turn(after).await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the lost one holds no later one"
        );
    }

    #[test]
    fn a_url_elicitation_required_error_names_its_elicitations() {
        let data = serde_json::json!({
            "elicitations": [
                { "mode": "url", "elicitationId": "e1", "url": "https://a.example", "message": "m" },
                { "mode": "url", "url": "https://no-id.example" },
                { "mode": "url", "elicitationId": "e2", "url": "https://b.example", "message": "m" }
            ]
        });
        assert_eq!(required_elicitation_ids(Some(&data)), ["e1", "e2"]);
        assert!(required_elicitation_ids(Some(&serde_json::json!({ "uri": "x" }))).is_empty());
        assert!(required_elicitation_ids(Some(&serde_json::json!("text"))).is_empty());
        assert!(required_elicitation_ids(None).is_empty());
    }
}
