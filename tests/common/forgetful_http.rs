//! A Streamable HTTP server that answers a session it does not know with
//! 400, as the Python SDK's servers before 2025-06-18's 404 do (`Bad
//! Request: No valid session ID provided`, id `server-error`; or with
//! another status, such as the spec's 404, given to
//! [`ForgetfulHttpServer::answering_unknown_sessions_with`]), and that can
//! be made to forget its sessions as a restart would: its `forget` tool
//! answers, then forgets every session. `whoami` (a tool, and a prompt,
//! which goes upstream another way) answers with the session's id;
//! `authorization` with the `Authorization` header its session's
//! `initialize` came with and the one its call came with. `refuse` (a
//! tool and a prompt) is answered 400 with a JSON-RPC error whose id is
//! `null`, as a server that cannot read a request's id answers; `refuse_sse`
//! (a prompt) sends that error on an event stream, which it then holds
//! open for 30 s; `refuse_resumed` (a prompt) closes its event stream
//! after a priming event (SEP-1699) and sends that error on the `GET`
//! resuming it. It refuses any other `GET` (405, as the spec allows), so
//! only a POST can find out. `half` (its description too) and `half_sse`
//! answer with text that holds half of a UTF-16 surrogate pair (`\ud83d`,
//! as `JSON.stringify` writes a JavaScript string cut inside an emoji), in
//! JSON and on an event stream. `unanswered` (a prompt) gets an event
//! stream of one comment that then ends, with no answer; `wrong_id` an
//! answer with another id; `text_id` its answer with its numeric id
//! written as text; `accepted` a 202 and no answer.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
    Router,
};
use futures::StreamExt;
use serde_json::{json, Value};

struct Shared {
    /// The status a request for a session not (or no longer) known gets.
    unknown_session: StatusCode,
    next_session: AtomicU64,
    /// Each session, with the `Authorization` its `initialize` carried.
    sessions: Mutex<HashMap<String, Option<String>>>,
}

/// The running server; stops when dropped.
pub struct ForgetfulHttpServer {
    pub port: u16,
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for ForgetfulHttpServer {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl ForgetfulHttpServer {
    /// Answering an unknown session with 400.
    pub async fn start() -> ForgetfulHttpServer {
        Self::answering_unknown_sessions_with(StatusCode::BAD_REQUEST).await
    }

    pub async fn answering_unknown_sessions_with(
        unknown_session: StatusCode,
    ) -> ForgetfulHttpServer {
        let shared = Shared {
            unknown_session,
            next_session: AtomicU64::default(),
            sessions: Mutex::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        let app = Router::new()
            .route(
                "/mcp",
                post(message)
                    .get(resume)
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(Arc::new(shared));
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ForgetfulHttpServer { port, serving }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// Where a message's text stands for half of a surrogate pair, which a
/// `Value` cannot hold: put in as an escape once it is written.
const HALF_PAIR: &str = "HALF_PAIR";

fn written(message: &Value) -> String {
    message.to_string().replace(HALF_PAIR, "\\ud83d")
}

fn json_response(message: Value, session: Option<&str>) -> Response {
    let mut response = ([("content-type", "application/json")], written(&message)).into_response();
    if let Some(session) = session {
        response
            .headers_mut()
            .insert("mcp-session-id", session.parse().expect("a header value"));
    }
    response
}

/// The event id of `refuse_resumed`'s priming event.
const RESUMED_REFUSAL: &str = "refuse-resumed";

fn idless_refusal() -> Value {
    json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32602, "message": "refused without an id"}})
}

/// An event stream of `first`, then held open for 30 s.
fn events_held_open(first: String) -> Response {
    let held = futures::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(
        futures::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok(String::new())
        }),
    );
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(held),
    )
        .into_response()
}

/// A `GET`: only `refuse_resumed`'s stream is resumed (with the refusal).
async fn resume(headers: HeaderMap) -> Response {
    match headers.get("last-event-id") {
        Some(last) if last == RESUMED_REFUSAL => {
            events_held_open(format!("id: refusal\ndata: {}\n\n", idless_refusal()))
        }
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

async fn message(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = message.get("id").cloned();
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let session = headers
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if message["method"] == "initialize" && session.is_none() {
        let n = shared.next_session.fetch_add(1, Ordering::SeqCst) + 1;
        let session = format!("s{n}");
        shared
            .sessions
            .lock()
            .unwrap()
            .insert(session.clone(), authorization);
        let result = json!({
            "protocolVersion": "2025-03-26",
            "capabilities": {"tools": {}, "prompts": {}},
            "serverInfo": {"name": "forgetful", "version": "1"}
        });
        return json_response(answer(result), Some(&session));
    }
    let known = session
        .as_ref()
        .and_then(|session| shared.sessions.lock().unwrap().get(session).cloned());
    let Some(authorization_at_initialize) = known else {
        let refusal = json!({"jsonrpc": "2.0", "id": "server-error",
            "error": {"code": -32600, "message": "Bad Request: No valid session ID provided"}});
        let mut response = json_response(refusal, None);
        *response.status_mut() = shared.unknown_session;
        return response;
    };
    if id.is_none() {
        return StatusCode::ACCEPTED.into_response();
    }
    if message["params"]["name"] == "refuse_sse" {
        return events_held_open(format!("data: {}\n\n", idless_refusal()));
    }
    if message["params"]["name"] == "refuse_resumed" {
        return (
            [("content-type", "text/event-stream")],
            format!("id: {RESUMED_REFUSAL}\nretry: 10\ndata: \n\n"),
        )
            .into_response();
    }
    if message["params"]["name"] == "wrong_id" {
        let wrong = json!({"jsonrpc": "2.0", "id": 424242, "result": {"messages": []}});
        return json_response(wrong, session.as_deref());
    }
    if message["params"]["name"] == "text_id" {
        let as_text = id.as_ref().map(|id| Value::String(id.to_string()));
        let answer = json!({"jsonrpc": "2.0", "id": as_text, "result": {"messages": []}});
        return json_response(answer, session.as_deref());
    }
    if message["params"]["name"] == "accepted" {
        return StatusCode::ACCEPTED.into_response();
    }
    if message["params"]["name"] == "unanswered" {
        return ([("content-type", "text/event-stream")], ": nothing\n\n").into_response();
    }
    if message["params"]["name"] == "refuse" {
        let mut response = json_response(idless_refusal(), None);
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return response;
    }
    let text = |text: &str| json!({"content": [{"type": "text", "text": text}]});
    let result = match (
        message["method"].as_str(),
        message["params"]["name"].as_str(),
    ) {
        (Some("tools/list"), _) => {
            let schema = json!({"type": "object"});
            json!({"tools": [
                {"name": "whoami", "inputSchema": schema},
                {"name": "forget", "inputSchema": schema},
                {"name": "authorization", "inputSchema": schema},
                {"name": "refuse", "inputSchema": schema},
                {"name": "half", "description": format!("cut {HALF_PAIR} here"), "inputSchema": schema},
                {"name": "half_sse", "inputSchema": schema},
            ]})
        }
        (Some("tools/call"), Some("whoami")) => text(session.as_deref().unwrap_or_default()),
        (Some("tools/call"), Some("authorization")) => {
            let shown = |value: Option<String>| value.unwrap_or_else(|| "none".to_owned());
            text(&format!(
                "{} / {}",
                shown(authorization_at_initialize),
                shown(authorization)
            ))
        }
        (Some("prompts/list"), _) => {
            json!({"prompts": [{"name": "whoami"}, {"name": "refuse"}, {"name": "refuse_sse"},
                {"name": "refuse_resumed"}, {"name": "unanswered"}, {"name": "wrong_id"},
                {"name": "accepted"}, {"name": "text_id"}]})
        }
        (Some("prompts/get"), _) => json!({"messages": [{"role": "user",
            "content": {"type": "text", "text": session.as_deref().unwrap_or_default()}}]}),
        (Some("tools/call"), Some("half")) => text(&format!("{HALF_PAIR} hello")),
        (Some("tools/call"), Some("half_sse")) => {
            let answer = answer(text(&format!("{HALF_PAIR} hello")));
            return (
                [("content-type", "text/event-stream")],
                format!("data: {}\n\n", written(&answer)),
            )
                .into_response();
        }
        (Some("tools/call"), Some("forget")) => {
            shared.sessions.lock().unwrap().clear();
            text("forgotten")
        }
        _ => json!({}),
    };
    json_response(answer(result), session.as_deref())
}
