//! Admitting new sessions and requests at the HTTP edge: the session limit
//! and the refusal of new work while shutting down.
//!
//! A POST without `Mcp-Session-Id` that is an `initialize` creates a
//! session. Once its body has passed `json_guard` it takes a
//! [`SessionTicket`] under `[limits] max_sessions` ([`reserve_session`]);
//! any other POST without a session goes on to rmcp's 400. When none is
//! left the
//! client gets HTTP 503 with a JSON-RPC error and no session is created.
//! The ticket is handed to the session factory through a task-local (rmcp
//! calls the factory inside this request's future), so the count is exact
//! even when many clients initialize at once; the session keeps the ticket
//! until it ends. While the gateway drains for shutdown every POST that
//! would start work gets 503, so no new work starts; what a session's
//! client sends for work in flight (answers to the server's requests,
//! cancellations) still gets through, and streams and DELETEs go on.
//!
//! Every admitted POST counts as in flight until its response body has been
//! sent (or dropped): an answer is written to the POST's SSE stream after
//! the handler returns, so shutdown waits for the body, not the handler.

use std::{
    cell::RefCell,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{header, HeaderValue, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::{
    downstream::LIMIT_EXCEEDED,
    gateway::{Gateway, SessionTicket},
    header_names,
};

tokio::task_local! {
    /// The ticket reserved for the session this request may create.
    static RESERVED: RefCell<Option<SessionTicket>>;
}

/// The ticket the current request reserved, for the session factory.
pub fn take_reserved_ticket() -> Option<SessionTicket> {
    RESERVED
        .try_with(|reserved| reserved.borrow_mut().take())
        .ok()
        .flatten()
}

/// A place under `max_sessions` a request brings along, for the session it
/// creates: the HTTP+SSE endpoint's stream holds one from its `GET`, and
/// hands it to its `initialize` (`sse_endpoint.rs`), so that the stream
/// and the session it becomes count once.
#[derive(Clone, Default)]
pub struct HeldPlace(Arc<std::sync::Mutex<Option<SessionTicket>>>);

impl HeldPlace {
    pub fn new(ticket: SessionTicket) -> Self {
        HeldPlace(Arc::new(std::sync::Mutex::new(Some(ticket))))
    }

    fn take(&self) -> Option<SessionTicket> {
        self.held().take()
    }

    /// Whether it still holds its place (an `initialize` that took it and
    /// made no session dropped it).
    pub fn is_held(&self) -> bool {
        self.held().is_some()
    }

    pub fn hold(&self, ticket: SessionTicket) {
        *self.held() = Some(ticket);
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<SessionTicket>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Seconds a refused client is told to wait before trying again.
const RETRY_AFTER_SECONDS: &str = "5";

pub async fn admit(State(gateway): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // Counted from before a draining gateway reads the body: shutdown must
    // not close while an answer for work in flight is still arriving.
    let in_flight = gateway.requests_in_flight().token();
    let request = match refuse_new_work_while_draining(&gateway, request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let response = next.run(request).await;
    response.map(|body| {
        Body::new(HeldWhileSending {
            body,
            _held: in_flight,
        })
    })
}

/// `request` as it is, unless the gateway is draining and it would start
/// new work: then the 503 that says so.
async fn refuse_new_work_while_draining(
    gateway: &Gateway,
    request: Request,
) -> Result<Request, Response> {
    if !gateway.is_draining() {
        return Ok(request);
    }
    answers_to_work_in_flight(gateway, request)
        .await
        .ok_or_else(|| {
            crate::telemetry::metrics().count_refused(crate::telemetry::metrics::Refusal::Draining);
            // Its body may be unread, and the client is to go elsewhere.
            super::json_guard::closing_after(unavailable(
                "the gateway is shutting down; reconnect to another instance".to_owned(),
            ))
        })
}

/// Whether `request` names a session, read as rmcp reads it: an
/// `Mcp-Session-Id` that is not text names none, and rmcp makes a new
/// session for the request.
fn names_session(request: &Request) -> bool {
    request
        .headers()
        .get(&header_names::MCP_SESSION_ID)
        .is_some_and(|id| id.to_str().is_ok())
}

/// While draining (asked by `admit` before the body is read and by
/// `reserve_session` after): `request` if it only carries what work already in
/// flight may need from its session's client (answers to sampling,
/// elicitation or roots requests, cancellations, progress), which is let
/// through so that work can end within the grace period instead of
/// waiting it out; `None` for anything that would start new work. Only
/// read while draining, so the body costs nothing otherwise.
async fn answers_to_work_in_flight(gateway: &Gateway, request: Request) -> Option<Request> {
    if !names_session(&request) {
        return None;
    }
    let (parts, body) = request.into_parts();
    let limit = gateway.config().limits.max_body_size;
    let read_timeout = gateway.config().server.request_read_timeout;
    let bytes = tokio::time::timeout(read_timeout, axum::body::to_bytes(body, limit))
        .await
        .ok()?
        .ok()?;
    let starts_work = |message: &serde_json::Value| {
        message.get("method").is_some() && message.get("id").is_some()
    };
    let only_answers = match serde_json::from_slice::<serde_json::Value>(&bytes).ok()? {
        serde_json::Value::Array(batch) => !batch.iter().any(starts_work),
        message => !starts_work(&message),
    };
    only_answers.then(|| Request::from_parts(parts, Body::from(bytes)))
}

/// A response body that holds `_held` until it is sent or dropped, and
/// keeps the body's exact size (hyper writes a `Content-Length` from it).
struct HeldWhileSending<T> {
    body: Body,
    _held: T,
}

impl<T: Unpin> http_body::Body for HeldWhileSending<T> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Reserves a session's place for a POST without `Mcp-Session-Id`. Runs
/// after `json_guard` has read and checked the body: a body arriving a
/// byte at a time (for up to `request_read_timeout`) or refused must not
/// hold a place meanwhile, and a malformed one gets its 400, not a 503.
pub async fn reserve_session(
    State(gateway): State<Arc<Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // Draining may have begun while the body arrived (`admit` looked
    // before): what would start work is refused now, on the body read.
    let request = match refuse_new_work_while_draining(&gateway, request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    if names_session(&request) {
        return next.run(request).await;
    }
    // Only an `initialize` makes a session; anything else without one gets
    // rmcp's 400 ("session ID required"), at the limit too: a 503 with
    // `Retry-After` had a client retry a request that can never succeed.
    let (request, initializes) = initializes(request).await;
    if !initializes {
        return next.run(request).await;
    }
    let held = request
        .extensions()
        .get::<HeldPlace>()
        .and_then(HeldPlace::take);
    let limit = gateway.config().limits.max_sessions;
    let Some(ticket) = held.or_else(|| gateway.sessions().reserve(limit)) else {
        tracing::warn!(limit, "session limit reached; refusing a new session");
        crate::telemetry::metrics().count_refused(crate::telemetry::metrics::Refusal::SessionLimit);
        return unavailable(format!(
            "session limit reached: the gateway is at its limit of {limit} sessions (max_sessions); try again later"
        ));
    };
    RESERVED
        .scope(RefCell::new(Some(ticket)), next.run(request))
        .await
}

/// Whether `request`'s body (read whole by `json_guard` already: taken
/// back as it is, not copied; only for a POST naming no session) is an
/// `initialize` request; the request, as it was.
async fn initializes(request: Request) -> (Request, bool) {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (Request::from_parts(parts, Body::empty()), false);
    };
    let initializes = super::json_guard::is_initialize(&bytes);
    (Request::from_parts(parts, Body::from(bytes)), initializes)
}

fn unavailable(message: String) -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": LIMIT_EXCEEDED, "message": message },
        })),
    )
        .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}
