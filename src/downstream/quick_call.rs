//! Routed requests (`tools/call`, `prompts/get`, `resources/read`,
//! `completion/complete`) answered before rmcp's handler when the answer is
//! quick; "call" below is any of them.
//!
//! Through rmcp's server a call goes from the route to the session's worker
//! task, to its service loop, to a task spawned for the handler, and its
//! answer back the same way into an SSE stream: a cross-thread wake-up at
//! each hop, which on the benchmark's two cores cost more than everything
//! else the gateway does for a call (BENCHMARKS.md). Here the session layer
//! (`http/resumable`, where the prebuilt `tools/list` is answered too)
//! starts the call itself, with the work the handler does (`routed.rs`),
//! admitted and observed the same way, and waits for it until the route's
//! hold deadline (`http/one_write.rs`). An answer by then goes back whole,
//! as `application/json`.
//!
//! Otherwise the call is handed over: it goes on running, moved with its
//! request into rmcp ([`HandedOver`], a request extension), and rmcp's
//! handler awaits it instead of calling again. From then on rmcp owns the
//! request as if it had just arrived, with its stream, priming event,
//! resumption and cancellation. A call is handed over when
//! - the deadline passes (a slow tool);
//! - the upstream sends something for the request's own stream (progress,
//!   a log message, a server request): the relay asks for the handover and
//!   waits until rmcp's handler holds the call ([`Handoff`]), so rmcp knows
//!   the request (and its progress token) the message is routed by;
//! - the client cancels it: the cancel waits for the same handover
//!   ([`QuickCalls`]), so it reaches rmcp after the request it names.
//!
//! A call whose client goes away before its answer (hyper drops the
//! request) runs on to its end: disconnection is not a cancel (transports,
//! 2025-11-25), nor is it on rmcp's path. Only the client's own cancel
//! still stops it ([`Waiting`]).
//!
//! A task-augmented call (its answer is a task, its messages are routed by
//! it) and a session not initialized or asleep go to rmcp as before.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, OnceLock, PoisonError,
    },
    time::Duration,
};

use foldhash::HashMap;

use bytes::Bytes;
use rmcp::{
    model::{
        ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcRequest, RequestId,
        RequestMetaObject, ServerJsonRpcMessage, ServerResult,
    },
    ErrorData,
};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    admission::admit_and_observe,
    observe::{sent_meta, RequestOrigin},
    request_streams::{OpenQueue, RelatedQueue},
    routed::{self, Routed, RoutedRequest},
    tasks::TaskAugmentation,
    SessionState,
};
use crate::{gateway::Gateway, upstream::Caller};

/// The longest a message for a quick call's stream waits for the handover;
/// past it (rmcp never took the request: its session ended) it goes the
/// way it would without a stream.
const HANDOVER_WAIT: Duration = Duration::from_secs(5);

type Answer = Result<ServerResult, ErrorData>;
type Work = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A quick call's way to rmcp: asked for by whoever has something for the
/// request's stream, settled once rmcp's handler holds the call, or once
/// nobody ever will (answered, dropped).
#[derive(Default)]
pub struct Handoff {
    asked: AtomicBool,
    ask: Notify,
    settled: AtomicBool,
    settle: Notify,
    /// Set once the call runs on with nobody waiting for its answer (its
    /// client went away): rmcp never saw the request, so the client's
    /// cancel of it is carried out here.
    abandoned: OnceLock<CancellationToken>,
}

impl Handoff {
    /// Asks for the call to go to rmcp, and waits until it has (bounded):
    /// what is sent for the request afterwards is routed onto its stream.
    pub(crate) async fn hand_over(&self) {
        self.asked.store(true, Ordering::Release);
        self.ask.notify_one();
        if tokio::time::timeout(HANDOVER_WAIT, self.settled())
            .await
            .is_err()
        {
            tracing::warn!("a quick call was not handed over in time");
        }
    }

    async fn asked(&self) {
        if !self.asked.load(Ordering::Acquire) {
            // `notify_one` keeps a permit for a waiter yet to come.
            self.ask.notified().await;
        }
    }

    fn settle(&self) {
        self.settled.store(true, Ordering::Release);
        self.settle.notify_waiters();
    }

    async fn settled(&self) {
        loop {
            let notified = self.settle.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.settled.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// Quick calls not yet handed over, by HTTP session and request id, for
/// the client's cancellations.
#[derive(Default)]
pub(crate) struct QuickCalls {
    pending: Mutex<PendingCalls>,
}

/// By HTTP session id, then request id.
type PendingCalls = HashMap<Arc<str>, HashMap<RequestId, Arc<Handoff>>>;

impl QuickCalls {
    fn pending(&self) -> MutexGuard<'_, PendingCalls> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before `message` goes to rmcp: if it cancels a quick call of
    /// `session`, that call is handed over first, so rmcp knows the request
    /// the cancel names.
    pub(crate) async fn before(&self, session: &str, message: &ClientJsonRpcMessage) {
        let ClientJsonRpcMessage::Notification(notification) = message else {
            return;
        };
        let ClientNotification::CancelledNotification(cancelled) = &notification.notification
        else {
            return;
        };
        let Some(request) = &cancelled.params.request_id else {
            return;
        };
        let handoff = self
            .pending()
            .get(session)
            .and_then(|requests| requests.get(request))
            .cloned();
        let Some(handoff) = handoff else {
            return;
        };
        if handoff.abandoned.get().is_none() {
            handoff.hand_over().await;
        }
        // Abandoned before or while it was being handed over (its client
        // went away meanwhile): rmcp never saw the request, so the cancel
        // is carried out here.
        if let Some(cancel) = handoff.abandoned.get() {
            cancel.cancel();
        }
    }
}

/// A quick call's place in [`QuickCalls`] and the end of its stream's
/// queue. Dropped once rmcp has the request (or the call is over); a call
/// never handed over closes its queue and settles its handoff then.
pub(crate) struct Pending {
    calls: Arc<QuickCalls>,
    session: Arc<str>,
    request: RequestId,
    handoff: Arc<Handoff>,
    queue: Arc<RelatedQueue>,
    /// The request's id on its session, held while the call runs: a call
    /// whose client went away runs on, and a request with its id must
    /// still be refused meanwhile (its client may be retrying it).
    _id: Option<OpenQueue>,
    handed_over: bool,
}

impl Pending {
    /// One holding no id (the tests' calls, known to no stream).
    #[cfg(test)]
    fn new(calls: &Arc<QuickCalls>, session: &Arc<str>, request: &RequestId) -> Self {
        Self::holding(calls, session, request, None)
    }

    /// Holding `id`, the request's id on its session with the queue its
    /// stream reads (`None`: a queue of its own).
    fn holding(
        calls: &Arc<QuickCalls>,
        session: &Arc<str>,
        request: &RequestId,
        id: Option<OpenQueue>,
    ) -> Self {
        let queue = id
            .as_ref()
            .map_or_else(Arc::default, |id| id.queue().clone());
        let handoff = Arc::new(Handoff::default());
        calls
            .pending()
            .entry(session.clone())
            .or_default()
            .insert(request.clone(), handoff.clone());
        Self {
            calls: calls.clone(),
            session: session.clone(),
            request: request.clone(),
            handoff,
            queue,
            _id: id,
            handed_over: false,
        }
    }

    /// Nobody waits for the call's answer any more; it stays known until it
    /// ends, so that the client's cancel (`cancel`) still reaches it.
    fn abandon(&self, cancel: &CancellationToken) {
        let _ = self.handoff.abandoned.set(cancel.clone());
        // What comes for the request now goes the `GET` stream's way.
        self.queue.close();
        self.handoff.settle();
    }
}

/// A quick call waiting for its answer in the request's future. Dropped
/// before it has one (the client went away), it runs on, on a task of its
/// own, to its end (bounded as every upstream request is).
struct Waiting {
    /// Until answered or handed over.
    call: Option<(Work, Pending)>,
    cancel: CancellationToken,
}

impl Waiting {
    fn work(&mut self) -> &mut Work {
        &mut self.call.as_mut().expect("waiting until answered").0
    }

    /// Answered: nothing runs on.
    fn answered(mut self) {
        self.call = None;
    }

    /// Moved to rmcp's handler, with its request.
    fn hand_over(mut self) -> (RunningCall, Pending) {
        let (work, pending) = self.call.take().expect("waiting until handed over");
        let cancel = self.cancel.clone();
        (RunningCall { work, cancel }, pending)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some((work, pending)) = self.call.take() else {
            return;
        };
        tracing::debug!(id = ?pending.request, "the client went away before a quick answer; the call runs on");
        pending.abandon(&self.cancel);
        // No runtime only when the process is going down with it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _answer = work.await;
                drop(pending);
            });
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        {
            let mut pending = self.calls.pending();
            if let Some(requests) = pending.get_mut(&self.session) {
                // A client may reuse an answered request's id.
                if requests
                    .get(&self.request)
                    .is_some_and(|kept| Arc::ptr_eq(kept, &self.handoff))
                {
                    requests.remove(&self.request);
                }
                if requests.is_empty() {
                    pending.remove(&self.session);
                }
            }
        }
        if !self.handed_over {
            // What comes for the request now goes the `GET` stream's way.
            self.queue.close();
            self.handoff.settle();
        }
    }
}

/// A quick call still running, handed to rmcp with its request; rmcp's
/// handler [`take`](Self::take)s it.
#[derive(Clone)]
pub(crate) struct HandedOver(Arc<Parcel>);

struct Parcel {
    call: Mutex<Option<RunningCall>>,
    handoff: Arc<Handoff>,
    /// Where the call is known to cancels, to be known there again if the
    /// request is dropped before rmcp takes it.
    calls: Arc<QuickCalls>,
    session: Arc<str>,
    request: RequestId,
    /// The request's id on its session, held again by the call should it
    /// run on (see `Pending::_id`).
    id: Option<OpenQueue>,
}

impl Drop for Parcel {
    /// Nobody took the call: the request was dropped before rmcp's handler
    /// had it (its client went away while rmcp queued it, or its session
    /// ended first). Going away is not a cancel: the call runs on to its
    /// end, on a task of its own (bounded as every upstream request is),
    /// as a quick call does whose client left before its answer.
    fn drop(&mut self) {
        self.handoff.settle();
        let call = self
            .call
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(call), Ok(runtime)) = (call, tokio::runtime::Handle::try_current()) {
            tracing::debug!(
                "a handed-over call's request was dropped before rmcp took it; the call runs on"
            );
            // Known again, as abandoned, until it ends: the client's cancel
            // still stops it (its first registration went with the
            // request's future).
            let known = Pending::holding(&self.calls, &self.session, &self.request, self.id.take());
            known.abandon(&call.cancel);
            runtime.spawn(async move {
                let _answer = call.work.await;
                drop(known);
            });
        }
    }
}

impl HandedOver {
    /// The call, once; rmcp knows its request from now on.
    pub(crate) fn take(&self) -> Option<RunningCall> {
        let call = self
            .0
            .call
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.0.handoff.settle();
        call
    }
}

/// A call started by the quick path, admitted and observed.
pub(crate) struct RunningCall {
    work: Work,
    cancel: CancellationToken,
}

impl RunningCall {
    /// Its answer; `cancelled` (rmcp's token for the request) cancels it.
    pub(crate) async fn finish(mut self, cancelled: &CancellationToken) -> Answer {
        tokio::select! {
            answer = &mut self.work => answer,
            _ = cancelled.cancelled() => {
                self.cancel.cancel();
                self.work.await
            }
        }
    }
}

/// What became of a request offered to the session layer's early answers
/// (the quick path, or a prebuilt list).
pub(crate) enum Quick {
    /// Answered: the whole JSON-RPC response, in pieces sent in order.
    Answered(Vec<Bytes>),
    /// Still running, now in the request's extensions ([`HandedOver`]);
    /// keep [`Pending`] until rmcp has the request.
    HandedOver(Pending),
    /// Not a quick call: rmcp's, as before.
    Declined,
}

/// Offers `request` of `state`'s session (HTTP session `session`) to the
/// quick path, waiting for its answer until `deadline`; what is related to
/// it goes to `open`, its stream's queue, once it is handed over, and the
/// call holds `open` (the request's id) until it ends.
pub(crate) async fn offer(
    gateway: &Arc<Gateway>,
    state: &Arc<SessionState>,
    calls: &Arc<QuickCalls>,
    session: &Arc<str>,
    request: &mut JsonRpcRequest<ClientRequest>,
    deadline: Instant,
    open: &OpenQueue,
) -> Quick {
    let (routed, params_meta, extensions) = match &mut request.request {
        ClientRequest::CallToolRequest(call) => {
            let routed = Routed::CallTool(call.params.clone());
            (routed, call.params.meta.as_ref(), &mut call.extensions)
        }
        ClientRequest::GetPromptRequest(get) => {
            let routed = Routed::GetPrompt(get.params.clone());
            (routed, get.params.meta.as_ref(), &mut get.extensions)
        }
        ClientRequest::ReadResourceRequest(read) => {
            let routed = Routed::ReadResource(read.params.clone());
            (routed, read.params.meta.as_ref(), &mut read.extensions)
        }
        ClientRequest::CompleteRequest(complete) => {
            let routed = Routed::Complete(complete.params.clone());
            (
                routed,
                complete.params.meta.as_ref(),
                &mut complete.extensions,
            )
        }
        _ => return Quick::Declined,
    };
    let parts = extensions.get::<axum::http::request::Parts>();
    if state.is_asleep()
        || parts.is_some_and(|parts| parts.extensions.get::<TaskAugmentation>().is_some())
    {
        return Quick::Declined;
    }
    let Some(peer) = state.peer() else {
        return Quick::Declined;
    };
    let meta = sent_meta(params_meta, extensions)
        .cloned()
        .unwrap_or_default();
    let headers = parts.map(|parts| parts.headers.clone());
    let pending = Pending::holding(calls, session, &request.id, Some(open.clone()));
    let cancel = state.quick_call_token();
    let routed = RoutedRequest {
        request: routed,
        caller: Caller {
            session: state.key,
            peer,
            request_id: Some(request.id.clone()),
            progress_token: meta.get_progress_token(),
            profile: state.profile(),
            log_level: state.log_level.clone(),
            request_stream: Some(pending.queue.clone()),
            handoff: Some(pending.handoff.clone()),
        },
        cancel: cancel.clone(),
    };
    let observed = observed(
        gateway.clone(),
        state.clone(),
        routed,
        request.id.clone(),
        meta,
        headers,
    );
    let handoff = pending.handoff.clone();
    let mut waiting = Waiting {
        call: Some((Box::pin(observed), pending)),
        cancel,
    };
    let why = tokio::select! {
        answer = waiting.work() => {
            waiting.answered();
            return Quick::Answered(vec![json_rpc_answer(&request.id, answer)]);
        }
        _ = tokio::time::sleep_until(deadline) => "not answered by the deadline",
        _ = handoff.asked() => "something is due on its stream",
    };
    tracing::debug!(id = ?request.id, why, "handing a quick call over to rmcp");
    let (call, mut pending) = waiting.hand_over();
    extensions.insert(HandedOver(Arc::new(Parcel {
        call: Mutex::new(Some(call)),
        handoff,
        calls: pending.calls.clone(),
        session: pending.session.clone(),
        request: pending.request.clone(),
        id: pending._id.clone(),
    })));
    pending.handed_over = true;
    Quick::HandedOver(pending)
}

/// The call, admitted and observed as rmcp's handler does it; `id`,
/// `meta` and `headers` are the client's.
async fn observed(
    gateway: Arc<Gateway>,
    state: Arc<SessionState>,
    call: RoutedRequest,
    id: RequestId,
    meta: RequestMetaObject,
    headers: Option<axum::http::HeaderMap>,
) -> Answer {
    let limit = gateway.config().limits.max_concurrent_requests;
    let method = call.request.method();
    // Cancelled by its client (once handed over) or by its session's end.
    let cancel = call.cancel.clone();
    let origin = RequestOrigin {
        id: &id,
        headers: headers.as_ref(),
        meta: Some(&meta.0),
        cancelled: Some(&cancel),
        session_fingerprint: state.fingerprint(),
    };
    let work = routed::answer(&gateway, &state, call, &meta);
    admit_and_observe(&state.requests, limit, method, origin, work).await
}

/// The JSON-RPC response carrying `answer` to request `id`.
fn json_rpc_answer(id: &RequestId, answer: Answer) -> Bytes {
    let message = match answer {
        Ok(mut result) => {
            // As rmcp's handler shapes every answer for a client before
            // 2026-07-28, and the gateway offers none newer
            // (`handler::NEWEST_PROTOCOL`): no `resultType`, no non-object
            // `structuredContent` (it goes into `content` as text).
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            ServerJsonRpcMessage::response(result, id.clone())
        }
        Err(error) => ServerJsonRpcMessage::error(error, Some(id.clone())),
    };
    match serde_json::to_vec(&message) {
        Ok(json) => json.into(),
        Err(error) => {
            let error = ErrorData::internal_error(
                format!("the answer could not be written: {error}"),
                None,
            );
            serde_json::to_vec(&ServerJsonRpcMessage::error(error, Some(id.clone())))
                .unwrap_or_default()
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use rmcp::model::{
        CancelledNotification, CancelledNotificationParam, JsonRpcNotification, ServerNotification,
        ToolListChangedNotification,
    };

    use super::*;

    fn cancel_of(request: RequestId) -> ClientJsonRpcMessage {
        let notification =
            CancelledNotification::new(CancelledNotificationParam::new(Some(request), None));
        ClientJsonRpcMessage::Notification(JsonRpcNotification {
            jsonrpc: Default::default(),
            notification: notification.into(),
        })
    }

    /// A call that runs until `cancel` fires; the receiver hears its end.
    fn until_cancelled(cancel: &CancellationToken) -> (Work, tokio::sync::oneshot::Receiver<()>) {
        let (ended, end) = tokio::sync::oneshot::channel();
        let cancel = cancel.clone();
        let work: Work = Box::pin(async move {
            cancel.cancelled().await;
            let _ = ended.send(());
            Err(ErrorData::internal_error("cancelled", None))
        });
        (work, end)
    }

    /// A parcel known to no session (its cancels go nowhere).
    fn parcel(call: Option<RunningCall>, handoff: Arc<Handoff>) -> Parcel {
        Parcel {
            call: Mutex::new(call),
            handoff,
            calls: Arc::default(),
            session: Arc::from("nobody"),
            request: RequestId::Number(0),
            id: None,
        }
    }

    fn message() -> ServerNotification {
        ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default())
    }

    /// A quick answer has the shape rmcp's handler gives every answer to a
    /// client before 2026-07-28: non-object structured content goes into
    /// `content` as text, and no `resultType`.
    #[test]
    fn a_quick_answer_is_shaped_for_the_clients_protocol() {
        let mut result = rmcp::model::CallToolResult::structured(serde_json::json!([1, 2]));
        result.content.clear();
        let json = json_rpc_answer(
            &RequestId::Number(4),
            Ok(ServerResult::CallToolResult(result)),
        );
        let answer: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
        let result = &answer["result"];
        assert!(result.get("structuredContent").is_none(), "{answer}");
        assert!(result.get("resultType").is_none(), "{answer}");
        assert_eq!(result["content"][0]["text"], "[1,2]", "{answer}");
        assert_eq!(answer["id"], 4);
    }

    #[tokio::test]
    async fn a_cancel_of_a_quick_call_waits_for_its_handover() {
        let calls = Arc::new(QuickCalls::default());
        let session: Arc<str> = Arc::from("s1");
        let pending = Pending::new(&calls, &session, &RequestId::Number(7));
        let handoff = pending.handoff.clone();

        // Other sessions' and requests' cancels, and other messages, pass.
        calls
            .before("s2", &cancel_of(RequestId::Number(7)))
            .now_or_never()
            .expect("passes");
        calls
            .before("s1", &cancel_of(RequestId::Number(8)))
            .now_or_never()
            .expect("passes");

        let cancel_7 = cancel_of(RequestId::Number(7));
        let mut cancel = Box::pin(calls.before("s1", &cancel_7));
        assert!(
            cancel.as_mut().now_or_never().is_none(),
            "waits for the handover"
        );
        handoff
            .asked()
            .now_or_never()
            .expect("the handover was asked for");
        // Handed over: rmcp's handler takes the call.
        let handed = HandedOver(Arc::new(parcel(
            Some(RunningCall {
                work: Box::pin(async {
                    Ok(ServerResult::CallToolResult(
                        rmcp::model::CallToolResult::success(vec![]),
                    ))
                }),
                cancel: CancellationToken::new(),
            }),
            handoff.clone(),
        )));
        assert!(handed.take().is_some());
        assert!(handed.take().is_none(), "taken once");
        cancel
            .now_or_never()
            .expect("the cancel goes on once rmcp has the call");
        drop(pending);
        assert!(calls.pending().is_empty());
    }

    #[tokio::test]
    async fn a_call_answered_quickly_lets_late_messages_go_their_own_way() {
        let calls = Arc::new(QuickCalls::default());
        let session: Arc<str> = Arc::from("s1");
        let pending = Pending::new(&calls, &session, &RequestId::Number(1));
        let (handoff, queue) = (pending.handoff.clone(), pending.queue.clone());
        assert!(queue.push(message()).is_none(), "queued while pending");
        drop(pending);
        assert!(calls.pending().is_empty());
        handoff
            .hand_over()
            .now_or_never()
            .expect("nothing to wait for once answered");
        assert!(
            queue.push(message()).is_some(),
            "given back, for the GET stream"
        );
    }

    #[tokio::test]
    async fn a_call_whose_client_went_away_runs_to_its_end_and_can_be_cancelled() {
        let calls = Arc::new(QuickCalls::default());
        let session: Arc<str> = Arc::from("s1");
        let pending = Pending::new(&calls, &session, &RequestId::Number(3));
        let (handoff, queue) = (pending.handoff.clone(), pending.queue.clone());
        let cancel = CancellationToken::new();
        let (work, end) = until_cancelled(&cancel);
        let waiting = Waiting {
            call: Some((work, pending)),
            cancel: cancel.clone(),
        };
        // hyper drops the request's future when its client goes away.
        drop(waiting);
        assert!(!cancel.is_cancelled(), "going away is not a cancel");
        handoff
            .hand_over()
            .now_or_never()
            .expect("nothing to wait for: nobody will take the call");
        assert!(
            queue.push(message()).is_some(),
            "given back, for the GET stream"
        );
        assert!(!calls.pending().is_empty(), "known until it ends");
        calls
            .before("s1", &cancel_of(RequestId::Number(3)))
            .now_or_never()
            .expect("no handover to wait for");
        end.await.expect("the call ran on, to the client's cancel");
        for _ in 0..100 {
            if calls.pending().is_empty() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("an ended call stays known");
    }

    /// A call handed over whose request is dropped before rmcp takes it
    /// (its client went away meanwhile) runs on, and its client's cancel
    /// still stops it: the call was no longer known to cancels.
    /// ... and holds its id until it ends: a client retrying it with that
    /// id is refused meanwhile, not run twice.
    #[tokio::test]
    async fn a_handed_over_call_dropped_before_rmcp_took_it_can_be_cancelled() {
        let calls = Arc::new(QuickCalls::default());
        let session: Arc<str> = Arc::from("s1");
        let streams = Arc::new(crate::downstream::request_streams::RequestStreams::default());
        let open = streams
            .open(&session, RequestId::Number(5))
            .expect("the id is free");
        let mut pending =
            Pending::holding(&calls, &session, &RequestId::Number(5), Some(open.clone()));
        pending.handed_over = true;
        let cancel = CancellationToken::new();
        let (work, end) = until_cancelled(&cancel);
        let handed = Parcel {
            call: Mutex::new(Some(RunningCall {
                work,
                cancel: cancel.clone(),
            })),
            handoff: pending.handoff.clone(),
            calls: calls.clone(),
            session: session.clone(),
            request: RequestId::Number(5),
            id: Some(open),
        };
        // The request, and with it both, dropped.
        drop(pending);
        drop(handed);
        assert!(!cancel.is_cancelled(), "going away is not a cancel");
        assert!(
            streams.open(&session, RequestId::Number(5)).is_none(),
            "the call runs on, but its id was given back"
        );
        calls
            .before("s1", &cancel_of(RequestId::Number(5)))
            .now_or_never()
            .expect("no handover to wait for");
        tokio::time::timeout(std::time::Duration::from_secs(5), end)
            .await
            .expect("the client's cancel reached the call")
            .expect("the call ended");
        let mut freed = false;
        for _ in 0..100 {
            if streams.open(&session, RequestId::Number(5)).is_some() {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(freed, "the id is given back once the call has ended");
    }

    /// The client cancels and goes away at once: the cancel waits for the
    /// handover, which the going away settles instead. It still cancels.
    #[tokio::test]
    async fn a_cancel_racing_its_clients_departure_still_cancels() {
        let calls = Arc::new(QuickCalls::default());
        let session: Arc<str> = Arc::from("s1");
        let pending = Pending::new(&calls, &session, &RequestId::Number(3));
        let cancel = CancellationToken::new();
        let (work, _end) = until_cancelled(&cancel);
        let waiting = Waiting {
            call: Some((work, pending)),
            cancel: cancel.clone(),
        };
        let cancelled = cancel_of(RequestId::Number(3));
        let mut before = Box::pin(calls.before("s1", &cancelled));
        assert!(
            before.as_mut().now_or_never().is_none(),
            "waits for the handover"
        );
        drop(waiting);
        before.await;
        assert!(cancel.is_cancelled(), "the client's cancel was lost");
    }

    #[tokio::test]
    async fn a_call_nobody_takes_settles_its_handoff() {
        let handoff = Arc::new(Handoff::default());
        let handed = HandedOver(Arc::new(parcel(None, handoff.clone())));
        let mut waiting = Box::pin(handoff.hand_over());
        assert!(waiting.as_mut().now_or_never().is_none());
        drop(handed);
        waiting
            .now_or_never()
            .expect("settled when the call was dropped");
    }

    /// The request carrying a handed-over call is dropped before rmcp's
    /// handler takes it (its client went away meanwhile): the call is not
    /// dropped with it, it runs to its end.
    #[tokio::test]
    async fn a_handed_over_call_nobody_took_runs_on() {
        let (go, went) = tokio::sync::oneshot::channel::<()>();
        let (ended, end) = tokio::sync::oneshot::channel();
        let handoff = Arc::new(Handoff::default());
        let handed = HandedOver(Arc::new(parcel(
            Some(RunningCall {
                work: Box::pin(async move {
                    let _ = went.await;
                    let _ = ended.send(());
                    Err(ErrorData::internal_error("done", None))
                }),
                cancel: CancellationToken::new(),
            }),
            handoff.clone(),
        )));
        drop(handed);
        let _ = go.send(());
        tokio::time::timeout(Duration::from_secs(5), end)
            .await
            .expect("the call ran on")
            .expect("to its end, not dropped");
    }

    #[tokio::test]
    async fn a_handed_over_call_is_cancelled_by_rmcps_token() {
        let cancel = CancellationToken::new();
        let call = RunningCall {
            work: Box::pin({
                let cancel = cancel.clone();
                async move {
                    cancel.cancelled().await;
                    Err(ErrorData::internal_error("cancelled", None))
                }
            }),
            cancel,
        };
        let rmcp_token = CancellationToken::new();
        rmcp_token.cancel();
        let answer = call.finish(&rmcp_token).now_or_never().expect("done");
        assert_eq!(answer.unwrap_err().message, "cancelled");
    }

    #[test]
    fn answers_are_json_rpc_responses_with_the_bare_result() {
        use rmcp::model::{ReadResourceResult, ResourceContents};
        let id = RequestId::String("a \"quoted\" id".into());
        let read = ReadResourceResult::new(vec![ResourceContents::text("hi", "demo://x")]);
        let answer = json_rpc_answer(&id, Ok(ServerResult::ReadResourceResult(read)));
        let ours: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(ours["jsonrpc"], "2.0");
        assert_eq!(ours["id"], "a \"quoted\" id");
        assert_eq!(ours["result"]["contents"][0]["uri"], "demo://x", "{ours}");
        assert_eq!(ours["result"]["contents"][0]["text"], "hi", "{ours}");
        let error = ErrorData::invalid_params("no such tool", None);
        let ours: serde_json::Value =
            serde_json::from_slice(&json_rpc_answer(&id, Err(error))).unwrap();
        assert_eq!(ours["error"]["message"], "no such tool");
        assert_eq!(ours["id"], "a \"quoted\" id");
    }
}
