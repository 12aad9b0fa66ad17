//! The hot path: a `tools/call` to a Streamable HTTP upstream, posted by
//! the caller's own task.
//!
//! rmcp's client takes each request through its service loop, its
//! transport worker and a task per answer stream, with a channel hop at
//! each and every message parsed through untagged enums; for the gateway's
//! most frequent request that machinery cost more CPU than the upstream's
//! whole answer (BENCHMARKS.md). Here the task that waits for the answer
//! posts the request itself, on the session rmcp negotiated (same session
//! id, protocol version and configured headers, plus the request's trace
//! context), and reads the answer as JSON or as an SSE stream.
//!
//! Only the answer is taken here. Everything else on the answer's stream
//! (progress, log messages, server requests, cancellations) is handed to
//! rmcp's service loop through [`OrderedTransport`](super::ordered)'s
//! injection channel, marked as arriving on this request's stream, so
//! attribution, relaying and answering server requests stay the one
//! implementation every other request uses. Progress and log messages are
//! counted as pending before they are handed over, so the caller's
//! `Relay::drain` still puts them ahead of the answer.
//!
//! A stream that breaks before the answer is resumed with `Last-Event-ID`
//! (as rmcp's client does, SEP-1699), a bounded number of times.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use arc_swap::ArcSwapOption;
use futures::StreamExt;
use reqwest::{
    header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE},
    StatusCode,
};
use rmcp::{
    model::{
        CallToolResult, ClientJsonRpcMessage, ClientRequest, ErrorData, GetExtensions, GetMeta,
        JsonRpcMessage, NumberOrString, ProgressToken, RequestId, ServerJsonRpcMessage,
        ServerResult,
    },
    service::{InboundStreamOrigin, ServiceError},
    transport::{
        streamable_http_client::{StreamableHttpError, StreamableHttpResponseLimits},
        DynamicTransportError,
    },
};
use serde::Deserialize;
use sse_stream::{Sse, SseStream};
use tokio::sync::mpsc;

use super::{
    http_client::trace_headers,
    ordered::says_session_is_gone,
    ordered::waits_for_relay,
    raw_post::{bounded_events, content_type, read_bounded, with_session},
    Relay,
};

/// How often a broken answer stream is resumed before the request fails.
const MAX_RESUMES: usize = 3;
/// The wait before resuming when the server named none (`retry`).
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// The longest wait before resuming that the server may ask for.
const MAX_RETRY: Duration = Duration::from_secs(10);
/// How long the rest of an answer stream is read after the answer, so its
/// connection goes back to the pool (rmcp's client does the same).
const DRAIN_AFTER_ANSWER: Duration = Duration::from_millis(50);
/// Messages handed to rmcp's loop ahead of it; a full channel holds the
/// stream's reading back rather than dropping anything.
pub const INJECT_CAPACITY: usize = 64;

type HttpError = StreamableHttpError<reqwest::Error>;

/// How a post on the upstream session looks: taken from rmcp's
/// `notifications/initialized` post, the first one with the negotiated
/// session id and protocol version.
pub struct SessionPost {
    pub url: reqwest::Url,
    pub session_id: Option<Arc<str>>,
    pub auth_header: Option<String>,
    /// The configured headers and `mcp-protocol-version`.
    pub headers: HashMap<HeaderName, HeaderValue>,
}

/// The direct path of one upstream session.
pub struct DirectCalls {
    client: reqwest::Client,
    /// `None` until the session is initialized.
    session: ArcSwapOption<SessionPost>,
    /// Into rmcp's service loop (see the module doc).
    inject: mpsc::Sender<ServerJsonRpcMessage>,
    relay: Arc<Relay>,
    next_id: AtomicU64,
    limits: StreamableHttpResponseLimits,
}

/// A request about to go the direct way.
pub struct DirectRequest {
    pub id: RequestId,
    pub progress_token: ProgressToken,
    post: Arc<SessionPost>,
}

impl DirectCalls {
    pub fn new(
        client: reqwest::Client,
        inject: mpsc::Sender<ServerJsonRpcMessage>,
        relay: Arc<Relay>,
        limits: StreamableHttpResponseLimits,
    ) -> Self {
        Self {
            client,
            session: ArcSwapOption::empty(),
            inject,
            relay,
            next_id: AtomicU64::new(1),
            limits,
        }
    }

    /// Records how rmcp posts on the session (see [`SessionPost`]).
    pub fn session_ready(&self, post: SessionPost) {
        self.session.store(Some(Arc::new(post)));
    }

    /// Ids for `request` if it goes the direct way: a `tools/call` on an
    /// initialized session. Its id and progress token are strings, so they
    /// never collide with rmcp's numbers on the same session.
    pub fn prepare(&self, request: &mut ClientRequest) -> Option<DirectRequest> {
        if !matches!(request, ClientRequest::CallToolRequest(_)) {
            return None;
        }
        let post = self.session.load_full()?;
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name: Arc<str> = format!("junction-{n}").into();
        let id = RequestId::String(name.clone());
        let progress_token = ProgressToken(NumberOrString::String(name));
        request
            .get_meta_mut()
            .set_progress_token(progress_token.clone());
        Some(DirectRequest {
            id,
            progress_token,
            post,
        })
    }

    /// Posts the prepared request and waits for its answer.
    pub async fn call(
        &self,
        direct: DirectRequest,
        request: ClientRequest,
    ) -> Result<ServerResult, ServiceError> {
        let trace: Vec<_> = trace_headers(&request).collect();
        let message = ClientJsonRpcMessage::request(request, direct.id.clone());
        let body = serde_json::to_vec(&message).map_err(|error| {
            ServiceError::McpError(ErrorData::internal_error(error.to_string(), None))
        })?;
        let post = &direct.post;
        let mut builder = self
            .client
            .post(post.url.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        builder = with_session_headers(builder, post);
        for (name, value) in trace {
            builder = builder.header(name, value);
        }
        let response = builder.send().await.map_err(client_error)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Err(transport(unexpected(
                "the upstream accepted the request without answering it".into(),
            )));
        }
        if status == StatusCode::NOT_FOUND && post.session_id.is_some() {
            return Err(transport(HttpError::SessionExpired));
        }
        let content_type = content_type(&response);
        if status.is_success() && content_type.starts_with("text/event-stream") {
            return self.read_stream(&direct, response).await;
        }
        if content_type.starts_with("application/json") {
            let body = read_bounded(response, self.limits.max_json_response_size)
                .await
                .map_err(transport)?;
            // A JSON-RPC error is an answer whatever the status.
            return match self.handle(&direct.id, body.as_ref()).await {
                Some(answer) => answer,
                None => Err(transport(unexpected(format!(
                    "HTTP {status}: a JSON answer that is not the request's"
                )))),
            };
        }
        Err(transport(unexpected(format!(
            "HTTP {status} with content type {content_type:?}"
        ))))
    }

    /// Reads an SSE answer stream until the answer, resuming it if it breaks.
    async fn read_stream(
        &self,
        direct: &DirectRequest,
        response: reqwest::Response,
    ) -> Result<ServerResult, ServiceError> {
        let mut response = response;
        let mut last_event_id: Option<String> = None;
        let mut retry = DEFAULT_RETRY;
        let mut resumes = 0;
        loop {
            let bytes = bounded_events(response.bytes_stream(), self.limits.max_sse_event_size);
            let mut events = std::pin::pin!(SseStream::from_bytes_stream(bytes));
            let broke = loop {
                match events.next().await {
                    None => break None,
                    Some(Err(error)) => break Some(error.to_string()),
                    Some(Ok(event)) => {
                        if let Some(id) = event.id.as_ref().filter(|id| !id.is_empty()) {
                            last_event_id = Some(id.clone());
                        }
                        if let Some(millis) = event.retry {
                            retry = Duration::from_millis(millis).min(MAX_RETRY);
                        }
                        let Sse {
                            data: Some(data), ..
                        } = event
                        else {
                            continue;
                        };
                        if data.trim().is_empty() {
                            continue;
                        }
                        if let Some(answer) = self.handle(&direct.id, data.as_bytes()).await {
                            let rest = async { while events.next().await.is_some() {} };
                            let _ = tokio::time::timeout(DRAIN_AFTER_ANSWER, rest).await;
                            return answer;
                        }
                    }
                }
            };
            let Some(event_id) = last_event_id.clone().filter(|_| resumes < MAX_RESUMES) else {
                let why = broke.unwrap_or_else(|| "it ended".to_owned());
                return Err(transport(unexpected(format!(
                    "the upstream's answer stream broke before the answer: {why}"
                ))));
            };
            resumes += 1;
            tracing::debug!(resumes, "resuming an upstream answer stream");
            tokio::time::sleep(retry).await;
            response = self.resume(&direct.post, event_id).await?;
        }
    }

    /// `GET` with `Last-Event-ID`: the rest of a broken answer stream.
    async fn resume(
        &self,
        post: &SessionPost,
        last_event_id: String,
    ) -> Result<reqwest::Response, ServiceError> {
        let builder = self
            .client
            .get(post.url.clone())
            .header(ACCEPT, "text/event-stream")
            .header("last-event-id", last_event_id);
        let response = with_session_headers(builder, post)
            .send()
            .await
            .map_err(client_error)?;
        match response.status() {
            status if status.is_success() => Ok(response),
            StatusCode::NOT_FOUND if post.session_id.is_some() => {
                Err(transport(HttpError::SessionExpired))
            }
            status => Err(transport(unexpected(format!(
                "HTTP {status} resuming the answer stream"
            )))),
        }
    }

    /// One message of the answer: the answer itself (`Some`), or anything
    /// else, which goes to rmcp's loop (`None`).
    async fn handle(
        &self,
        id: &RequestId,
        bytes: &[u8],
    ) -> Option<Result<ServerResult, ServiceError>> {
        if let Some(answer) = answer_to(id, bytes) {
            return Some(answer);
        }
        // Anything else is read as rmcp reads it.
        let message = match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
            Ok(message) => message,
            Err(error) => {
                return Some(Err(transport(unexpected(format!(
                    "not a JSON-RPC message on the answer stream: {error}"
                )))))
            }
        };
        if let JsonRpcMessage::Error(error) = &message {
            if says_session_is_gone(error) {
                tracing::warn!(error = %error.error.message, "the upstream no longer knows this session");
                return Some(Err(transport(HttpError::SessionExpired)));
            }
        }
        self.pass_on(message, id).await;
        None
    }

    /// Hands a message to rmcp's loop, as arriving on `id`'s stream.
    async fn pass_on(&self, mut message: ServerJsonRpcMessage, id: &RequestId) {
        let origin = InboundStreamOrigin::OutboundRequest(id.clone());
        let mut counted = false;
        match &mut message {
            JsonRpcMessage::Request(request) => {
                request.request.extensions_mut().insert(origin);
            }
            JsonRpcMessage::Notification(notification) => {
                counted = waits_for_relay(&notification.notification);
                notification.notification.extensions_mut().insert(origin);
            }
            _ => {}
        }
        if counted {
            self.relay.notification_arrived();
        }
        if self.inject.send(message).await.is_err() && counted {
            // The session's loop has stopped: nothing will relay it.
            self.relay.notification_relayed();
        }
    }
}

/// Enough of a JSON-RPC message to tell an answer from the rest.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

/// A message on the answer stream, read once: a `tools/call` answer is
/// read as its own type rather than tried against every variant of rmcp's
/// untagged `ServerResult`; a request or notification has a `method`.
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    result: Option<CallToolResult>,
    #[serde(default)]
    error: Option<ErrorData>,
}

/// The answer to request `id`, if `bytes` is it. One read tells the
/// answer from the rest and, for the usual answer (a `CallToolResult` or an
/// error), is the answer.
fn answer_to(id: &RequestId, bytes: &[u8]) -> Option<Result<ServerResult, ServiceError>> {
    match serde_json::from_slice::<Incoming>(bytes) {
        Ok(Incoming {
            method: None,
            id: Some(answered),
            result,
            error,
        }) if &answered == id => Some(match (error, result) {
            (Some(error), _) => Err(ServiceError::McpError(error)),
            (None, Some(result)) => Ok(ServerResult::CallToolResult(result)),
            (None, None) => read_as_rmcp(bytes),
        }),
        Ok(_) => None,
        // Some other result (a task, an odd shape): ours if its id is.
        Err(_) => match serde_json::from_slice::<Envelope>(bytes) {
            Ok(Envelope {
                method: None,
                id: Some(answered),
            }) if &answered == id => Some(read_as_rmcp(bytes)),
            _ => None,
        },
    }
}

/// An answer whose result is not a `CallToolResult`, as rmcp reads it.
fn read_as_rmcp(bytes: &[u8]) -> Result<ServerResult, ServiceError> {
    match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
        Ok(JsonRpcMessage::Response(response)) => Ok(response.result),
        Ok(JsonRpcMessage::Error(error)) => Err(ServiceError::McpError(error.error)),
        Ok(_) => Err(ServiceError::UnexpectedResponse),
        Err(error) => Err(transport(unexpected(format!(
            "not a JSON-RPC answer: {error}"
        )))),
    }
}

fn with_session_headers(
    builder: reqwest::RequestBuilder,
    post: &SessionPost,
) -> reqwest::RequestBuilder {
    with_session(
        builder,
        post.session_id.as_deref(),
        post.auth_header.as_deref(),
        &post.headers,
    )
}

fn unexpected(message: String) -> HttpError {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(message))
}

fn client_error(error: reqwest::Error) -> ServiceError {
    transport(StreamableHttpError::Client(error))
}

/// As rmcp reports a failed send, so `http_client::means_session_gone`
/// reads both alike.
fn transport(error: HttpError) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "junction-direct-call",
        std::any::TypeId::of::<DirectCalls>(),
        Box::new(error),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn junction_1() -> RequestId {
        RequestId::String("junction-1".into())
    }

    #[test]
    fn a_call_answer_is_read_as_its_own_type() {
        let answer = br#"{"jsonrpc":"2.0","id":"junction-1","result":{"content":[{"type":"text","text":"hi"}],"isError":false}}"#;
        let Some(Ok(ServerResult::CallToolResult(result))) = answer_to(&junction_1(), answer)
        else {
            panic!("not a call result");
        };
        assert_eq!(result.is_error, Some(false));
        let error = br#"{"jsonrpc":"2.0","id":"junction-1","error":{"code":-32602,"message":"no such tool"}}"#;
        let Some(Err(ServiceError::McpError(error))) = answer_to(&junction_1(), error) else {
            panic!("not an error");
        };
        assert_eq!(error.code.0, -32602);
    }

    #[test]
    fn only_the_requests_own_answer_is_taken() {
        let request =
            br#"{"jsonrpc":"2.0","id":"junction-1","method":"sampling/createMessage","params":{}}"#;
        assert!(
            answer_to(&junction_1(), request).is_none(),
            "a server request, same id"
        );
        let other = br#"{"jsonrpc":"2.0","id":"junction-2","result":{"content":[]}}"#;
        assert!(
            answer_to(&junction_1(), other).is_none(),
            "another request's answer"
        );
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"junction-1","progress":1}}"#;
        assert!(answer_to(&junction_1(), progress).is_none());
    }

    #[test]
    fn another_kind_of_result_is_read_as_rmcp_reads_it() {
        let task = br#"{"jsonrpc":"2.0","id":"junction-1","result":{"task":{"taskId":"t1","status":"working","createdAt":"2025-11-25T00:00:00Z","lastUpdatedAt":"2025-11-25T00:00:00Z","ttl":null}}}"#;
        let Some(Ok(result)) = answer_to(&junction_1(), task) else {
            panic!("a task result is still the answer");
        };
        assert!(
            !matches!(result, ServerResult::CallToolResult(_)),
            "{result:?}"
        );
    }

    #[test]
    fn the_envelope_tells_answers_from_the_rest() {
        let answer: Envelope =
            serde_json::from_slice(br#"{"jsonrpc":"2.0","id":"junction-7","result":{}}"#).unwrap();
        assert_eq!(
            answer.id,
            Some(RequestId::String("junction-7".into())),
            "an answer"
        );
        assert!(answer.method.is_none());
        let request: Envelope = serde_json::from_slice(
            br#"{"jsonrpc":"2.0","id":"junction-7","method":"sampling/createMessage","params":{}}"#,
        )
        .unwrap();
        assert!(request.method.is_some(), "a server request, same id");
    }
}
