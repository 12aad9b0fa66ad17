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
use bytes::Bytes;
use futures::{stream::BoxStream, StreamExt, TryStreamExt};
use reqwest::{
    header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE},
    Method, StatusCode,
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
use sse_stream::SseStream;
use tokio::sync::mpsc;

use crate::header_names::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

use super::{
    http_client::trace_headers,
    ordered::says_session_is_gone,
    ordered::waits_for_relay,
    raw_post::{bounded_events, content_type, read_bounded},
    same_task_http::{self, SameTaskClient, SameTaskError},
    Relay,
};

/// How often in a row a broken answer stream is resumed without anything
/// new on it before the request fails. A resume that brings a new event
/// starts the count again: a server may close a long call's stream at every
/// step on purpose and expect it resumed (SEP-1699 polling); the request's
/// own timeout bounds the whole.
const MAX_RESUMES: usize = 3;
/// The wait before resuming when the server named none (`retry`); one it
/// names is kept to, within the request's timeout.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
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

/// A session's posts, ready to go.
struct ReadySession {
    post: SessionPost,
    /// What every request on the session carries (configured headers,
    /// protocol version, bearer token, session id), built once for both
    /// clients.
    headers: HeaderMap,
    /// For a plain-`http` upstream: its connections, and the URL's
    /// `/path?query`.
    same_task: Option<(SameTaskClient, String)>,
    /// Whether rmcp hands the upstream's cancels to the handler on this
    /// session (the `initialize` lifecycle; see `ordered::waits_for_relay`).
    cancels_reach_the_handler: bool,
}

impl ReadySession {
    /// `None` if the token or session id cannot be a header value (rmcp
    /// itself could not have sent them).
    fn new(post: SessionPost, connect_timeout: Duration) -> Option<Self> {
        let mut headers: HeaderMap = post
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        if let Some(token) = &post.auth_header {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(id) = &post.session_id {
            headers.insert(MCP_SESSION_ID, HeaderValue::from_str(id).ok()?);
        }
        let same_task = same_task_http::suits(&post.url)
            .then(|| SameTaskClient::new(&post.url, connect_timeout))
            .flatten()
            .map(|client| {
                let mut origin_form = post.url.path().to_owned();
                if let Some(query) = post.url.query() {
                    origin_form.push('?');
                    origin_form.push_str(query);
                }
                (client, origin_form)
            });
        let cancels_reach_the_handler = post
            .headers
            .get(&MCP_PROTOCOL_VERSION)
            .and_then(|version| version.to_str().ok())
            .is_none_or(|version| version < rmcp::model::ProtocolVersion::NO_INITIALIZE.as_str());
        Some(Self {
            post,
            headers,
            same_task,
            cancels_reach_the_handler,
        })
    }
}

/// The direct path of one upstream session.
pub struct DirectCalls {
    client: reqwest::Client,
    /// `None` until the session is initialized.
    session: ArcSwapOption<ReadySession>,
    connect_timeout: Duration,
    /// Into rmcp's service loop (see the module doc).
    inject: mpsc::Sender<ServerJsonRpcMessage>,
    relay: Arc<Relay>,
    next_id: AtomicU64,
    limits: StreamableHttpResponseLimits,
    /// The ids of the events other than answers handed to rmcp from this
    /// session's answer streams, the latest [`DELIVERED_MAX`]: a resumed
    /// stream that brings one of them again is replaying another stream.
    delivered: std::sync::Mutex<RecentIds>,
    /// Laid over the session's headers on every request.
    live: Option<super::LiveHeaders>,
}

/// The latest [`DELIVERED_MAX`] event ids, oldest out first; each insert
/// and look-up O(1) (a progress-heavy call records one per event).
#[derive(Default)]
struct RecentIds {
    known: std::collections::HashSet<Arc<str>>,
    order: std::collections::VecDeque<Arc<str>>,
}

impl RecentIds {
    fn contains(&self, id: &str) -> bool {
        self.known.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if self.known.contains(id) {
            return;
        }
        let id: Arc<str> = id.into();
        self.known.insert(id.clone());
        self.order.push_back(id);
        if self.order.len() > DELIVERED_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.known.remove(&oldest);
            }
        }
    }
}

/// How many delivered event ids a session remembers (see
/// [`DirectCalls::delivered`]).
const DELIVERED_MAX: usize = 1024;

/// A request about to go the direct way.
pub struct DirectRequest {
    pub id: RequestId,
    pub progress_token: ProgressToken,
    post: Arc<ReadySession>,
}

impl DirectCalls {
    pub fn new(
        client: reqwest::Client,
        inject: mpsc::Sender<ServerJsonRpcMessage>,
        relay: Arc<Relay>,
        limits: StreamableHttpResponseLimits,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            client,
            session: ArcSwapOption::empty(),
            connect_timeout,
            inject,
            relay,
            next_id: AtomicU64::new(1),
            limits,
            delivered: Default::default(),
            live: None,
        }
    }

    /// Sends `live`'s current values with every request (see
    /// [`super::live_headers`]).
    pub fn with_live_headers(mut self, live: Option<super::LiveHeaders>) -> Self {
        self.live = live;
        self
    }

    /// Records how rmcp posts on the session (see [`SessionPost`]).
    pub fn session_ready(&self, post: SessionPost) {
        // A session whose posts cannot be written keeps rmcp's path.
        self.session
            .store(ReadySession::new(post, self.connect_timeout).map(Arc::new));
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
        let mut message = ClientJsonRpcMessage::request(request, direct.id.clone());
        let body = super::call_body::request_body(&mut message).map_err(|error| {
            ServiceError::McpError(ErrorData::internal_error(error.to_string(), None))
        })?;
        let session = &direct.post;
        let reply = self.send(session, Method::POST, Some(body), trace).await?;
        let status = reply.status;
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Err(transport(unexpected(
                "the upstream accepted the request without answering it".into(),
            )));
        }
        // Handed back for a new session to take, rather than copied before
        // every call for the rare one refused.
        let refused_unrun = |message: ClientJsonRpcMessage| {
            let unsent = match message {
                JsonRpcMessage::Request(request) => Some(Box::new(request.request)),
                _ => None,
            };
            transport(SessionForgotten {
                unrun: true,
                unsent: std::sync::Mutex::new(unsent),
            })
        };
        if status == StatusCode::NOT_FOUND && session.post.session_id.is_some() {
            return Err(refused_unrun(message));
        }
        // A 400 may say the session is unknown too (servers before 404).
        if status == StatusCode::BAD_REQUEST && session.post.session_id.is_some() {
            let body = read_bounded(reply.body, self.limits.max_json_response_size)
                .await
                .map_err(|error| transport(unexpected(error.to_string())))?;
            if refuses_unknown_session(&body) {
                return Err(refused_unrun(message));
            }
            // A JSON-RPC error is an answer whatever the status.
            return match self.handle(&direct.id, body.as_ref()).await {
                Some(answer) => answer,
                None => Err(transport(unexpected(format!(
                    "HTTP {status} with content type {:?}",
                    reply.content_type
                )))),
            };
        }
        if status.is_success() && reply.content_type.starts_with("text/event-stream") {
            return self.read_stream(&direct, reply).await;
        }
        if reply.content_type.starts_with("application/json") {
            let body = read_bounded(reply.body, self.limits.max_json_response_size)
                .await
                .map_err(|error| transport(unexpected(error.to_string())))?;
            // A JSON-RPC error is an answer whatever the status.
            return match self.handle(&direct.id, body.as_ref()).await {
                Some(answer) => answer,
                None => Err(transport(unexpected(not_the_answer(status, &body)))),
            };
        }
        Err(transport(unexpected(format!(
            "HTTP {status} with content type {:?}",
            reply.content_type
        ))))
    }

    /// Reads an SSE answer stream until the answer, resuming it if it breaks.
    async fn read_stream(
        &self,
        direct: &DirectRequest,
        reply: Reply,
    ) -> Result<ServerResult, ServiceError> {
        let mut reply = reply;
        let mut last_event_id: Option<String> = None;
        let mut retry = DEFAULT_RETRY;
        let mut resumes = 0;
        let mut resumes_made = 0;
        loop {
            let bytes = bounded_events(reply.body, self.limits.max_sse_event_size);
            let mut events = std::pin::pin!(SseStream::from_bytes_stream(bytes));
            let broke = loop {
                match events.next().await {
                    None => break None,
                    Some(Err(error)) => break Some(error.to_string()),
                    Some(Ok(event)) => {
                        if let Some(id) = event.id.as_ref().filter(|id| !id.is_empty()) {
                            if last_event_id.as_ref() != Some(id) {
                                resumes = 0;
                            }
                            last_event_id = Some(id.clone());
                        }
                        if let Some(millis) = event.retry {
                            retry = Duration::from_millis(millis);
                        }
                        // Only `message` events (the default, also
                        // when the `event:` field is empty) carry
                        // JSON-RPC; others (a server's own heartbeats) are
                        // skipped, as rmcp's reader does.
                        if event
                            .event
                            .as_deref()
                            .is_some_and(|kind| !kind.is_empty() && kind != "message")
                        {
                            continue;
                        }
                        let Some(data) = event.data else {
                            continue;
                        };
                        if data.trim().is_empty() {
                            continue;
                        }
                        // Event ids are unique within the session: one
                        // seen before is a replay, which some servers
                        // (the reference server among them) send from
                        // every stream of the session on a resume. On a
                        // shared mount those streams are other clients'
                        // (their sampling requests, their log lines).
                        let event_id = event.id.filter(|id| !id.is_empty());
                        if resumes_made > 0
                            && event_id
                                .as_deref()
                                .is_some_and(|id| lock(&self.delivered).contains(id))
                        {
                            tracing::debug!("skipped an event the upstream replayed on a resumed answer stream: it was delivered before");
                            continue;
                        }
                        if let Some(answer) = self.handle(&direct.id, data.as_bytes()).await {
                            let rest = async { while events.next().await.is_some() {} };
                            let _ = tokio::time::timeout(DRAIN_AFTER_ANSWER, rest).await;
                            return answer;
                        }
                        if let Some(id) = event_id {
                            lock(&self.delivered).insert(&id);
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
            resumes_made += 1;
            tracing::debug!(resumes, "resuming an upstream answer stream");
            tokio::time::sleep(retry).await;
            reply = self.resume(&direct.post, event_id).await?;
        }
    }

    /// `GET` with `Last-Event-ID`: the rest of a broken answer stream.
    async fn resume(
        &self,
        session: &ReadySession,
        last_event_id: String,
    ) -> Result<Reply, ServiceError> {
        let last_event_id = HeaderValue::from_str(&last_event_id)
            .map_err(|_| transport(unexpected("an SSE event id that is no header value".into())))?;
        let headers = vec![(HeaderName::from_static("last-event-id"), last_event_id)];
        let reply = self.send(session, Method::GET, None, headers).await?;
        match reply.status {
            status if status.is_success() => Ok(reply),
            StatusCode::NOT_FOUND if session.post.session_id.is_some() => {
                Err(transport(SessionForgotten::after_taking()))
            }
            status => Err(transport(unexpected(format!(
                "HTTP {status} resuming the answer stream"
            )))),
        }
    }

    /// Sends one request on the session: a `POST` of `body`, or a `GET`
    /// for the answer stream. A plain-`http` upstream is reached on the
    /// caller's task ([`SameTaskClient`]), any other through reqwest.
    async fn send(
        &self,
        session: &ReadySession,
        method: Method,
        body: Option<Vec<u8>>,
        extra: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Reply, ServiceError> {
        let accept = match body {
            Some(_) => HeaderValue::from_static("application/json, text/event-stream"),
            None => HeaderValue::from_static("text/event-stream"),
        };
        // Sized for what is added below: a clone of the session's headers
        // has no room, and grew at each insert (~2k instructions a call).
        let mut headers = HeaderMap::with_capacity(session.headers.len() + 2 + extra.len());
        headers.extend(
            session
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        super::live_headers::apply(&self.live, &mut headers);
        headers.insert(ACCEPT, accept);
        if body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        headers.extend(extra);
        if let Some((client, origin_form)) = &session.same_task {
            let mut request = axum::http::Request::builder()
                .method(method)
                .uri(origin_form.as_str())
                .body(http_body_util::Full::new(Bytes::from(
                    body.unwrap_or_default(),
                )))
                .map_err(|error| {
                    transport(unexpected(format!("cannot build the request: {error}")))
                })?;
            *request.headers_mut() = headers;
            let response = client.send(request).await.map_err(transport)?;
            return Ok(Reply {
                status: response.status(),
                content_type: content_type(response.headers()),
                body: response.into_body().map_err(BodyError::from).boxed(),
            });
        }
        let mut builder = self
            .client
            .request(method, session.post.url.clone())
            .headers(headers);
        if let Some(body) = body {
            builder = builder.body(body);
        }
        let response = builder.send().await.map_err(client_error)?;
        Ok(Reply {
            status: response.status(),
            content_type: content_type(response.headers()),
            body: response.bytes_stream().map_err(BodyError::from).boxed(),
        })
    }

    /// One message of the answer: the answer itself (`Some`), or anything
    /// else, which goes to rmcp's loop (`None`).
    async fn handle(
        &self,
        id: &RequestId,
        bytes: &[u8],
    ) -> Option<Result<ServerResult, ServiceError>> {
        // Text that is not valid Unicode, made readable (serde refuses
        // the whole message else).
        let repaired = super::unicode_repair::repaired(bytes);
        let bytes = repaired.as_ref().map_or(bytes, |text| text.as_bytes());
        if let Some(answer) = answer_to(id, bytes) {
            // What the upstream's `GET` stream brings from now on is not
            // this call's (`Relay::answer_read`).
            self.relay.answer_read(id);
            return Some(answer);
        }
        // Anything else is read as rmcp reads it, and skipped as rmcp
        // skips what it cannot read: one odd event is not the call's end.
        let message = match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
            Ok(message) => message,
            Err(error) => {
                tracing::debug!(%error, "skipped an event on an answer stream: not a JSON-RPC message");
                return None;
            }
        };
        if let JsonRpcMessage::Error(error) = &message {
            if says_session_is_gone(error) {
                tracing::warn!(error = %error.error.message, "the upstream no longer knows this session");
                return Some(Err(transport(SessionForgotten::after_taking())));
            }
        }
        self.pass_on(message, id).await;
        None
    }

    /// Hands a message to rmcp's loop, as arriving on `id`'s stream.
    async fn pass_on(&self, mut message: ServerJsonRpcMessage, id: &RequestId) {
        let origin = InboundStreamOrigin::OutboundRequest(id.clone());
        let mut counted = None;
        match &mut message {
            JsonRpcMessage::Request(request) => {
                request.request.extensions_mut().insert(origin);
            }
            JsonRpcMessage::Notification(notification) => {
                let cancels = self
                    .session
                    .load()
                    .as_ref()
                    .is_none_or(|session| session.cancels_reach_the_handler);
                counted = waits_for_relay(&notification.notification, cancels);
                notification.notification.extensions_mut().insert(origin);
            }
            _ => {}
        }
        // Room first, counted after: this future may be dropped while it
        // waits (the call cancelled or timed out), and a notification
        // counted but never handed over would hold every later answer on
        // this session for the whole drain limit.
        let Ok(room) = self.inject.reserve().await else {
            // The session's loop has stopped: nothing will relay it.
            return;
        };
        let arrival = counted.map(|in_order| self.relay.notification_arrived(in_order));
        if let (Some(arrival), JsonRpcMessage::Notification(notification)) = (arrival, &mut message)
        {
            notification.notification.extensions_mut().insert(arrival);
        }
        room.send(message);
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        // An error whose id is null or left out: a server that could not
        // read the request's id (JSON-RPC: `null`; 2026-07-28: left out),
        // or did not take it. Only one request is on a call's POST and its
        // stream, so it is that one's; matched by id it would be no one's,
        // and the call would wait out its timeout. Unless it says the
        // session is gone, which `handle` makes the session's end.
        Ok(Incoming {
            method: None,
            id: None,
            error: Some(error),
            ..
        }) if !super::ordered::talks_of_the_session(&error) => {
            Some(Err(ServiceError::McpError(error)))
        }
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

/// Why a JSON `body` that `status` came with answers no request: it says
/// which of its faults it is, rather than calling every one of them
/// another request's answer.
fn not_the_answer(status: StatusCode, body: &[u8]) -> String {
    if body.is_empty() {
        return format!("HTTP {status}: an empty answer, where JSON was said to come");
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Ok(_) => format!("HTTP {status}: a JSON answer that is not the request's"),
        Err(error) => format!("HTTP {status}: an answer that is not JSON ({error})"),
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

/// An answer's head and body, whichever client read it.
struct Reply {
    status: StatusCode,
    /// Lowercase, empty if none.
    content_type: String,
    body: BoxStream<'static, Result<Bytes, BodyError>>,
}

/// Why an answer's body stopped early.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error(transparent)]
    Reqwest(#[from] reqwest::Error),
    #[error(transparent)]
    SameTask(#[from] SameTaskError),
}

fn unexpected(message: String) -> HttpError {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(message))
}

fn client_error(error: reqwest::Error) -> ServiceError {
    transport(StreamableHttpError::Client(error))
}

/// Whether `body`, a 400 answer to a request sent on a session, says the
/// server does not know the session: what the MCP SDKs' servers before
/// 2025-06-18's 404 answer (Python: "Bad Request: No valid session ID
/// provided", with id `server-error`; TypeScript's examples: "Invalid or
/// missing session ID", with id `null`), and a restarted server behind a
/// load balancer then says to every session. The request was not run.
/// Narrow on purpose: a proxy's page that only mentions a session (a
/// cookie) is not this, nor is an answer to the request itself.
pub(super) fn refuses_unknown_session(body: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(message) => {
            let id = match message.get("id") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(id)) => Some(id.as_str()),
                Some(_) => return false,
            };
            message["error"]["message"]
                .as_str()
                .is_some_and(|said| error_refuses_session(id, said))
        }
        Err(_) => {
            let said = String::from_utf8_lossy(&body[..body.len().min(1024)]);
            says_session_unknown(&said)
        }
    }
}

/// Whether a JSON-RPC error with `id` (a string id, or none) saying `said`
/// is a server's refusal of an unknown session rather than an answer: it
/// answers no request of the gateway's (no id, or the Python SDK's
/// `server-error`) and says so.
pub(super) fn error_refuses_session(id: Option<&str>, said: &str) -> bool {
    matches!(id, None | Some("server-error")) && says_session_unknown(said)
}

fn says_session_unknown(said: &str) -> bool {
    let said = said.to_ascii_lowercase();
    said.contains("session")
        && [
            "no valid",
            "invalid",
            "missing",
            "unknown",
            "not found",
            "expired",
        ]
        .iter()
        .any(|why| said.contains(why))
}

/// As rmcp reports a failed send, so `http_client::means_session_gone`
/// reads both clients' failures alike.
/// The upstream no longer knows the session (it restarted, or expired
/// the session). `unrun`: it said so in answer to the request's own POST,
/// so the request was not run; otherwise (a resume of the answer's stream
/// refused, the answer stream saying so) it may have been.
#[derive(Debug, thiserror::Error)]
#[error("the upstream no longer knows the session{}", if *.unrun { "" } else { " (after it had taken the request)" })]
pub struct SessionForgotten {
    pub unrun: bool,
    /// The request refused unrun, for a new session to send.
    pub unsent: std::sync::Mutex<Option<Box<ClientRequest>>>,
}

impl SessionForgotten {
    /// Said once the upstream had taken the request.
    fn after_taking() -> Self {
        Self {
            unrun: false,
            unsent: Default::default(),
        }
    }
}

fn transport(error: impl std::error::Error + Send + Sync + 'static) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "junction-direct-call",
        std::any::TypeId::of::<DirectCalls>(),
        Box::new(error),
    ))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequest, CallToolRequestParams};
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use super::*;

    /// An upstream whose answer stream breaks after its first event, and
    /// which answers the resuming `GET` with the answer; returns its URL
    /// and the text of every request it read.
    async fn breaking_upstream(
        closes: usize,
    ) -> (reqwest::Url, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let requests = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let requests = requests.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 8192];
                    let read = stream.read(&mut buffer).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                    let event = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
                    let earlier = requests.lock().unwrap().len();
                    let reply = if request.starts_with("POST") {
                        // The priming event, then the connection drops.
                        format!("{head}{}", event("id: e1\nretry: 10\ndata: \n\n"))
                    } else if earlier < closes {
                        // One step further, then closed again.
                        let id = earlier + 1;
                        format!("{head}{}", event(&format!("id: e{id}\ndata: \n\n")))
                    } else {
                        let answer = r#"{"jsonrpc":"2.0","id":"junction-1","result":{"content":[{"type":"text","text":"resumed"}]}}"#;
                        format!(
                            "{head}{}0\r\n\r\n",
                            event(&format!("id: e{}\ndata: {answer}\n\n", earlier + 1))
                        )
                    };
                    requests.lock().unwrap().push(request);
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        (url.parse().unwrap(), seen)
    }

    /// A call on a session of the upstream at `url`, through the caller's
    /// own connections (`same_task`) or reqwest's.
    async fn call_through(url: reqwest::Url, same_task: bool) -> CallToolResult {
        let (inject, _injected) = mpsc::channel(INJECT_CAPACITY);
        let calls = DirectCalls::new(
            reqwest::Client::new(),
            inject,
            Arc::new(Relay::default()),
            StreamableHttpResponseLimits::default(),
            Duration::from_secs(5),
        );
        calls.session_ready(SessionPost {
            url,
            session_id: Some("session-1".into()),
            auth_header: Some("token-1".into()),
            headers: HashMap::from([(
                HeaderName::from_static("x-configured"),
                HeaderValue::from_static("yes"),
            )]),
        });
        if !same_task {
            let ready = calls.session.load_full().unwrap();
            assert!(ready.same_task.is_some(), "an http upstream");
            let post = SessionPost {
                url: ready.post.url.clone(),
                session_id: ready.post.session_id.clone(),
                auth_header: ready.post.auth_header.clone(),
                headers: ready.post.headers.clone(),
            };
            let mut reqwest_only = ReadySession::new(post, Duration::from_secs(5)).unwrap();
            reqwest_only.same_task = None;
            calls.session.store(Some(Arc::new(reqwest_only)));
        }
        let mut request =
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t")));
        let prepared = calls
            .prepare(&mut request)
            .expect("a call on a ready session");
        match calls.call(prepared, request).await {
            Ok(ServerResult::CallToolResult(result)) => result,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_broken_answer_stream_is_resumed_after_its_last_event() {
        for same_task in [true, false] {
            let (url, seen) = breaking_upstream(1).await;
            let result = call_through(url, same_task).await;
            let text = result.content[0].as_text().expect("a text answer");
            assert_eq!(text.text, "resumed");
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 2, "{seen:?}");
            let resume = seen[1].to_ascii_lowercase();
            assert!(resume.starts_with("get /mcp "), "{resume}");
            for header in [
                "last-event-id: e1",
                "mcp-session-id: session-1",
                "accept: text/event-stream",
            ] {
                assert!(
                    resume.contains(header),
                    "{header} missing (same task: {same_task}): {resume}"
                );
            }
            let post = seen[0].to_ascii_lowercase();
            assert!(post.contains("mcp-session-id: session-1"), "{post}");
            for request in [&post, &resume] {
                for header in ["authorization: bearer token-1", "x-configured: yes"] {
                    assert!(
                        request.contains(header),
                        "{header} missing (same task: {same_task}): {request}"
                    );
                }
            }
            assert!(post.contains("\"id\":\"junction-1\""), "{post}");
        }
    }

    /// A server that closes a long call's stream at every step (SEP-1699
    /// polling) has it resumed every time, more often than `MAX_RESUMES`:
    /// only resumes that bring nothing new count against it.
    #[tokio::test]
    async fn a_stream_closed_at_every_step_is_resumed_every_time() {
        let closes = MAX_RESUMES + 3;
        let (url, seen) = breaking_upstream(closes).await;
        let result = call_through(url, true).await;
        assert_eq!(result.content[0].as_text().expect("text").text, "resumed");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), closes + 1, "{seen:?}");
        let last = seen[closes].to_ascii_lowercase();
        assert!(
            last.contains(&format!("last-event-id: e{closes}")),
            "{last}"
        );
    }

    /// An upstream that answers a POST with `events` (SSE text) and then
    /// the call's answer.
    async fn answering_after(events: &'static str) -> reqwest::Url {
        let answer = r#"{"jsonrpc":"2.0","id":"junction-1","result":{"content":[{"type":"text","text":"answered"}]}}"#;
        crate::upstream::tests::sse_once(format!("{events}data: {answer}\n\n"))
            .await
            .parse()
            .unwrap()
    }

    /// Events that carry no JSON-RPC message (another event type, data
    /// that is not JSON-RPC) are skipped, as rmcp's reader skips them: the
    /// call still gets its answer.
    #[tokio::test]
    async fn events_that_are_no_message_are_skipped() {
        let url = answering_after(
            "event: ping\ndata: {}\n\n: a comment\n\ndata: not json\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n",
        )
        .await;
        let result = call_through(url, true).await;
        assert_eq!(result.content[0].as_text().expect("text").text, "answered");
    }

    /// An `event:` field left empty names the default type, `message`
    /// (WHATWG SSE): the answer it carries is the answer.
    #[tokio::test]
    async fn an_empty_event_type_is_a_message() {
        let url = answering_after("event:\n").await;
        let result = call_through(url, true).await;
        assert_eq!(result.content[0].as_text().expect("text").text, "answered");
    }

    /// An upstream that answers a POST with `progress` progress
    /// notifications and then nothing, holding the stream open.
    async fn progress_then_silence(progress: usize) -> reqwest::Url {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut buffer = vec![0; 8192];
            let _ = stream.read(&mut buffer).await;
            let mut reply = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_owned();
            for step in 1..=progress {
                let event = format!(
                    r#"data: {{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"junction-1","progress":{step}}}}}"#
                ) + "\n\n";
                reply.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
            }
            let _ = stream.write_all(reply.as_bytes()).await;
            // Bounded: the test is over long before.
            tokio::time::sleep(Duration::from_secs(10)).await;
        });
        url.parse().unwrap()
    }

    /// A call dropped while its notifications wait for room in rmcp's
    /// queue leaves nothing counted that will never be relayed: the
    /// session's next answer does not wait for it.
    #[tokio::test]
    async fn a_call_dropped_while_handing_over_a_notification_leaves_none_pending() {
        let url = progress_then_silence(3).await;
        // Room for one: the second notification waits, as it would behind
        // a busy session loop.
        let (inject, mut injected) = mpsc::channel(1);
        let relay = Arc::new(Relay::default());
        let calls = DirectCalls::new(
            reqwest::Client::new(),
            inject,
            relay.clone(),
            StreamableHttpResponseLimits::default(),
            Duration::from_secs(5),
        );
        calls.session_ready(SessionPost {
            url,
            session_id: Some("session-1".into()),
            auth_header: None,
            headers: HashMap::new(),
        });
        let mut request =
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t")));
        let prepared = calls.prepare(&mut request).expect("a ready session");
        let call = calls.call(prepared, request);
        // The call is given up (a client's cancel, a timeout) while it waits.
        let gave_up = tokio::time::timeout(Duration::from_millis(300), call).await;
        assert!(gave_up.is_err(), "the upstream never answers");
        // rmcp relays the one it was handed.
        let Some(JsonRpcMessage::Notification(first)) = injected.recv().await else {
            panic!("the first notification was handed over");
        };
        let arrival = first
            .notification
            .extensions()
            .get::<super::super::relay::Arrival>()
            .copied();
        assert!(arrival.is_some(), "a counted notification");
        relay.notification_relayed(arrival);
        // On tokio's paused clock: nothing pending answers at once; one
        // left pending would hold the drain for its whole limit.
        tokio::time::pause();
        assert!(
            tokio::time::timeout(super::super::relay::DRAIN_LIMIT / 2, relay.drain())
                .await
                .is_ok(),
            "a notification never handed over is still waited for"
        );
    }

    #[test]
    fn an_error_without_an_id_answers_the_call() {
        let id = RequestId::Number(4);
        for body in [
            &br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad"}}"#[..],
            br#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"bad"}}"#,
        ] {
            let answer = answer_to(&id, body).expect("the call's answer");
            assert!(
                matches!(answer, Err(ServiceError::McpError(ref error)) if error.message == "bad"),
                "{answer:?}"
            );
        }
        // Another request's error, a request, a notification, and an
        // error saying the session is gone (`handle` ends the session):
        // not it.
        for body in [
            &br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Session not found"}}"#[..],
            br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32600,"message":"bad"}}"#,
            br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
        ] {
            assert!(answer_to(&id, body).is_none());
        }
    }

    #[test]
    fn a_json_body_that_answers_nothing_says_what_it_is() {
        let status = StatusCode::OK;
        assert!(not_the_answer(status, b"").contains("an empty answer"));
        assert!(not_the_answer(status, b"<html>").contains("an answer that is not JSON ("));
        assert!(
            not_the_answer(status, br#"{"jsonrpc":"2.0","id":9,"result":{}}"#)
                .contains("not the request's")
        );
    }

    #[test]
    fn a_400_about_the_session_is_told_from_an_answer() {
        // Python SDK before 404, TypeScript SDK examples, plain text.
        assert!(refuses_unknown_session(
            br#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: No valid session ID provided"}}"#
        ));
        assert!(refuses_unknown_session(
            br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#
        ));
        assert!(refuses_unknown_session(b"Invalid or missing session ID"));
        // The request's own answer, a 400 about something else, a proxy's
        // page that mentions a session.
        assert!(!refuses_unknown_session(
            br#"{"jsonrpc":"2.0","id":"junction-1","error":{"code":-32602,"message":"invalid session name"}}"#
        ));
        assert!(!refuses_unknown_session(b"Bad Request: malformed JSON"));
        assert!(!refuses_unknown_session(
            b"<html><body>Your session cookie was sent</body></html>"
        ));
    }

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
