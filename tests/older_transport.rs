//! The older HTTP+SSE transport downstream (`[server] sse_path`): a client
//! that speaks only it opens an event stream, posts to the endpoint the
//! stream names, and gets every answer on the stream. Written by hand with
//! reqwest, so that each answer's status is seen; real SDK clients are in
//! `tests/interop/test_sse_clients.py`.

mod common;

use common::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"older","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A client's event stream, read event by event.
struct EventStream {
    bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl EventStream {
    async fn open(http: &reqwest::Client, url: &str) -> EventStream {
        let response = within("GET the event stream", http.get(url).send())
            .await
            .expect("GET");
        assert_eq!(response.status(), StatusCode::OK, "{response:?}");
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        EventStream {
            bytes: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event's name and data (comments, keep-alives, skipped);
    /// `None` once the stream has ended.
    async fn next(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data) = (String::from("message"), Vec::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some((name, data.join("\n")));
            }
            match within("the next event", self.bytes.next()).await {
                Some(Ok(chunk)) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    }

    /// The next message on the stream, as JSON.
    async fn message(&mut self) -> Value {
        let (name, data) = self.next().await.expect("a message");
        assert_eq!(name, "message", "{data}");
        serde_json::from_str(&data).expect("JSON")
    }
}

/// An older-transport session: its stream and where it posts.
struct OlderClient {
    http: reqwest::Client,
    events: EventStream,
    endpoint: String,
}

impl OlderClient {
    /// Opens the stream and reads the endpoint it names.
    async fn connect(gateway: &Gateway) -> OlderClient {
        let http = reqwest::Client::new();
        let mut events = EventStream::open(&http, &gateway.url("/sse")).await;
        let (name, endpoint) = events.next().await.expect("the endpoint event");
        assert_eq!(name, "endpoint");
        assert!(endpoint.starts_with("/sse?sessionId="), "{endpoint}");
        OlderClient {
            http,
            events,
            endpoint: gateway.url(&endpoint),
        }
    }

    async fn post(&self, body: impl Into<String>) -> (StatusCode, String) {
        let request = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body.into());
        let response = within("POST", request.send()).await.expect("POST");
        let status = response.status();
        (status, response.text().await.unwrap_or_default())
    }

    /// Posts a request (202) and returns the answer the stream brings.
    async fn ask(&mut self, body: Value) -> Value {
        let (status, text) = self.post(body.to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
        let answer = self.events.message().await;
        assert_eq!(answer["id"], body["id"], "{answer}");
        answer
    }

    async fn initialize(&mut self) {
        let (status, text) = self.post(INITIALIZE).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
        let answer = self.events.message().await;
        assert_eq!(
            answer["result"]["protocolVersion"], "2024-11-05",
            "{answer}"
        );
        let (status, text) = self.post(INITIALIZED).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    }
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
}

async fn downstream_sessions(gateway: &Gateway) -> u64 {
    status_json(gateway).await["downstream_sessions"]
        .as_u64()
        .expect("a count")
}

/// Lists, calls and errors come back on the event stream, each for its
/// own request; closing the stream ends the session behind it.
#[tokio::test]
async fn an_older_client_is_answered_on_its_event_stream_and_ends_with_it() {
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await;
    let mut client = OlderClient::connect(&gateway).await;
    client.initialize().await;
    let tools = client
        .ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    assert!(
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["name"] == "demo__echo"),
        "{tools}"
    );
    let echoed = client
        .ask(call(
            3,
            "demo__echo",
            json!({"message": "over the old transport"}),
        ))
        .await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "over the old transport",
        "{echoed}"
    );
    let unknown = client.ask(call(4, "nope__tool", json!({}))).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert_eq!(downstream_sessions(&gateway).await, 1);
    let streams = |metrics: &str| metric_value(metrics, "junction_downstream_sse_streams");
    assert_eq!(streams(&metrics_text(&gateway).await), Some(1.0));

    drop(client);
    eventually("the session to end with its stream", OP_TIMEOUT, || async {
        (downstream_sessions(&gateway).await == 0).then_some(())
    })
    .await;
    assert_eq!(streams(&metrics_text(&gateway).await), Some(0.0));
}

/// Posts the endpoint cannot take get their answer on the post itself:
/// no session named, an unknown one, a body that is not JSON, an
/// `initialize` over the bound a new session's has. The stream carries on.
#[tokio::test]
async fn bad_posts_are_refused_on_the_post_and_the_session_carries_on() {
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await;
    let http = reqwest::Client::new();
    let no_session = http.post(gateway.url("/sse")).body(INITIALIZE).send();
    let no_session = within("POST", no_session).await.unwrap();
    assert_eq!(no_session.status(), StatusCode::BAD_REQUEST);
    // Answered before the body was read: the connection closes after it,
    // and says so (a client reusing it raced the close).
    assert_eq!(no_session.headers()["connection"], "close");
    let unknown = http
        .post(gateway.url("/sse?sessionId=made-up"))
        .header("content-type", "application/json")
        .body(INITIALIZE)
        .send();
    let unknown = within("POST", unknown).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert_eq!(unknown.headers()["connection"], "close");
    let put = within("PUT", http.put(gateway.url("/sse")).send()).await;
    assert_eq!(put.unwrap().status(), StatusCode::METHOD_NOT_ALLOWED);

    let mut client = OlderClient::connect(&gateway).await;
    let padding = "x".repeat(128 * 1024);
    let too_big = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": padding, "version": "0"}}});
    let request = client
        .http
        .post(&client.endpoint)
        .header("content-type", "application/json")
        .body(too_big.to_string());
    let refused = within("POST", request.send()).await.expect("POST");
    assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Answered with the body unread: the connection ends.
    assert_eq!(refused.headers()["connection"], "close");
    client.initialize().await;
    let (status, text) = client.post("{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("-32700"), "a JSON-RPC parse error: {text}");
    let echoed = client
        .ask(call(2, "demo__echo", json!({"message": "still here"})))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "still here");
}

/// The older transport is checked like the endpoint: a foreign `Host`
/// gets 403 before any stream opens; `max_sessions` bounds its streams;
/// `sse_path = ""` serves none.
#[tokio::test]
async fn the_older_transport_is_guarded_bounded_and_can_be_turned_off() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}[limits]\nmax_sessions = 1\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let http = reqwest::Client::new();
    let foreign = http
        .get(gateway.url("/sse"))
        .header("host", "evil.example")
        .send();
    assert_eq!(
        within("GET", foreign).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let _first = OlderClient::connect(&gateway).await;
    let second = within("GET", http.get(gateway.url("/sse")).send()).await;
    assert_eq!(second.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);

    let off = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsse_path = \"\"\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let none = within("GET", http.get(off.url("/sse")).send()).await;
    assert_eq!(none.unwrap().status(), StatusCode::NOT_FOUND);
}

/// A stream whose client never initializes gives its place back after
/// `request_read_timeout`, as a slow request does its connection.
#[tokio::test]
async fn a_stream_never_initialized_ends() {
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nrequest_read_timeout = \"500ms\"\n\n[limits]\nmax_sessions = 1\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let mut idle = OlderClient::connect(&gateway).await;
    assert_eq!(idle.events.next().await, None, "the stream ends");
    let mut next = OlderClient::connect(&gateway).await;
    next.initialize().await;
}

/// What comes before `initialize` is answered on the stream too, as the
/// older transport answers everything: a ping (allowed then), and an
/// error for a request that needs the session.
#[tokio::test]
async fn requests_before_initialize_are_answered_on_the_stream() {
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await;
    let mut client = OlderClient::connect(&gateway).await;
    let pong = client
        .ask(json!({"jsonrpc": "2.0", "id": "first", "method": "ping"}))
        .await;
    assert_eq!(pong["result"], json!({}), "{pong}");
    let early = client
        .ask(call(7, "demo__echo", json!({"message": "x"})))
        .await;
    assert_eq!(early["error"]["code"], -32600, "{early}");
    client.initialize().await;
    let echoed = client
        .ask(call(8, "demo__echo", json!({"message": "now"})))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "now");
}

/// A stream and the session it becomes hold one place under
/// `max_sessions`, shared with the MCP endpoint's sessions: the stream's
/// `initialize` takes the place its `GET` held.
#[tokio::test]
async fn a_stream_and_its_session_hold_one_place_under_max_sessions() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}[limits]\nmax_sessions = 1\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let http = reqwest::Client::new();
    let mcp_url = gateway.mcp_url();
    let initialize_at_mcp = || async {
        raw::post(&http, &mcp_url, None, raw::JSON_POST, raw::INITIALIZE)
            .await
            .status
    };
    let mut client = OlderClient::connect(&gateway).await;
    assert_eq!(initialize_at_mcp().await, StatusCode::SERVICE_UNAVAILABLE);
    client.initialize().await;
    assert_eq!(initialize_at_mcp().await, StatusCode::SERVICE_UNAVAILABLE);
    drop(client);
    eventually("the place to be given back", OP_TIMEOUT, || async {
        (initialize_at_mcp().await == StatusCode::OK).then_some(())
    })
    .await;
    let refused = within("GET", http.get(gateway.url("/sse")).send()).await;
    assert_eq!(
        refused.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the MCP endpoint's session holds the place now"
    );
}

/// `initialize`s posted at once on one stream make one session: the rest
/// are told it is initialized already.
#[tokio::test]
async fn initializes_at_once_on_one_stream_make_one_session() {
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await;
    let mut client = OlderClient::connect(&gateway).await;
    let posts = (0..4).map(|_| client.post(INITIALIZE));
    for (status, text) in futures::future::join_all(posts).await {
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    }
    let mut results = 0;
    for _ in 0..4 {
        let answer = client.events.message().await;
        results += usize::from(answer.get("result").is_some());
    }
    assert_eq!(results, 1, "one initialize answered, three refused");
    assert_eq!(downstream_sessions(&gateway).await, 1);
    drop(client);
    eventually("the session to end with its stream", OP_TIMEOUT, || async {
        (downstream_sessions(&gateway).await == 0).then_some(())
    })
    .await;
}

/// A client that posts and never reads its stream is made to wait: once
/// the answers it has not read reach their bound, its next post is held
/// unanswered, rather than its answers piling up in the gateway.
#[tokio::test]
async fn a_client_that_never_reads_is_held_not_buffered() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}[limits]\nmax_concurrent_requests = 4\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let mut client = OlderClient::connect(&gateway).await;
    client.initialize().await;
    let large = "x".repeat(200 * 1024);
    let mut held_at = None;
    for id in 0..400u64 {
        let post = client.post(call(id + 10, "demo__echo", json!({"message": large})).to_string());
        match tokio::time::timeout(std::time::Duration::from_secs(3), post).await {
            Ok((status, text)) => assert_eq!(status, StatusCode::ACCEPTED, "{text}"),
            Err(_) => {
                held_at = Some(id);
                break;
            }
        }
    }
    let held_at = held_at.expect("a post held within 400");
    // 4 in flight and 64 more, besides what the connection itself holds.
    assert!(
        held_at >= 68,
        "not before the unread answers' bound: {held_at}"
    );
}

/// An `initialize` the endpoint refuses (here for its content type) after
/// taking the stream's place leaves the stream holding a place still: a
/// second stream does not get in beyond `max_sessions`, and the first
/// initializes on its next try.
#[tokio::test]
async fn a_refused_initialize_leaves_the_stream_its_place() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}[limits]\nmax_sessions = 1\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let mut client = OlderClient::connect(&gateway).await;
    let wrong_type = client
        .http
        .post(&client.endpoint)
        .header("content-type", "text/plain")
        .body(INITIALIZE)
        .send();
    let refused = within("POST", wrong_type).await.unwrap();
    assert_eq!(refused.status(), StatusCode::ACCEPTED);
    let answer = client.events.message().await;
    assert!(answer.get("error").is_some(), "{answer}");
    let http = reqwest::Client::new();
    let second = within("GET", http.get(gateway.url("/sse")).send()).await;
    assert_eq!(second.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    client.initialize().await;
}

/// A stream that ends while its `initialize` is being answered leaves no
/// session behind: here the stream is closed for want of an `initialize`
/// while a slow post holds the way and the `initialize` waits behind it.
/// The place comes back for a new stream.
#[tokio::test]
async fn a_stream_ending_during_its_initialize_leaves_no_session() {
    use tokio::io::AsyncWriteExt;
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nrequest_read_timeout = \"1s\"\n\n\
         [limits]\nmax_sessions = 1\n\n{}",
        stdio_demo_mount("demo", "")
    ))
    .await;
    let client = OlderClient::connect(&gateway).await;
    let path = client
        .endpoint
        .split_once(&gateway.addr.to_string())
        .map(|(_, path)| path.to_owned())
        .expect("the endpoint's path");
    // A body that never arrives: it holds the way until its read times out.
    let mut slow = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{",
        gateway.addr
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, _) = client.post(INITIALIZE).await;
    assert!(
        [StatusCode::ACCEPTED, StatusCode::NOT_FOUND].contains(&status),
        "{status}"
    );
    drop(client);
    let http = reqwest::Client::new();
    eventually("a new stream to get the place", OP_TIMEOUT, || async {
        let response = http.get(gateway.url("/sse")).send().await.ok()?;
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    drop(slow);
}

/// A request still running when shutdown's grace is over gets its error
/// on the event stream before the stream ends. The stream stopped at once
/// at shutdown and dropped it now and then (in about one run of four):
/// five runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_off_at_shutdown_is_answered_on_the_stream() {
    for run in 0..5 {
        let mut gateway = Gateway::start(&format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"300ms\"\n\n{}",
            stdio_demo_mount("demo", "")
        ))
        .await;
        let mut client = OlderClient::connect(&gateway).await;
        client.initialize().await;
        let mut slow = call(2, "demo__slow", json!({"steps": 100, "delay_ms": 100}));
        slow["params"]["_meta"] = json!({"progressToken": "p"});
        let (status, text) = client.post(slow.to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
        // Running upstream once its first progress is here.
        let progress = client.events.message().await;
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &gateway.proc.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success());
        let mut answer = None;
        while let Some((_, data)) = client.events.next().await {
            let message: Value = serde_json::from_str(&data).expect("JSON");
            if message["id"] == 2 {
                answer = Some(message);
            }
        }
        let answer =
            answer.unwrap_or_else(|| panic!("run {run}: no answer before the stream ended"));
        let said = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("shutting down"), "run {run}: {answer}");
        let exited = gateway
            .proc
            .wait_exit(std::time::Duration::from_secs(20))
            .await;
        assert!(exited.success(), "run {run}: gateway exited with {exited}");
    }
}
