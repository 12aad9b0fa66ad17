//! The rules that find a message's downstream caller.
//!
//! Every request the gateway sends upstream is registered (`inflight.rs`)
//! with its [`Caller`]: the downstream session and request that caused it. When the
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
//! Attribution reads the registry and changes nothing in it but forgetting
//! abandoned requests past their time.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use rmcp::{
    model::{Extensions, RequestId},
    service::InboundStreamOrigin,
};

use super::{
    lock, Arrival, Caller, Inflight, Relay, RequestRead, ABANDONED_LINGER, DRAIN_LIMIT,
    GET_STREAM_LINGER, LINGER,
};
use crate::wait_for_zero::wait_for_zero;

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

impl Relay {
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
}
