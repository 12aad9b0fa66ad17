//! The older HTTP+SSE transport (2024-11-05), for clients that speak only
//! it: `GET {sse_path}` opens an event stream whose first event, `endpoint`,
//! names where to post (`{sse_path}?sessionId=…`; `GET {sse_path}/NAME`
//! opens one on `[endpoints.NAME]`); every answer and every
//! message from the server comes on that stream.
//!
//! A bridge onto the gateway's own Streamable HTTP endpoint, in process:
//! each post goes to it as a POST with the client's own headers (so the
//! Host and Origin checks, the limits and `forward_headers` apply as for
//! any client), and what it answers, JSON or an event stream, is put on the
//! client's stream in order. Once the session is initialized its `GET`
//! stream (the server's own messages: list changes, sampling, elicitation)
//! is put there too. A post the endpoint refuses outright (413, 400, 404)
//! gets that answer itself, as the older SDKs answer a bad post. The
//! client's stream ending ends the session (a `DELETE`), and the session
//! ending (its `GET` stream closed: idle, deleted, shut down) ends the
//! client's stream, so that the client reconnects.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError},
    time::Duration,
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{header, HeaderMap, HeaderValue, Method, StatusCode},
    response::{
        sse::{Event, KeepAlive, Sse},
        IntoResponse, Response,
    },
    Router,
};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Messages waiting for a client that reads its stream slowly; beyond,
/// the pumps wait for it (the endpoint's own streams hold the rest).
const OUTBOX: usize = 64;
/// The most of a refusal's body read to see whether it answers a request.
const REFUSAL_LIMIT: usize = 1024 * 1024;
const INVALID_REQUEST: i64 = -32600;
/// How long the `DELETE` of a session whose client went away may take.
const DELETE_LIMIT: Duration = Duration::from_secs(10);

/// The endpoint's state: the Streamable HTTP endpoint it bridges onto and
/// the sessions open on it.
#[derive(Clone)]
pub struct SseEndpoint(Arc<Shared>);

struct Shared {
    /// The MCP endpoint with all its layers.
    mcp: Router,
    mcp_path: String,
    /// The gateway's, for `max_sessions` (live).
    gateway: Arc<crate::gateway::Gateway>,
    sessions: Mutex<HashMap<String, Arc<LegacySession>>>,
    shutdown: CancellationToken,
}

/// One client's event stream and the Streamable HTTP session behind it.
struct LegacySession {
    outbox: mpsc::Sender<String>,
    /// Answers being put on the stream, each holding a permit until it
    /// is: `max_concurrent_requests` (as at the `GET`) for those of calls
    /// in flight, and [`OUTBOX`] more. Past that an answer waits in its
    /// post's handler, the post unanswered, so a client that posts and
    /// never reads holds a connection for each answer it has not read,
    /// rather than the gateway holding them all.
    unread: Arc<tokio::sync::Semaphore>,
    /// The stream's place under `max_sessions`, until its `initialize`
    /// takes it for the session it creates.
    place: super::admission::HeldPlace,
    /// Held while a message posted before the session exists is passed
    /// on: two `initialize`s at once would make two sessions.
    opening: Arc<tokio::sync::Mutex<()>>,
    /// The endpoint's `Mcp-Session-Id`, once `initialize` was answered.
    mcp_session: OnceLock<HeaderValue>,
    /// The version `initialize` agreed, sent with every later request.
    protocol_version: OnceLock<HeaderValue>,
    /// The `Host` the client's stream came with, for the requests the
    /// bridge makes on its own (the `GET` stream, the `DELETE`).
    host: Option<HeaderValue>,
    /// Where its messages go: the MCP endpoint's path, or that of the
    /// `[endpoints]` one its stream was opened for.
    mcp_path: String,
    /// Cancelled when either side ends the session (the client's stream
    /// dropped, the endpoint's session gone, never initialized); a watcher
    /// then closes it (`SseEndpoint::close`).
    ended: CancellationToken,
}

impl SseEndpoint {
    pub fn new(
        gateway: Arc<crate::gateway::Gateway>,
        mcp: Router,
        shutdown: CancellationToken,
    ) -> Self {
        let mcp_path = gateway.config().server.path.clone();
        SseEndpoint(Arc::new(Shared {
            mcp,
            mcp_path,
            gateway,
            sessions: Mutex::default(),
            shutdown,
        }))
    }

    /// `GET` opens a session's stream; `POST` carries one of its messages.
    pub async fn handle(State(endpoint): State<SseEndpoint>, request: Request) -> Response {
        endpoint.serve(None, request).await
    }

    /// [`Self::handle`] on `{sse_path}/NAME`: the streams opened there
    /// serve `[endpoints.NAME]`. NAME is the path's segment as it is (not
    /// percent-decoded), as on the main transport.
    pub async fn handle_endpoint(
        State(endpoint): State<SseEndpoint>,
        request: Request,
    ) -> Response {
        let name = super::endpoint_segment(request.uri().path()).to_owned();
        let served = endpoint
            .0
            .gateway
            .config()
            .endpoint(&name)
            .map(|e| e.name.clone());
        match served {
            Some(served) => endpoint.serve(Some(served), request).await,
            None => {
                // A stream opened there before a reload removed the
                // endpoint ends with its post's 404 (the bridge's rule).
                if request.method() == Method::POST {
                    endpoint.end_stream_of(&request, &name);
                }
                super::no_such_endpoint(&name)
            }
        }
    }

    /// Ends the stream `request` (a post) names by its `sessionId`, if it
    /// was opened on endpoint `name`.
    fn end_stream_of(&self, request: &Request, name: &str) {
        let id = request.uri().query().and_then(session_id_of);
        let session = id.and_then(|id| lock(&self.0.sessions).get(&id).cloned());
        let opened_there = crate::config::endpoint_path(&self.0.mcp_path, name);
        if let Some(session) = session.filter(|session| session.mcp_path == opened_there) {
            session.ended.cancel();
        }
    }

    async fn serve(&self, served: Option<Arc<str>>, request: Request) -> Response {
        match *request.method() {
            Method::GET => self.open(&request, served),
            Method::POST => self.post(request).await,
            _ => (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "GET, POST")],
                "Method Not Allowed: GET opens the event stream, POST sends a message",
            )
                .into_response(),
        }
    }

    fn open(&self, request: &Request, served: Option<Arc<str>>) -> Response {
        use crate::telemetry::metrics::Refusal;
        let gateway = &self.0.gateway;
        if gateway.is_draining() {
            crate::telemetry::metrics().count_refused(Refusal::Draining);
            return unavailable("the gateway is shutting down; reconnect to another instance");
        }
        let limit = gateway.config().limits.max_sessions;
        let Some(ticket) = gateway.sessions().reserve(limit) else {
            crate::telemetry::metrics().count_refused(Refusal::SessionLimit);
            return unavailable("session limit reached (max_sessions); try again later");
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (outbox, messages) = mpsc::channel(OUTBOX);
        // The `Host` the outer check passed: the header, or the authority
        // of an absolute request URI.
        let host = request.headers().get(header::HOST).cloned().or_else(|| {
            let authority = request.uri().authority()?;
            HeaderValue::from_str(authority.as_str()).ok()
        });
        let session = Arc::new(LegacySession {
            outbox,
            unread: Arc::new(tokio::sync::Semaphore::new(
                gateway.config().limits.max_concurrent_requests + OUTBOX,
            )),
            place: super::admission::HeldPlace::new(ticket),
            opening: Default::default(),
            mcp_session: OnceLock::new(),
            protocol_version: OnceLock::new(),
            host,
            mcp_path: match &served {
                None => self.0.mcp_path.clone(),
                Some(name) => crate::config::endpoint_path(&self.0.mcp_path, name),
            },
            ended: CancellationToken::new(),
        });
        lock(&self.0.sessions).insert(id.clone(), session.clone());
        crate::telemetry::metrics().downstream_sse_streams.inc();
        // A stream holds a place under `max_sessions` before it has a
        // session: one never initialized gives it back, as a slow request
        // gives back its connection.
        let initialize_within = self.0.gateway.config().server.request_read_timeout;
        let (watcher, watched, watched_id) = (self.clone(), session.clone(), id.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(initialize_within) => {
                    if watched.mcp_session.get().is_none() {
                        watched.ended.cancel();
                    }
                }
                _ = watched.ended.cancelled() => {}
            }
            watched.ended.cancelled().await;
            watcher.close(&watched_id, &watched);
        });
        // Posts go where the stream was opened (either path finds it).
        let endpoint = format!("{}?sessionId={id}", request.uri().path());
        let closer = session.ended.clone().drop_guard();
        let ended = session.ended.clone();
        let shutdown = self.0.shutdown.clone();
        let stream = futures::stream::once(async move {
            Ok::<_, Infallible>(Event::default().event("endpoint").data(endpoint))
        })
        .chain(
            messages_until_end(messages, ended, shutdown)
                .map(|message| Ok(Event::default().event("message").data(message))),
        )
        .map(move |event| {
            // Held by the stream: its end (the client gone) closes the session.
            let _ = &closer;
            event
        });
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response()
    }

    async fn post(&self, request: Request) -> Response {
        let Some(id) = request.uri().query().and_then(session_id_of) else {
            return unread_body_refusal(
                StatusCode::BAD_REQUEST,
                "Bad Request: the endpoint's sessionId is missing",
            );
        };
        let session = lock(&self.0.sessions).get(&id).cloned();
        let Some(session) = session else {
            return unread_body_refusal(StatusCode::NOT_FOUND, "Not Found: unknown sessionId");
        };
        let (mut parts, body) = request.into_parts();
        parts.uri = session.mcp_path.parse().expect("a validated path");
        // The session is the bridge's to name, never the client's.
        for name in ["mcp-session-id", "mcp-protocol-version", "last-event-id"] {
            parts.headers.remove(name);
        }
        parts.headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        // One message at a time until the session exists.
        let opening = match session.mcp_session.get() {
            Some(_) => None,
            None => Some(session.opening.clone().lock_owned().await),
        };
        let initializing = session.mcp_session.get().is_none();
        // Before `initialize` the message is read here, bounded as the
        // endpoint bounds a new session's: what the endpoint cannot answer
        // without a session (a ping, which may come first) is still
        // answered on the stream.
        let (body, asked) = if initializing {
            let bytes = match self.read_before_session(body).await {
                Ok(bytes) => bytes,
                Err(refused) => return refused,
            };
            let asked = request_of(&bytes);
            if let Some((id, "ping")) = asked.as_ref().map(|(id, method)| (id, method.as_str())) {
                session
                    .put_value(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}))
                    .await;
                return accepted();
            }
            // The stream's place goes to the session it creates.
            parts.extensions.insert(session.place.clone());
            (Body::from(bytes), asked.map(|(id, _)| id))
        } else {
            (body, None)
        };
        session.name_session(&mut parts.headers);
        let request = Request::from_parts(parts, body);
        if !initializing {
            drop(opening);
            let answer = self.call(request).await;
            return self.answered(session, answer, None, false, false).await;
        }
        // In a task of its own, which the client's going away does not
        // drop (see `initialize`).
        let endpoint = self.clone();
        let initialized =
            tokio::spawn(
                async move { endpoint.initialize(session, request, asked, opening).await },
            );
        initialized
            .await
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }

    /// What the endpoint answered a post (`asked`: the request of a post
    /// made before the session existed), put where its client reads it:
    /// a refusal as the post's answer (or on the stream, if it answers a
    /// request), an answer on the stream, and once the session is
    /// `opened`, the session's own messages after it.
    async fn answered(
        &self,
        session: Arc<LegacySession>,
        answer: Response,
        asked: Option<serde_json::Value>,
        initializing: bool,
        opened: bool,
    ) -> Response {
        let status = answer.status();
        if !status.is_success() {
            if status == StatusCode::NOT_FOUND && !initializing {
                // The endpoint's session is gone: so is this one.
                session.ended.cancel();
                return (StatusCode::NOT_FOUND, "Not Found: the session has ended").into_response();
            }
            return session.refused(answer, asked).await;
        }
        if status == StatusCode::ACCEPTED {
            // A notification or an answer to the server: nothing comes back.
            return accepted();
        }
        // The answer waits here, its post held, while the client has too
        // many unread: the client's own connections bound what waits.
        let permit = tokio::select! {
            permit = session.unread.clone().acquire_owned() => permit.ok(),
            _ = session.ended.cancelled() => None,
        };
        let Some(permit) = permit else {
            return (StatusCode::NOT_FOUND, "Not Found: the session has ended").into_response();
        };
        let endpoint = self.clone();
        tokio::spawn(async move {
            session.deliver(answer).await;
            drop(permit);
            if opened {
                endpoint.relay_session_stream(&session).await;
            }
        });
        accepted()
    }

    /// Passes `initialize` on, adopts the endpoint's session it makes
    /// (once its answer, and with it the agreed version, is delivered, the
    /// session's own messages follow on the client's stream), or keeps
    /// the stream's place under `max_sessions` if it made none, then lets
    /// the stream's next message go (`opening`) and answers. Run as a task
    /// of its own, to its end: dropped with the post of a client that gave
    /// up waiting, a session made meanwhile was kept by the endpoint with
    /// nobody knowing its id (no `DELETE` when the stream ended), until
    /// its idle timeout; and one adopted never had its answer or its own
    /// messages put on the stream.
    async fn initialize(
        self,
        session: Arc<LegacySession>,
        request: Request,
        asked: Option<serde_json::Value>,
        opening: Option<tokio::sync::OwnedMutexGuard<()>>,
    ) -> Response {
        let answer = self.call(request).await;
        let created = answer
            .headers()
            .get("mcp-session-id")
            .filter(|_| answer.status().is_success())
            .cloned();
        let opened = match created {
            Some(created) if session.mcp_session.set(created.clone()).is_err() => {
                // Not this stream's (cannot happen while `opening` is held).
                self.delete_session(created, session.host.clone());
                false
            }
            Some(created) if session.ended.is_cancelled() => {
                // The stream ended while the session was made: its close
                // saw none to delete.
                self.delete_session(created, session.host.clone());
                false
            }
            Some(_) => true,
            None => false,
        };
        if !opened {
            // Before the next message may take the place (review).
            self.keep_place(&session);
        }
        drop(opening);
        self.answered(session, answer, asked, true, opened).await
    }

    /// After an `initialize` that made no session: the stream keeps a
    /// place under `max_sessions` (the endpoint may have taken the one it
    /// held and dropped it with the refusal), or ends if none is left.
    fn keep_place(&self, session: &LegacySession) {
        if session.place.is_held() {
            return;
        }
        let limit = self.0.gateway.config().limits.max_sessions;
        match self.0.gateway.sessions().reserve(limit) {
            Some(ticket) => session.place.hold(ticket),
            None => session.ended.cancel(),
        }
    }

    /// A message posted before the session exists, read whole within the
    /// endpoint's bounds for one (its size, `request_read_timeout`).
    async fn read_before_session(&self, body: Body) -> Result<bytes::Bytes, Response> {
        let limit = super::json_guard::SESSIONLESS_BODY_LIMIT;
        let within = self.0.gateway.config().server.request_read_timeout;
        match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
            Ok(Ok(bytes)) => Ok(bytes),
            // Either leaves the body unread: the connection ends.
            Ok(Err(_)) => Err(super::json_guard::closing_after(jsonrpc_refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body exceeds {limit} bytes (a message before initialize)"),
            ))),
            Err(_) => Err(super::json_guard::closing_after(jsonrpc_refusal(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time".to_owned(),
            ))),
        }
    }

    /// Puts the session's `GET` stream (what the server sends outside any
    /// request) on the client's stream; its end ends the client's stream,
    /// for the client to start over.
    async fn relay_session_stream(&self, session: &LegacySession) {
        let mut request = Request::new(Body::empty());
        *request.method_mut() = Method::GET;
        *request.uri_mut() = session.mcp_path.parse().expect("a validated path");
        let headers = request.headers_mut();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        session.name_session(headers);
        let answer = self.call(request).await;
        if answer.status().is_success() {
            session.deliver(answer).await;
        } else {
            tracing::debug!(status = %answer.status(), "an older-transport session's message stream was refused");
        }
        session.ended.cancel();
    }

    async fn call(&self, request: Request) -> Response {
        match self.0.mcp.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Either side ended the session: the client's stream ends, and the
    /// endpoint's session is deleted.
    fn close(&self, id: &str, session: &LegacySession) {
        if lock(&self.0.sessions).remove(id).is_some() {
            crate::telemetry::metrics().downstream_sse_streams.dec();
        }
        if let Some(mcp_session) = session.mcp_session.get().cloned() {
            self.delete_session(mcp_session, session.host.clone());
        }
    }

    /// Deletes the endpoint's session `mcp_session`, in the background.
    fn delete_session(&self, mcp_session: HeaderValue, host: Option<HeaderValue>) {
        let endpoint = self.clone();
        tokio::spawn(async move {
            let mut request = Request::new(Body::empty());
            *request.method_mut() = Method::DELETE;
            *request.uri_mut() = endpoint.0.mcp_path.parse().expect("a validated path");
            let headers = request.headers_mut();
            headers.insert("mcp-session-id", mcp_session);
            if let Some(host) = host {
                headers.insert(header::HOST, host);
            }
            let _ = tokio::time::timeout(DELETE_LIMIT, endpoint.call(request)).await;
        });
    }
}

impl LegacySession {
    /// Names the endpoint's session (once there is one) on a request the
    /// bridge passes on or makes.
    fn name_session(&self, headers: &mut HeaderMap) {
        if let Some(mcp_session) = self.mcp_session.get() {
            headers.insert("mcp-session-id", mcp_session.clone());
        }
        if let Some(version) = self.protocol_version.get() {
            headers.insert("mcp-protocol-version", version.clone());
        }
        if !headers.contains_key(header::HOST) {
            if let Some(host) = &self.host {
                headers.insert(header::HOST, host.clone());
            }
        }
    }

    /// Puts what the endpoint answered (one JSON message, or an event
    /// stream of them) on the client's stream, in order, until the client
    /// goes.
    async fn deliver(&self, answer: Response) {
        let is_stream = answer
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        let body = answer.into_body();
        if !is_stream {
            let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
                return;
            };
            if !bytes.is_empty() {
                self.put(&bytes).await;
            }
            return;
        }
        let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
            body.into_data_stream(),
        ));
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = self.ended.cancelled() => return,
            };
            match event {
                Some(Ok(event)) => {
                    // Priming events carry no message.
                    if let Some(data) = event.data.filter(|data| !data.is_empty()) {
                        if !self.put(data.as_bytes()).await {
                            return;
                        }
                    }
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "an answer stream broke on its way to an older-transport client");
                    return;
                }
                None => return,
            }
        }
    }

    /// Puts one message on the client's stream, on one line (an event's
    /// data may not hold a line break); `false` once the client is gone.
    async fn put(&self, message: &[u8]) -> bool {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(message) else {
            tracing::debug!(
                "the endpoint answered an older-transport client with something not JSON"
            );
            return true;
        };
        self.put_value(value).await
    }

    /// What the endpoint refused: an error that answers a request goes on
    /// the stream, as the older transport's answers do (the post gets
    /// 202), and so does one for `asked` (a request sent before the
    /// session, whose id only the bridge knows); any other refusal is the
    /// post's own answer.
    async fn refused(&self, answer: Response, asked: Option<serde_json::Value>) -> Response {
        let (parts, body) = answer.into_parts();
        let bytes = axum::body::to_bytes(body, REFUSAL_LIMIT)
            .await
            .unwrap_or_default();
        let answered = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .filter(|message| {
                message.get("id").is_some_and(|id| !id.is_null())
                    && (message.get("error").is_some() || message.get("result").is_some())
            });
        if let Some(message) = answered {
            self.put_value(message).await;
            return accepted();
        }
        if let Some(id) = asked {
            // The endpoint's own error (a refused new session: -32000 and
            // why) under the request's id; a plain-text refusal, worded.
            let error = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|message| message.get("error").cloned())
                .unwrap_or_else(|| {
                    let reason = String::from_utf8_lossy(&bytes).trim().to_owned();
                    serde_json::json!({
                        "code": INVALID_REQUEST,
                        "message": format!("not before initialize: {reason}"),
                    })
                });
            self.put_value(serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}))
                .await;
            return accepted();
        }
        // The post's own answer: its status, type and text, not the
        // endpoint's CORS answers (browsers use the endpoint itself) or a
        // length the body no longer has.
        let mut refusal = Response::new(Body::from(bytes));
        *refusal.status_mut() = parts.status;
        for name in [header::CONTENT_TYPE, header::RETRY_AFTER] {
            if let Some(value) = parts.headers.get(&name) {
                refusal.headers_mut().insert(name, value.clone());
            }
        }
        refusal
    }

    /// [`LegacySession::put`] for a message already parsed.
    async fn put_value(&self, value: serde_json::Value) -> bool {
        if let Some(version) = value
            .pointer("/result/protocolVersion")
            .and_then(|version| version.as_str())
            .filter(|_| value.pointer("/result/serverInfo").is_some())
            .and_then(|version| HeaderValue::from_str(version).ok())
        {
            let _ = self.protocol_version.set(version);
        }
        tokio::select! {
            sent = self.outbox.send(value.to_string()) => sent.is_ok(),
            _ = self.ended.cancelled() => false,
        }
    }
}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, "Accepted").into_response()
}

/// 503 with `Retry-After`, as the MCP endpoint refuses new work.
fn unavailable(why: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        format!("Service Unavailable: {why}"),
    )
        .into_response()
}

/// A refusal of a post that names no request (id `null`), as the
/// endpoint words its own.
fn jsonrpc_refusal(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": INVALID_REQUEST, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The id and method of the request `message` is, if it is one.
fn request_of(message: &[u8]) -> Option<(serde_json::Value, String)> {
    let message: serde_json::Value = serde_json::from_slice(message).ok()?;
    let method = message.get("method")?.as_str()?.to_owned();
    let id = message.get("id").filter(|id| !id.is_null())?.clone();
    Some((id, method))
}

/// A refusal answered before the post's body was read: the connection
/// ends with it (an interop run met a client reusing it).
fn unread_body_refusal(status: StatusCode, text: &'static str) -> Response {
    super::json_guard::closing_after((status, text).into_response())
}

/// `sessionId`'s value in a query string.
fn session_id_of(query: &str) -> Option<String> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "sessionId")
        .map(|(_, value)| value.into_owned())
}

/// A stream's messages until its session ends or the gateway shuts down.
/// Either way what is queued already is still sent, then the stream ends:
/// among it may be answers written just before (the errors shutdown
/// answers the requests it gave up on with, which count as answered once
/// queued here), and a stream stopped at once dropped them. Nothing is
/// queued after: the queue is closed, and those who put into it stop.
fn messages_until_end(
    messages: mpsc::Receiver<String>,
    ended: CancellationToken,
    shutdown: CancellationToken,
) -> impl Stream<Item = String> {
    futures::stream::unfold(
        (messages, ended, shutdown),
        |(mut messages, ended, shutdown)| async move {
            let next = tokio::select! {
                biased;
                message = messages.recv() => message,
                () = async {
                    tokio::select! {
                        () = ended.cancelled() => {}
                        () = shutdown.cancelled() => {}
                    }
                } => {
                    // Queued messages come out, then `None`.
                    messages.close();
                    messages.recv().await
                }
            };
            next.map(|message| (message, (messages, ended, shutdown)))
        },
    )
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
