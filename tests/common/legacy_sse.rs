//! A server on the legacy HTTP+SSE transport (2024-11-05), written for the
//! tests: `GET /sse` opens a session's event stream, whose first event
//! names `POST /messages?session=N`; answers go back on the stream.
//!
//! Its tools say and do what the tests look at: `whoami` answers with the
//! session's number, `end_stream` ends the session's stream without an
//! answer, `forget` answers and then forgets every session (their streams
//! stay open, their POSTs get 404), `hold` answers its POST only once it
//! has run (as the Java SDK's servlet transport does), which is once a
//! `whoami` has arrived meanwhile ("company") or 5 s have passed ("alone"),
//! `huge` answers with an event of 17 MiB, over the 16 MiB an event may
//! be. It records the `Authorization` header
//! of every request, and how many event streams are open.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Where a session's stream says its messages go: the `endpoint` event's
/// data, from the server's port and the session's number.
pub type EndpointFor = fn(u16, u64) -> String;

/// The endpoint a well-behaved server names: a path on its own origin.
pub fn same_origin_endpoint(_port: u16, session: u64) -> String {
    format!("/messages?session={session}")
}

#[derive(Default)]
struct Sessions {
    live: HashMap<u64, mpsc::UnboundedSender<String>>,
    /// Forgotten sessions whose streams are kept open.
    forgotten: Vec<mpsc::UnboundedSender<String>>,
}

struct Shared {
    port: u16,
    endpoint: EndpointFor,
    next_session: AtomicU64,
    sessions: Mutex<Sessions>,
    /// `(method or "GET", Authorization)` of every request, in order.
    seen: Mutex<Vec<(String, Option<String>)>>,
    /// Every stream's sender, to count those still open.
    streams: Mutex<Vec<mpsc::UnboundedSender<String>>>,
    /// How many `whoami` calls arrived.
    whoamis: AtomicU64,
}

/// The running server; stops when dropped.
pub struct LegacySseServer {
    pub port: u16,
    shared: Arc<Shared>,
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for LegacySseServer {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl LegacySseServer {
    /// Serves on a free loopback port.
    pub async fn start(endpoint: EndpointFor) -> LegacySseServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            port,
            endpoint,
            next_session: AtomicU64::new(1),
            sessions: Default::default(),
            seen: Default::default(),
            streams: Default::default(),
            whoamis: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/sse", get(open_stream))
            .route("/messages", post(message))
            .with_state(shared.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        LegacySseServer {
            port,
            shared,
            serving,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/sse", self.port)
    }

    /// What each request was (`GET`, or the message's method) and the
    /// `Authorization` header it carried.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// How many event streams a client holds open.
    pub fn open_streams(&self) -> usize {
        let mut streams = self.shared.streams.lock().unwrap();
        streams.retain(|stream| !stream.is_closed());
        streams.len()
    }

    /// How many sessions were ever opened.
    pub fn sessions_opened(&self) -> u64 {
        self.shared.next_session.load(Ordering::SeqCst) - 1
    }
}

fn authorization(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

async fn open_stream(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    shared
        .seen
        .lock()
        .unwrap()
        .push(("GET".to_owned(), authorization(&headers)));
    let session = shared.next_session.fetch_add(1, Ordering::SeqCst);
    let (sender, receiver) = mpsc::unbounded_channel::<String>();
    shared
        .sessions
        .lock()
        .unwrap()
        .live
        .insert(session, sender.clone());
    shared.streams.lock().unwrap().push(sender);
    let endpoint = (shared.endpoint)(shared.port, session);
    let first = futures::stream::once(async move {
        Ok::<_, Infallible>(Bytes::from(format!(
            "event: endpoint\ndata: {endpoint}\n\n"
        )))
    });
    let messages = tokio_stream_of(receiver).map(|message| {
        Ok::<_, Infallible>(Bytes::from(format!("event: message\ndata: {message}\n\n")))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(first.chain(messages)))
        .expect("a response")
}

fn tokio_stream_of(
    mut receiver: mpsc::UnboundedReceiver<String>,
) -> impl futures::Stream<Item = String> {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}

async fn message(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let method = message["method"].as_str().unwrap_or("(answer)").to_owned();
    shared
        .seen
        .lock()
        .unwrap()
        .push((method.clone(), authorization(&headers)));
    let session = uri
        .query()
        .and_then(|query| query.strip_prefix("session="))
        .and_then(|n| n.parse::<u64>().ok());
    let Some(session) = session else {
        return (StatusCode::BAD_REQUEST, "no session").into_response();
    };
    let Some(stream) = shared.sessions.lock().unwrap().live.get(&session).cloned() else {
        return (StatusCode::NOT_FOUND, "unknown session").into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    let tool = message["params"]["name"].as_str().unwrap_or_default();
    match (method.as_str(), tool) {
        ("initialize", _) => {
            let _ = stream.send(answer(json!({
                "protocolVersion": "2024-11-05",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy-sse", "version": "1"}
            })));
        }
        ("tools/list", _) => {
            let schema = json!({"type": "object"});
            let _ = stream.send(answer(json!({"tools": [
                {"name": "whoami", "inputSchema": schema},
                {"name": "end_stream", "inputSchema": schema},
                {"name": "forget", "inputSchema": schema},
                {"name": "hold", "inputSchema": schema},
                {"name": "huge", "inputSchema": schema},
            ]})));
        }
        ("tools/call", "whoami") => {
            shared.whoamis.fetch_add(1, Ordering::SeqCst);
            let _ = stream.send(answer(
                json!({"content": [{"type": "text", "text": format!("session {session}")}]}),
            ));
        }
        ("tools/call", "huge") => {
            let text = "x".repeat(17 * 1024 * 1024);
            let _ = stream.send(answer(json!({"content": [{"type": "text", "text": text}]})));
        }
        ("tools/call", "end_stream") => {
            shared.sessions.lock().unwrap().live.remove(&session);
            shared
                .streams
                .lock()
                .unwrap()
                .retain(|open| !open.same_channel(&stream));
        }
        ("tools/call", "forget") => {
            let _ = stream.send(answer(
                json!({"content": [{"type": "text", "text": "forgotten"}]}),
            ));
            let mut sessions = shared.sessions.lock().unwrap();
            let live: Vec<_> = sessions.live.drain().map(|(_, sender)| sender).collect();
            sessions.forgotten.extend(live);
        }
        ("tools/call", "hold") => {
            let before = shared.whoamis.load(Ordering::SeqCst);
            let mut company = false;
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                if shared.whoamis.load(Ordering::SeqCst) > before {
                    company = true;
                    break;
                }
            }
            let text = if company { "company" } else { "alone" };
            let _ = stream.send(answer(json!({"content": [{"type": "text", "text": text}]})));
        }
        ("ping", _) => {
            let _ = stream.send(answer(json!({})));
        }
        _ => {
            let _ = stream.send(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})
                    .to_string(),
            );
        }
    }
    StatusCode::ACCEPTED.into_response()
}
