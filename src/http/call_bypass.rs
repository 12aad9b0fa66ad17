//! The bypass: a plain routed request (`tools/call`, `prompts/get`,
//! `resources/read`, `completion/complete`) on an awake session, handed to
//! the session layer without rmcp's `handle_post`. (Not to be confused
//! with the serving threads, `lanes.rs`.)
//!
//! rmcp reads every POST body into its `ClientRequest`, an untagged enum
//! that tries each of its variants in turn; a `tools/call` is the
//! fourteenth, so each call built and threw away thirteen serde errors
//! first. That read was ~15% of a proxied call's instructions (callgrind),
//! the biggest single cost left in the gateway's own process. `json_guard`
//! has already read such a body as a well-formed routed request into
//! rmcp's `CallToolRequest` (or `GetPromptRequest` and so on), its params
//! by rmcp's own types and their `_meta` moved to the extensions as rmcp
//! moves it ([`PlainRequest`]);
//! here that request is given to the session layer as rmcp would give it,
//! with the request's HTTP parts in its extensions, and its answer stream
//! is sent as rmcp sends one. rmcp's checks in `handle_post` are the same
//! for every request but `initialize` under the versions taken here.
//!
//! Only where rmcp's checks would pass with nothing to say: the bypass is
//! taken when the request is a POST in a stateful session that is awake,
//! accepts both JSON and SSE in the plain way (no media parameters, no
//! weights), says it is JSON, and carries no protocol version of 2026-07-28
//! or later, in its header or its `_meta` (those bring rmcp's per-request
//! version and SEP-2243 header rules). Anything else goes to rmcp as
//! before, untouched. Host was checked at the edge (`host_check.rs`) with
//! the allow-list rmcp is given; the bypass takes only a request whose
//! one `Host` header is its authority (origin-form, as clients send
//! them), so that the edge and rmcp judge the same name. A request with
//! an `Origin` goes to rmcp: a browser's, whose origin rmcp checks again
//! by its own reading of the allow-list.

use std::{convert::Infallible, time::Duration};

use axum::{
    body::Body,
    extract::Request,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use futures::{Stream, StreamExt};
use rmcp::{
    model::{
        ClientJsonRpcMessage, ClientRequest, GetExtensions, GetMeta, JsonRpcRequest,
        ProtocolVersion,
    },
    transport::streamable_http_server::{
        session::{ServerSseMessage, SessionId, SessionManager},
        StreamableHttpServerConfig,
    },
};
use sse_stream::{KeepAlive, Sse, SseBody};
use tokio_util::sync::CancellationToken;

use super::{json_guard::PlainRequest, resumable::ResumableSessions};
use crate::header_names;

/// The protocol versions whose requests rmcp checks against nothing but
/// the session: before 2026-07-28's per-request versions and headers.
const PLAIN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Serves `request` past rmcp's `handle_post` if it fits (module doc); otherwise
/// gives it back as it came.
pub(super) async fn serve(
    config: &StreamableHttpServerConfig,
    sessions: &ResumableSessions,
    mut request: Request,
) -> Result<Response, Request> {
    // Taken out either way: in the call's extensions (the HTTP parts go
    // there) a second copy of its arguments would live as long as it.
    let Some(PlainRequest(mut call)) = request.extensions_mut().remove::<PlainRequest>() else {
        return Err(request);
    };
    let Some(session_id) = fits(config, &request) else {
        return Err(request);
    };
    let session_id: SessionId = session_id.into();
    if names_a_protocol_version(&call) {
        return Err(request);
    }
    if !sessions.is_awake(&session_id).await {
        return Err(request);
    }
    let (parts, _body) = request.into_parts();
    call.request.extensions_mut().insert(parts);
    let message = ClientJsonRpcMessage::Request(call);
    match sessions.create_stream(&session_id, message).await {
        Ok(stream) => Ok(sse_response(
            stream,
            config.sse_keep_alive,
            config.cancellation_token.child_token(),
        )),
        // As rmcp answers it.
        Err(error) => {
            tracing::error!("Internal server error when get session: {error}");
            Ok(Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(Body::from(format!(
                    "Encounter an error when get session: {error}"
                )))
                .expect("valid response"))
        }
    }
}

/// Whether a request names a protocol version in its `_meta` (2026-07-28's
/// per-request version, which brings rmcp's checks of it).
fn names_a_protocol_version(request: &JsonRpcRequest<ClientRequest>) -> bool {
    request.request.get_meta().protocol_version().is_some()
}

/// The request's session id, if its headers and the service's mode are
/// such that rmcp's checks would pass without a word (module doc).
fn fits<'a>(config: &StreamableHttpServerConfig, request: &'a Request) -> Option<&'a str> {
    if request.method() != axum::http::Method::POST
        || !config.legacy_session_mode
        || config.json_response
        || config.stateless_protocol_metadata_required
    {
        return None;
    }
    let headers = request.headers();
    if !accepts_json_and_sse(headers)
        || !says_json(headers)
        || !named_by_its_host(request)
        || headers.contains_key(header::ORIGIN)
    {
        return None;
    }
    if let Some(version) = headers.get(header_names::MCP_PROTOCOL_VERSION) {
        let version = version.to_str().ok()?;
        if !PLAIN_VERSIONS.contains(&version)
            || version >= ProtocolVersion::STANDARD_HEADERS.as_str()
        {
            return None;
        }
    }
    let mut ids = headers.get_all(header_names::MCP_SESSION_ID).iter();
    let id = ids.next()?.to_str().ok()?;
    ids.next().is_none().then_some(id)
}

/// The request's authority is its one `Host` header, well-formed: what
/// the edge checked is what rmcp would (it reads `Host` first, the edge
/// the target's authority first).
fn named_by_its_host(request: &Request) -> bool {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let one = match (hosts.next(), hosts.next()) {
        (Some(host), None) => host,
        _ => return false,
    };
    request.uri().authority().is_none()
        && one
            .to_str()
            .is_ok_and(|host| axum::http::uri::Authority::try_from(host).is_ok())
}

/// `Accept` lists both types rmcp requires, with no parameters (a weight
/// of 0 would refuse one: rmcp's to judge).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains([';', '"']) {
            return false;
        }
        for media in value.split(',').map(str::trim) {
            json |= media.eq_ignore_ascii_case("application/json");
            sse |= media.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// `Content-Type` is JSON, as rmcp reads it.
fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// A request's answer stream as rmcp writes one: each message an SSE
/// event with its id (the priming event's data empty), keep-alive
/// comments, ended when the service shuts down; dropping the body
/// cancels `cancel` (rmcp's `sse_stream_response`).
fn sse_response(
    stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    keep_alive: Option<Duration>,
    cancel: CancellationToken,
) -> Response {
    let cancelled = cancel.clone();
    let on_drop = cancel.drop_guard();
    let events = stream
        .map(move |message| {
            let _cancel_on_drop = &on_drop;
            let mut event = match &message.message {
                Some(message) => {
                    Sse::default().data(serde_json::to_string(message.as_ref()).expect("valid"))
                }
                // The priming event: empty data (SEP-1699).
                None => Sse::default().data(""),
            };
            event.id = message.event_id;
            event.retry = message.retry.map(|retry| retry.as_millis() as u64);
            Ok::<_, Infallible>(event)
        })
        .take_until(async move { cancelled.cancelled().await });
    let body = SseBody::new(events);
    let body = match keep_alive {
        Some(interval) => {
            Body::new(body.with_keep_alive::<KeepAliveTimer>(KeepAlive::new().interval(interval)))
        }
        None => Body::new(body),
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// tokio's sleep as `sse_stream`'s keep-alive timer.
struct KeepAliveTimer(std::pin::Pin<Box<tokio::time::Sleep>>);

impl std::future::Future for KeepAliveTimer {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl sse_stream::Timer for KeepAliveTimer {
    fn from_duration(duration: Duration) -> Self {
        Self(Box::pin(tokio::time::sleep(duration)))
    }

    fn reset(mut self: std::pin::Pin<&mut Self>, when: std::time::Instant) {
        self.0.as_mut().reset(tokio::time::Instant::from_std(when));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` as `json_guard` reads it and the bypass takes it.
    fn read_call(body: &[u8]) -> Option<JsonRpcRequest<ClientRequest>> {
        let request = super::super::json_guard::plain_routed_request(body)?;
        (!names_a_protocol_version(&request)).then_some(request)
    }

    /// What rmcp's own read makes of `body`, as a request.
    fn as_rmcp_reads_it(body: &str) -> JsonRpcRequest<ClientRequest> {
        match serde_json::from_str::<ClientJsonRpcMessage>(body).expect("rmcp reads it") {
            ClientJsonRpcMessage::Request(request) => request,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_routed_request_is_read_as_rmcp_reads_it() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo"}}"#,
            r#"{"jsonrpc":"2.0","id":"r-7","method":"tools/call","params":{"name":"a__echo","arguments":{"text":"hi","n":1.5e3,"big":12345678901234567890,"nested":{"b":[1,null,true]}}}}"#,
            r#"{"params":{"_meta":{"progressToken":"p1","x-trace":{"k":1}},"name":"a__slow","arguments":{}},"method":"tools/call","id":9,"jsonrpc":"2.0","extra":1}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","task":{"ttl":1000}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"a__greet","arguments":{"who":"w"},"_meta":{"progressToken":3}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"a+file:///x"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a__greet"},"argument":{"name":"who","value":"w"}}}"#,
        ] {
            let ours = read_call(body.as_bytes()).expect("a plain request");
            let rmcp = as_rmcp_reads_it(body);
            assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&rmcp).unwrap(),
                "{body}"
            );
            // Equal as written is not all: `_meta` must be where rmcp's
            // handler reads it (a progress token), the params as rmcp's.
            assert_eq!(
                format!("{:?}", ours.request.get_meta()),
                format!("{:?}", rmcp.request.get_meta()),
                "{body}"
            );
            assert_eq!(
                format!("{:?}", ours.request),
                format!("{:?}", rmcp.request),
                "{body}"
            );
            assert_eq!(ours.id, rmcp.id);
        }
    }

    #[test]
    fn a_call_that_names_a_protocol_version_goes_to_rmcp() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(read_call(body.as_bytes()).is_none());
        let prompt = r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(read_call(prompt.as_bytes()).is_none());
        let other = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(read_call(other.as_bytes()).is_none());
    }

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().method("POST").uri("/mcp");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    const PLAIN: [(&str, &str); 4] = [
        ("host", "127.0.0.1:8080"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", "s-1"),
    ];

    /// Whether a request with PLAIN's headers, changed by `change`, fits.
    fn fits_with(change: &[(&str, Option<&str>)]) -> bool {
        let mut headers: Vec<(&str, &str)> = PLAIN.to_vec();
        for (name, value) in change {
            headers.retain(|(kept, _)| kept != name);
            if let Some(value) = value {
                headers.push((name, value));
            }
        }
        let config = StreamableHttpServerConfig::default();
        fits(&config, &request(&headers)).is_some()
    }

    #[test]
    fn only_requests_rmcp_would_pass_in_silence_fit() {
        assert!(fits_with(&[]));
        assert!(fits_with(&[("mcp-protocol-version", Some("2025-06-18"))]));
        assert!(fits_with(&[("mcp-protocol-version", Some("2025-11-25"))]));
        assert!(fits_with(&[(
            "content-type",
            Some("application/json; charset=utf-8")
        )]));
        assert!(fits_with(&[(
            "accept",
            Some("text/event-stream,APPLICATION/JSON")
        )]));
        for (change, why) in [
            (
                ("mcp-protocol-version", Some("2026-07-28")),
                "per-request versions",
            ),
            (
                ("mcp-protocol-version", Some("2099-01-01")),
                "unknown version",
            ),
            (("accept", Some("application/json")), "no SSE"),
            (
                ("accept", Some("application/json, text/event-stream;q=0")),
                "a weight",
            ),
            (("content-type", Some("text/plain")), "not JSON"),
            (("content-type", None), "no content type"),
            (("mcp-session-id", None), "no session"),
            (("host", None), "no Host"),
            (("host", Some("a b")), "a malformed Host"),
            (("origin", Some("http://127.0.0.1:8080")), "an Origin"),
        ] {
            assert!(!fits_with(&[change]), "{why}");
        }
        let mut twice = request(&PLAIN);
        twice
            .headers_mut()
            .append("mcp-session-id", HeaderValue::from_static("s-2"));
        let config = StreamableHttpServerConfig::default();
        assert!(fits(&config, &twice).is_none(), "two session ids");
        let mut two_hosts = request(&PLAIN);
        two_hosts
            .headers_mut()
            .append("host", HeaderValue::from_static("evil.example"));
        assert!(fits(&config, &two_hosts).is_none(), "two Host headers");
        let mut absolute = request(&PLAIN);
        *absolute.uri_mut() = "http://127.0.0.1:8080/mcp".parse().unwrap();
        assert!(fits(&config, &absolute).is_none(), "an absolute target");
        let mut get = request(&PLAIN);
        *get.method_mut() = axum::http::Method::GET;
        assert!(fits(&config, &get).is_none(), "not a POST");
    }
}
