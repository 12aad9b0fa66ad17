//! The registry of upstream requests in flight: a request is marked as
//! being sent before rmcp picks its id, registered once it has, its answer
//! marked as read in wire order, and removed by its guard however it ends.
//! What an ended request leaves behind (a recent end, an abandoned
//! request still perhaps at work upstream) is kept for attribution
//! (`attribute.rs`).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Instant,
};

use tokio::sync::Notify;

use rmcp::model::{ProgressToken, RequestId};

use super::{
    lock, Caller, Relay, ABANDONED_MAX, EARLY_ANSWERS_KEPT, RECENT_KEPT, RECENT_MAX, SETTLE_LIMIT,
    URL_ELICITATION_REQUIRED,
};
use crate::wait_for_zero::{count_down, wait_for_zero};

pub(super) struct Inflight {
    pub(super) caller: Caller,
    pub(super) progress_token: ProgressToken,
    pub(super) activity: Arc<Activity>,
    /// Where the upstream's answer was read among the messages the
    /// transport read ([`Relay::answer_read`]), once it was (its call may
    /// not have taken it yet): a log line read after it is not the
    /// request's.
    pub(super) answer_read_at: Option<u64>,
    /// The read number (`Relay::reads`) before it was sent: a message read
    /// earlier cannot be about it.
    pub(super) sent_at: u64,
}

/// What says an upstream request not yet answered is still being worked
/// on, which keeps its idle timeout from running out.
#[derive(Default)]
pub(super) struct Activity {
    /// Poked on each progress notification, and when the client answers
    /// a request the upstream sent within it.
    pub(super) progressed: Notify,
    /// The upstream's requests within it (sampling, elicitation, roots)
    /// waiting for the client: a person may take minutes to answer, and
    /// an upstream waiting for them is not silent.
    pub(super) awaiting_client: AtomicUsize,
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

/// A request that ended, for the messages read just after it.
pub(super) struct Ended {
    pub(super) at: Instant,
    /// As [`Inflight::sent_at`].
    pub(super) sent_at: u64,
    pub(super) id: RequestId,
    pub(super) caller: Caller,
}

/// A request the gateway stopped waiting for before its answer.
pub(super) struct AbandonedRequest {
    pub(super) at: Instant,
    pub(super) id: RequestId,
    /// Its session.
    pub(super) caller: Caller,
    /// The read number of its answer, once the upstream sent one after
    /// all (a server that answers a cancelled request, as the Python SDK
    /// does): what is read after it is not the request's.
    pub(super) answer_read_at: Option<u64>,
}

impl Relay {
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
pub(super) fn required_elicitation_ids(data: Option<&serde_json::Value>) -> Vec<String> {
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
