//! Keeps what an upstream says about a request ahead of the request's answer.
//!
//! rmcp hands each incoming notification to its own task, so a progress
//! notification or log message sent *before* a response can be relayed
//! *after* it, when the client's request stream is already closed. This
//! transport wrapper sees messages in wire order: it counts every progress
//! and log notification as pending in the [`Relay`] the moment it arrives,
//! and the relay's handler marks it done once relayed. A request's answer is
//! passed on only after the notifications that preceded it are
//! (`Relay::drain`).
//!
//! Messages read off an answer stream by the direct path
//! ([`super::direct_call`]) come in through an injection channel and are
//! passed to rmcp as if this transport had read them (already counted).
//!
//! Where every request passes through it (stdio, legacy SSE), it also
//! knows which are unanswered, and gives an error without an id (a server
//! that could not read a request's id) to the only one, which would
//! otherwise wait out its timeout.
//!
//! Being the transport, it is also the first to know when the connection
//! ends (the child exited, the HTTP session is gone, or the server answers
//! with an error about an unknown session): it then cancels its `ended`
//! token, which requests in flight and the session's supervisor wait on.

use std::{future::Future, sync::Arc, time::Duration};

use rmcp::{
    model::{
        ClientNotification, GetExtensions, JsonRpcMessage, ServerJsonRpcMessage,
        ServerNotification, ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
    RoleClient,
};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    raw::{wants_raw_answer, RawAnswers},
    unanswered::Unanswered,
    Relay,
};

/// An error answering no request in particular (`id` absent or null) that
/// talks about the session: what servers built on the TypeScript SDK's
/// examples send, with HTTP 400, for a session they no longer know (the
/// spec's answer is 404, which rmcp reports itself). No request would ever
/// get an answer on this session again, so it has ended.
pub(super) fn says_session_is_gone(error: &rmcp::model::JsonRpcError) -> bool {
    error.id.is_none() && talks_of_the_session(&error.error)
}

/// Whether an id-less error's message talks about the session (see
/// [`says_session_is_gone`]).
pub(super) fn talks_of_the_session(error: &rmcp::model::ErrorData) -> bool {
    error.message.to_ascii_lowercase().contains("session")
}

/// Whether a request's answer must wait for this notification to be
/// handled (`Some`), and whether it is relayed in wire order with the
/// others (`Some(true)`): progress and log messages, which the client
/// expects before the answer and in the order sent. Also, taking no turn:
/// the upstream's cancel of its own request to the client, whose relay
/// must not find the call's stream ended by an answer written just after
/// it; and a `list_changed`, which a list asked for after the answer must
/// wait for (`Coalescer::settled`), and so must be known before it.
/// Counted only once the session is initialized (see [`OrderedTransport`]):
/// rmcp hands every one of them to the handler, which marks it handled,
/// only from then on, and a cancel only under the initialize lifecycle.
pub(super) fn waits_for_relay(
    notification: &ServerNotification,
    cancels_reach_the_handler: bool,
) -> Option<bool> {
    match notification {
        ServerNotification::ProgressNotification(_)
        | ServerNotification::LoggingMessageNotification(_) => Some(true),
        ServerNotification::CancelledNotification(_) => cancels_reach_the_handler.then_some(false),
        ServerNotification::ToolListChangedNotification(_)
        | ServerNotification::PromptListChangedNotification(_)
        | ServerNotification::ResourceListChangedNotification(_) => Some(false),
        _ => None,
    }
}

/// The request `message` answers, if it is an answer (with an id).
fn answer_id(message: &ServerJsonRpcMessage) -> Option<&rmcp::model::RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

pub struct OrderedTransport<T> {
    inner: T,
    relay: Arc<Relay>,
    ended: CancellationToken,
    /// Told which requests' answers to keep verbatim as they go out.
    raw: Arc<RawAnswers>,
    /// From the direct path, when the transport has one; or made for
    /// lines the transport could not read (`malformed.rs`).
    injected: Option<mpsc::Receiver<ServerJsonRpcMessage>>,
    /// `injected` brings messages made for lines the transport could not
    /// read, not counted yet (see [`Self::with_injected_lines`]).
    injected_from_lines: bool,
    /// How far the session is: a notification is counted only once it is
    /// initialized (the first answer, to `initialize`, has passed). rmcp
    /// drops what comes before but log messages, and one counted but never
    /// handled would hold every later answer for the whole drain limit.
    lifecycle: Lifecycle,
    /// The requests sent and not answered (nor cancelled), kept where
    /// every request passes through this transport
    /// ([`Self::giving_idless_errors_an_id`]).
    unanswered: Option<Unanswered>,
    /// The inner transport has ended; what is left in `injected` goes
    /// before the end.
    input_ended: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Initializing,
    /// Under the `initialize` lifecycle (up to 2025-11-25), whose cancels
    /// rmcp hands to the handler.
    Initialized,
    /// Under a later one, whose cancels rmcp may keep from it.
    InitializedWithoutHandshake,
}

impl<T> OrderedTransport<T> {
    /// `ended` is cancelled when the connection ends, however it ends.
    pub fn new(
        inner: T,
        relay: Arc<Relay>,
        ended: CancellationToken,
        raw: Arc<RawAnswers>,
    ) -> Self {
        Self {
            inner,
            relay,
            ended,
            raw,
            injected: None,
            injected_from_lines: false,
            lifecycle: Lifecycle::Initializing,
            unanswered: None,
            input_ended: false,
        }
    }

    /// Also passes on what `injected` brings: the direct path's messages
    /// (HTTP), counted as it read them.
    pub fn with_injected(mut self, injected: mpsc::Receiver<ServerJsonRpcMessage>) -> Self {
        self.injected = Some(injected);
        self
    }

    /// Also gives an error without an id to the only request unanswered
    /// (`unanswered.rs`), none waiting longer than `ceiling`. Only for a
    /// transport every request passes through (stdio, legacy SSE): the
    /// direct path sends requests past this one (and gives such an error on
    /// a call's own stream to that call).
    pub fn giving_idless_errors_an_id(mut self, ceiling: Duration) -> Self {
        self.unanswered = Some(Unanswered::new(ceiling));
        self
    }

    /// Also passes on the messages `malformed.rs` made for lines of the
    /// transport's own that rmcp could not read (an error for an answer
    /// that was not JSON, a message with broken text repaired): counted
    /// and tracked as the transport's own messages are, and taken only
    /// when rmcp has none ready, so that the lines it read before (in the
    /// same read, still in its buffer) go first.
    pub fn with_injected_lines(mut self, injected: mpsc::Receiver<ServerJsonRpcMessage>) -> Self {
        self.injected = Some(injected);
        self.injected_from_lines = true;
        self
    }
}

impl<T: Transport<RoleClient>> OrderedTransport<T> {
    /// The next message, and whether the direct path read it (`true`):
    /// the inner transport's, or one injected. Once the inner transport
    /// has ended, what was injected before that is still passed on (the
    /// message made for a stdio child's last line, written just before
    /// it exited), and only then the end.
    async fn next_message(&mut self) -> Option<(ServerJsonRpcMessage, bool)> {
        let from_direct_path = !self.injected_from_lines;
        if !self.input_ended {
            let read = match &mut self.injected {
                // Both receives are cancel-safe (channel reads: rmcp's HTTP
                // transport is a worker behind a channel; its stdio reader
                // keeps a partial line across a cancel).
                Some(injected) if self.injected_from_lines => tokio::select! {
                    biased;
                    message = self.inner.receive() => message.map(|message| (message, false)),
                    Some(message) = injected.recv() => Some((message, false)),
                },
                Some(injected) => tokio::select! {
                    message = self.inner.receive() => message.map(|message| (message, false)),
                    Some(message) = injected.recv() => Some((message, true)),
                },
                None => self.inner.receive().await.map(|message| (message, false)),
            };
            if read.is_some() {
                return read;
            }
            self.input_ended = true;
        }
        let left = self.injected.as_mut()?.try_recv().ok()?;
        Some((left, from_direct_path))
    }
}

impl<T> Drop for OrderedTransport<T> {
    /// rmcp drops the transport when its service loop stops for any reason.
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for OrderedTransport<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Marked before it is sent, so the answer cannot come first.
        match &item {
            JsonRpcMessage::Request(request) => {
                if wants_raw_answer(&request.request) {
                    self.raw.want(&request.id);
                }
                if let Some(unanswered) = &mut self.unanswered {
                    unanswered.request_sent(&request.id);
                }
            }
            JsonRpcMessage::Notification(notification) => {
                if let Some(unanswered) = &mut self.unanswered {
                    unanswered.other_message_sent();
                    // A cancelled request may never be answered.
                    if let ClientNotification::CancelledNotification(cancel) =
                        &notification.notification
                    {
                        if let Some(id) = &cancel.params.request_id {
                            unanswered.settled(id);
                        }
                    }
                }
            }
            // An answer to a request of the server's: an error without an
            // id may be about it.
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {
                if let Some(unanswered) = &mut self.unanswered {
                    unanswered.other_message_sent();
                }
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let (message, from_direct_path) = match self.next_message().await {
            Some((message, from_direct_path)) => (Some(message), from_direct_path),
            None => (None, false),
        };
        if from_direct_path {
            // The direct path's notifications were counted as it read
            // them; an answer made for a line rmcp could not read is read
            // now.
            if let Some(id) = message.as_ref().and_then(answer_id) {
                self.relay.answer_read(id);
            }
            return message;
        }
        match &message {
            None => self.ended.cancel(),
            Some(JsonRpcMessage::Error(error)) if says_session_is_gone(error) => {
                tracing::warn!(error = %error.error.message, "the upstream no longer knows this session");
                self.ended.cancel();
            }
            _ => {}
        }
        let mut message = message;
        if let (Some(JsonRpcMessage::Error(error)), Some(unanswered)) =
            (&mut message, &mut self.unanswered)
        {
            if error.id.is_none() && !talks_of_the_session(&error.error) {
                error.id = unanswered.answered_by(&error.error);
                if let Some(id) = &error.id {
                    tracing::debug!(%id, error = %error.error.message,
                        "an error without an id taken as the answer to the only request unanswered");
                }
            }
        }
        match (&mut message, self.lifecycle) {
            (Some(JsonRpcMessage::Notification(notification)), lifecycle)
                if lifecycle != Lifecycle::Initializing =>
            {
                let cancels_counted = lifecycle == Lifecycle::Initialized;
                if let Some(in_order) = waits_for_relay(&notification.notification, cancels_counted)
                {
                    let arrival = self.relay.notification_arrived(in_order);
                    notification.notification.extensions_mut().insert(arrival);
                }
            }
            (Some(JsonRpcMessage::Response(response)), Lifecycle::Initializing) => {
                self.lifecycle = match &response.result {
                    ServerResult::InitializeResult(result)
                        if !result.protocol_version.has_initialize() =>
                    {
                        Lifecycle::InitializedWithoutHandshake
                    }
                    _ => Lifecycle::Initialized,
                };
            }
            (Some(JsonRpcMessage::Error(_)), Lifecycle::Initializing) => {
                self.lifecycle = Lifecycle::Initialized;
            }
            // Where it was read: one read after an abandoned call's answer
            // is not that call's (`Relay::abandoned_callers`).
            (Some(JsonRpcMessage::Request(request)), _) => {
                let read = self.relay.request_arrived();
                request.request.extensions_mut().insert(read);
            }
            _ => {}
        }
        // What is read after an answer is not about its request.
        if let Some(id) = message.as_ref().and_then(answer_id) {
            self.relay.answer_read(id);
            if let Some(unanswered) = &mut self.unanswered {
                unanswered.settled(id);
            }
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use rmcp::model::{GetExtensions, JsonRpcMessage, ServerJsonRpcMessage};
    use serde_json::json;

    use super::*;
    use crate::upstream::relay::Arrival;

    /// A transport that hands out what it was given, then waits for ever.
    struct Scripted(VecDeque<ServerJsonRpcMessage>);

    impl Transport<RoleClient> for Scripted {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            match self.0.pop_front() {
                Some(message) => Some(message),
                None => std::future::pending().await,
            }
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    fn message(value: serde_json::Value) -> ServerJsonRpcMessage {
        serde_json::from_value(value).expect("a server message")
    }

    fn log_line() -> ServerJsonRpcMessage {
        message(json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "before the answer"}}))
    }

    fn initialized() -> ServerJsonRpcMessage {
        message(json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "s", "version": "1"}}}))
    }

    /// A message `malformed.rs` made for a line rmcp could not read comes
    /// after the lines rmcp read before it, and is counted as the
    /// transport's own: a repaired `initialize` answer ends the
    /// handshake, so that the notifications after it are counted (they
    /// were not, for the session's life), and a repaired answer read
    /// after a log line does not overtake it.
    #[tokio::test]
    async fn lines_made_anew_are_read_in_their_place_and_counted() {
        let (injected, lines) = mpsc::channel(4);
        let mut transport = OrderedTransport::new(
            Scripted(VecDeque::new()),
            Arc::new(Relay::default()),
            CancellationToken::new(),
            Arc::default(),
        )
        .with_injected_lines(lines);
        injected.try_send(initialized()).unwrap();
        let first = transport.receive().await.expect("the initialize answer");
        assert!(matches!(first, JsonRpcMessage::Response(_)));
        transport.inner.0.push_back(log_line());
        injected
            .try_send(message(json!({"jsonrpc": "2.0", "id": 1, "result": {}})))
            .unwrap();
        match transport.receive().await {
            Some(JsonRpcMessage::Notification(notification)) => assert!(
                notification
                    .notification
                    .extensions()
                    .get::<Arrival>()
                    .is_some(),
                "counted once the handshake is over"
            ),
            other => panic!("the log line first, got {other:?}"),
        }
        assert!(matches!(
            transport.receive().await,
            Some(JsonRpcMessage::Response(_))
        ));
    }

    fn sent(value: serde_json::Value) -> TxJsonRpcMessage<RoleClient> {
        serde_json::from_value(value).expect("a client message")
    }

    fn call(id: serde_json::Value) -> TxJsonRpcMessage<RoleClient> {
        sent(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "t"}}))
    }

    fn idless_error(message: &str) -> ServerJsonRpcMessage {
        self::message(json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32600, "message": message}}))
    }

    /// The id an error without one is given as it is read.
    async fn id_given(
        transport: &mut OrderedTransport<Scripted>,
        error: ServerJsonRpcMessage,
    ) -> Option<rmcp::model::RequestId> {
        transport.inner.0.push_back(error);
        match transport.receive().await {
            Some(JsonRpcMessage::Error(error)) => error.id,
            other => panic!("the error, got {other:?}"),
        }
    }

    /// An error without an id answers the one request unanswered, and no
    /// request while two are, nor once a notification went out just
    /// before (`unanswered.rs` tells the rest).
    #[tokio::test]
    async fn an_error_without_an_id_answers_the_only_request_unanswered() {
        let mut transport = OrderedTransport::new(
            Scripted(VecDeque::new()),
            Arc::new(Relay::default()),
            CancellationToken::new(),
            Arc::default(),
        )
        .giving_idless_errors_an_id(Duration::from_secs(60));
        transport.send(call(json!(1))).await.unwrap();
        let one = rmcp::model::RequestId::Number(1);
        assert_eq!(
            id_given(&mut transport, idless_error("bad")).await,
            Some(one)
        );
        transport.send(call(json!(2))).await.unwrap();
        transport.send(call(json!("three"))).await.unwrap();
        assert_eq!(id_given(&mut transport, idless_error("bad")).await, None);
        transport
            .send(sent(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "three"}}),
            ))
            .await
            .unwrap();
        transport
            .inner
            .0
            .push_back(message(json!({"jsonrpc": "2.0", "id": "2", "result": {}})));
        transport.receive().await.expect("the answer");
        transport.send(call(json!(4))).await.unwrap();
        assert_eq!(
            id_given(&mut transport, idless_error("bad")).await,
            None,
            "the cancel just before may be what the server could not read"
        );
        // Request 4 answered, the cancel long ago: 5 alone is unanswered
        // ("2", answered as text, no longer counts).
        transport
            .inner
            .0
            .push_back(message(json!({"jsonrpc": "2.0", "id": 4, "result": {}})));
        transport.receive().await.expect("the answer");
        let unanswered = |transport: &mut OrderedTransport<Scripted>| {
            transport
                .unanswered
                .as_mut()
                .expect("kept")
                .forget_other_messages();
        };
        unanswered(&mut transport);
        transport.send(call(json!(5))).await.unwrap();
        assert_eq!(
            id_given(&mut transport, idless_error("bad")).await,
            Some(rmcp::model::RequestId::Number(5))
        );
        transport.send(call(json!(6))).await.unwrap();
        assert_eq!(
            id_given(&mut transport, idless_error("unknown session")).await,
            None,
            "an error about the session is the session's end, no request's answer"
        );
        // An answer the gateway sends (to a request of the server's): an
        // error read after it may be about it.
        transport
            .inner
            .0
            .push_back(message(json!({"jsonrpc": "2.0", "id": 6, "result": {}})));
        transport.receive().await.expect("the answer");
        unanswered(&mut transport);
        transport.send(call(json!(7))).await.unwrap();
        transport
            .send(sent(
                json!({"jsonrpc": "2.0", "id": 90, "result": {"roots": []}}),
            ))
            .await
            .unwrap();
        assert_eq!(id_given(&mut transport, idless_error("bad")).await, None);
    }

    /// Beside the direct path (HTTP), which sends requests past it, the
    /// transport is not told to give such errors an id, and does not.
    #[tokio::test]
    async fn beside_the_direct_path_an_error_without_an_id_stays_so() {
        let (_injected, answers) = mpsc::channel(1);
        let mut transport = OrderedTransport::new(
            Scripted(VecDeque::new()),
            Arc::new(Relay::default()),
            CancellationToken::new(),
            Arc::default(),
        )
        .with_injected(answers);
        transport.send(call(json!(1))).await.unwrap();
        assert_eq!(id_given(&mut transport, idless_error("bad")).await, None);
    }

    /// A transport that hands out what it was given, then ends.
    struct Finite(VecDeque<ServerJsonRpcMessage>);

    impl Transport<RoleClient> for Finite {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            self.0.pop_front()
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    /// A message made for the last line before the input ended (a child
    /// that wrote its answer and exited) is passed on before the end, and
    /// the connection counts as ended only then.
    #[tokio::test]
    async fn what_was_injected_before_the_end_goes_before_it() {
        let (injected, lines) = mpsc::channel(4);
        let ended = CancellationToken::new();
        let mut transport = OrderedTransport::new(
            Finite(VecDeque::from([initialized()])),
            Arc::new(Relay::default()),
            ended.clone(),
            Arc::default(),
        )
        .with_injected_lines(lines);
        assert!(matches!(
            transport.receive().await,
            Some(JsonRpcMessage::Response(_))
        ));
        injected
            .try_send(message(json!({"jsonrpc": "2.0", "id": 1, "result": {}})))
            .unwrap();
        match transport.receive().await {
            Some(JsonRpcMessage::Response(response)) => {
                assert_eq!(response.id, rmcp::model::RequestId::Number(1));
            }
            other => panic!("the last answer, got {other:?}"),
        }
        assert!(!ended.is_cancelled(), "not ended before its last answer");
        assert!(transport.receive().await.is_none());
        assert!(ended.is_cancelled());
        assert!(transport.receive().await.is_none(), "and ended it stays");
    }
}
