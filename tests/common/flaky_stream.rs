//! A Streamable HTTP server whose message stream (`GET`) or handshake
//! misbehaves, one way or another ([`StreamTrouble`]), and that counts
//! the `GET`s it was sent. Its one tool is `ping`; once a `GET` is served, the stream says
//! the tools list changed (and `tools/list` then lists `pong` too).

use std::sync::{
    atomic::{AtomicBool, AtomicUsize, Ordering},
    Arc,
};

use axum::{
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
    Router,
};
use futures::StreamExt;
use serde_json::{json, Value};

/// How the message stream misbehaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StreamTrouble {
    /// The first `GET` is answered 500, the later ones with the stream,
    /// held open.
    FirstGetFails,
    /// Every `GET` gets an event with `retry: 0`, and the stream ends.
    EndsAtOnceWithNoRetryWait,
    /// `notifications/initialized` is answered HTTP 500 (the handshake
    /// fails).
    RefusesInitialized,
}

struct Shared {
    trouble: StreamTrouble,
    gets: AtomicUsize,
    /// When each `GET` came.
    got_at: std::sync::Mutex<Vec<std::time::Instant>>,
    served: AtomicBool,
}

/// The running server; stops when dropped.
pub struct FlakyStreamServer {
    pub port: u16,
    shared: Arc<Shared>,
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for FlakyStreamServer {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl FlakyStreamServer {
    pub async fn start(trouble: StreamTrouble) -> FlakyStreamServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            trouble,
            gets: AtomicUsize::new(0),
            got_at: Default::default(),
            served: AtomicBool::new(false),
        });
        let app = Router::new()
            .route(
                "/mcp",
                post(message)
                    .get(stream)
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(shared.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FlakyStreamServer {
            port,
            shared,
            serving,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// How many `GET`s it was sent.
    pub fn gets(&self) -> usize {
        self.shared.gets.load(Ordering::SeqCst)
    }

    /// The time between each two `GET`s it was sent, in order.
    pub fn gaps_between_gets(&self) -> Vec<std::time::Duration> {
        let got_at = self.shared.got_at.lock().unwrap();
        got_at.windows(2).map(|pair| pair[1] - pair[0]).collect()
    }
}

fn events(text: String, held: bool) -> Response {
    let first = futures::stream::once(async move { Ok::<_, std::io::Error>(text) });
    let body = match held {
        true => axum::body::Body::from_stream(first.chain(futures::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok(String::new())
        }))),
        false => axum::body::Body::from_stream(first),
    };
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn stream(State(shared): State<Arc<Shared>>) -> Response {
    shared
        .got_at
        .lock()
        .unwrap()
        .push(std::time::Instant::now());
    let count = shared.gets.fetch_add(1, Ordering::SeqCst) + 1;
    match shared.trouble {
        StreamTrouble::FirstGetFails if count == 1 => {
            (StatusCode::INTERNAL_SERVER_ERROR, "not yet").into_response()
        }
        StreamTrouble::FirstGetFails => {
            shared.served.store(true, Ordering::SeqCst);
            let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            events(format!("data: {changed}\n\n"), true)
        }
        StreamTrouble::EndsAtOnceWithNoRetryWait | StreamTrouble::RefusesInitialized => {
            events(format!("id: e{count}\nretry: 0\ndata: \n\n"), false)
        }
    }
}

async fn message(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(id) = message.get("id").cloned() else {
        if shared.trouble == StreamTrouble::RefusesInitialized
            && message["method"] == "notifications/initialized"
        {
            return (StatusCode::INTERNAL_SERVER_ERROR, "not today").into_response();
        }
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match message["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "flaky-stream", "version": "1"}
        }),
        Some("tools/list") => {
            let schema = json!({"type": "object"});
            let mut tools = vec![json!({"name": "ping", "inputSchema": schema})];
            if shared.served.load(Ordering::SeqCst) {
                tools.push(json!({"name": "pong", "inputSchema": schema}));
            }
            json!({ "tools": tools })
        }
        Some("tools/call") => json!({"content": [{"type": "text", "text": "pong"}]}),
        _ => json!({}),
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut response = ([("content-type", "application/json")], answer.to_string()).into_response();
    response
        .headers_mut()
        .insert("mcp-session-id", "s1".parse().expect("a header value"));
    response
}
