//! Hostile input on the MCP endpoint (issue #4): raw HTTP requests a broken
//! or malicious client can send, each answered with the status and JSON-RPC
//! error that the Streamable HTTP transport (MCP 2025-11-25) and JSON-RPC
//! 2.0 call for, while the process and every other session carry on.
//!
//! Every test starts the real binary with a real upstream (the stdio demo
//! server), opens one initialized session by hand, sends its hostile
//! request, and then checks that the session opened before still calls
//! `demo__echo` and that nothing panicked ([`Hostile::assert_unharmed`]).
//! `common::raw::post` sends every POST (with reqwest) and unframes an SSE
//! answer to the JSON-RPC response it carries; only the POST without an `Accept`
//! header is written by hand on a TCP stream, as reqwest always adds one. What an MCP
//! client library does with these answers is left to `gateway.rs`.

mod common;

use std::time::Duration;

use common::{raw::*, *};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// The implementation-defined server error a refused session gets.
const SERVER_ERROR: i64 = -32000;

/// The gateway's largest POST body (`[limits] max_body_size` default).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The `[limits] max_sessions` the limit test configures.
const MAX_SESSIONS: usize = 20;
/// Initialize requests in one flood; far more than [`MAX_SESSIONS`], far
/// fewer than the default limit.
const FLOOD: usize = 300;
/// Flood requests in flight at once.
const FLOOD_CONCURRENCY: usize = 16;

/// A gateway with one mount (`demo`, the stdio demo server) and one
/// initialized session opened before anything hostile happens.
struct Hostile {
    gateway: Gateway,
    http: reqwest::Client,
    /// The session that must survive.
    session: String,
}

impl Hostile {
    async fn start() -> Hostile {
        Hostile::start_with("").await
    }

    /// Like [`Hostile::start`], the gateway logging junction's debug lines.
    async fn start_logged() -> Hostile {
        let config = format!("{SERVER_TOML}\n{}", stdio_demo_mount("demo", ""));
        let gateway =
            Gateway::launch(&config, "toml", &[("RUST_LOG", "info,junction=debug")]).await;
        gateway.wait_ready().await;
        Hostile::with_gateway(gateway).await
    }

    /// `tables` goes between `[server]` and the mount (e.g. `[limits]`).
    async fn start_with(tables: &str) -> Hostile {
        let config = format!("{SERVER_TOML}{tables}\n{}", stdio_demo_mount("demo", ""));
        Hostile::with_gateway(Gateway::start(&config).await).await
    }

    async fn with_gateway(gateway: Gateway) -> Hostile {
        let http = reqwest::Client::new();
        let session = open_session(&http, &gateway.mcp_url()).await;
        Hostile {
            gateway,
            http,
            session,
        }
    }

    /// The head of a POST on the session, written by hand (to cut it
    /// short, or leave before the answer), for a body of `length` bytes.
    fn post_head(&self, length: usize) -> String {
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: {ACCEPT_BOTH}\r\nmcp-session-id: {session}\r\n\
             mcp-protocol-version: {VERSION}\r\ncontent-length: {length}\r\n\r\n",
            addr = self.gateway.addr,
            session = self.session,
        )
    }

    /// [`post`] to this gateway's MCP endpoint.
    async fn post(
        &self,
        session: Option<&str>,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Answer {
        post(&self.http, &self.gateway.mcp_url(), session, headers, body).await
    }

    /// A well-formed POST on the live session.
    async fn send(&self, body: impl Into<Vec<u8>>) -> Answer {
        self.post(Some(&self.session), JSON_POST, body).await
    }

    /// The live session still works, the process runs, nothing panicked.
    async fn assert_unharmed(&mut self) {
        assert_echoes(&self.http, &self.gateway.mcp_url(), &self.session).await;
        assert!(
            self.gateway.proc.exited().is_none(),
            "the gateway exited; stderr:\n{}",
            self.gateway.proc.stderr.text()
        );
        let stderr = self.gateway.proc.stderr.text();
        assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    }
}

/// A second `initialize` on a live session is refused (-32600), as the
/// reference server refuses it: it was answered as if it had started
/// over, with a different answer and its capabilities ignored. The session
/// goes on as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_initialize_on_a_session_is_refused() {
    let mut hostile = Hostile::start().await;
    let again = hostile.send(INITIALIZE).await;
    let error = &rpc_error(&again, -32600)["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| message.contains("already initialized")),
        "{again:?}"
    );
    hostile.assert_unharmed().await;
}

/// Asserts `answer` is a JSON-RPC error object with `code`; returns it.
fn rpc_error(answer: &Answer, code: i64) -> &Value {
    let body = &answer.body;
    assert_eq!(body["jsonrpc"], "2.0", "not a JSON-RPC message: {answer:?}");
    assert_eq!(body["error"]["code"], code, "{answer:?}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "error without a message: {answer:?}");
    assert!(body.get("result").is_none(), "{answer:?}");
    body
}

/// The id of `sent` if it has a valid MCP request id (string or integer).
fn readable_id(sent: &[u8]) -> Option<Value> {
    let message: Value = serde_json::from_slice(sent).ok()?;
    let id = message.get("id")?;
    (id.is_string() || id.is_i64() || id.is_u64()).then(|| id.clone())
}

/// Asserts a message refused as a whole: HTTP `status` and a JSON-RPC
/// error `code` whose id is null or absent, as JSON-RPC 2.0 (§5) and MCP
/// (2025-11-25, "Error Responses") want when the id cannot be read, or
/// else the request's own id.
fn assert_refused(answer: &Answer, sent: &[u8], status: u16, code: i64) {
    assert_eq!(answer.status.as_u16(), status, "{answer:?}");
    let body = rpc_error(answer, code);
    let id = &body["id"];
    assert!(
        id.is_null() || Some(id) == readable_id(sent).as_ref(),
        "id {id} for a refused message: {answer:?}"
    );
}

/// Sends `body` on the live session with well-formed headers; expects it
/// refused with HTTP `status` and JSON-RPC error `code`; the gateway must
/// be unharmed.
async fn check_refused(body: impl Into<Vec<u8>>, status: u16, code: i64) {
    let body = body.into();
    let mut hostile = Hostile::start().await;
    let answer = hostile.send(body.clone()).await;
    assert_refused(&answer, &body, status, code);
    hostile.assert_unharmed().await;
}

/// Sends a well-formed request `{"id": "bad", "method": method, "params":
/// params}`; expects the JSON-RPC error `code` for that request, carrying
/// its id. The transport allows either an in-band answer (200, JSON or SSE)
/// or an HTTP error whose body is that JSON-RPC error.
async fn check_request_error(method: &str, params: Value, code: i64) {
    let mut hostile = Hostile::start().await;
    let request = json!({"jsonrpc": "2.0", "id": "bad", "method": method, "params": params});
    let answer = hostile.send(request.to_string()).await;
    assert!(
        [StatusCode::OK, StatusCode::BAD_REQUEST].contains(&answer.status),
        "{answer:?}"
    );
    let body = rpc_error(&answer, code);
    assert_eq!(body["id"], "bad", "{answer:?}");
    hostile.assert_unharmed().await;
}

/// Calls `demo__echo` with the raw JSON `id`; the answer carries that id.
async fn check_id_echoed(id: &str) {
    let mut hostile = Hostile::start().await;
    let answer = hostile.send(echo_request(id, "hello")).await;
    assert_eq!(answer.status, StatusCode::OK, "id {id}: {answer:?}");
    let expected: Value = serde_json::from_str(id).expect("the id is JSON");
    assert_eq!(answer.body["id"], expected, "id {id}: {answer:?}");
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "hello",
        "id {id}: {answer:?}"
    );
    hostile.assert_unharmed().await;
}

/// Calls `demo__echo` with the raw JSON `id`, which MCP does not allow
/// ("Requests MUST include a string or integer ID", not null): 400, -32600.
async fn check_id_refused(id: &str) {
    check_refused(echo_request(id, "hello"), 400, INVALID_REQUEST).await;
}

/// POSTs a valid request with `headers` instead of the usual ones; expects
/// HTTP `status` and a body that says what to send instead (`names`).
async fn check_headers_refused(headers: &[(&str, &str)], status: u16, names: &str) {
    let mut hostile = Hostile::start().await;
    let answer = hostile
        .post(
            Some(&hostile.session),
            headers,
            echo_request("\"h\"", "hello"),
        )
        .await;
    assert_eq!(answer.status.as_u16(), status, "{headers:?}: {answer:?}");
    assert!(
        answer.text().contains(names),
        "{headers:?}: the answer does not name {names}: {answer:?}"
    );
    hostile.assert_unharmed().await;
}

// Bytes that are not one JSON text: -32700.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_a_parse_error() {
    check_refused("{not json", 400, PARSE_ERROR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_json_is_a_parse_error() {
    check_refused(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"na"#,
        400,
        PARSE_ERROR,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_body_is_a_parse_error() {
    check_refused("", 400, PARSE_ERROR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailing_bytes_are_a_parse_error() {
    check_refused(
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"} {"#,
        400,
        PARSE_ERROR,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_is_a_parse_error() {
    check_refused(&b"\xff\xfe\xfd"[..], 400, PARSE_ERROR).await;
}

/// `text` with its one `~` replaced by the raw `byte`.
fn with_raw_byte(text: &str, byte: u8) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    let at = bytes
        .iter()
        .position(|&b| b == b'~')
        .expect("a ~ to replace");
    bytes[at] = byte;
    bytes
}

/// JSON text is UTF-8 (RFC 8259 §8.1; MCP transports: messages "MUST be
/// UTF-8 encoded"), inside strings too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_string_is_a_parse_error() {
    let body = with_raw_byte(&echo_request("1", "a~b"), 0xff);
    check_refused(body, 400, PARSE_ERROR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_key_is_a_parse_error() {
    let body = with_raw_byte(
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"k~":1}}}"#,
        0xfe,
    );
    check_refused(body, 400, PARSE_ERROR).await;
}

// JSON that is not one JSON-RPC request object: -32600.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_is_an_invalid_request() {
    check_refused(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
        400,
        INVALID_REQUEST,
    )
    .await;
}

/// A client that negotiated 2025-03-26 may batch (that version's servers
/// must take batches): each message is answered as if posted alone, on
/// one stream; a notification adds nothing, an invalid message its error.
/// Later versions' sessions are refused (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_03_26_session_may_send_a_batch() {
    let mut hostile = Hostile::start().await;
    let initialize = INITIALIZE.replace("2025-11-25", "2025-03-26");
    let http = hostile.http.clone();
    let url = hostile.gateway.mcp_url();
    let session = open_session_with(&http, &url, &initialize).await;
    // A slow call streams its progress and answer; the others are quick.
    let slow = json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": {
        "name": "demo__slow", "arguments": {"steps": 2, "delay_ms": 100},
        "_meta": {"progressToken": "batched-progress"}}});
    let batch = format!(
        r#"[{}, {{"jsonrpc":"2.0","id":2,"method":"tools/list"}}, {{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}}, 5, {{"jsonrpc":"2.0","id":"p","method":"ping"}}, {slow}]"#,
        echo_request("1", "batched")
    );
    // With the version header and without it (taken as 2025-03-26).
    for version in [&[("mcp-protocol-version", "2025-03-26")][..], &[][..]] {
        let headers: Vec<(&str, &str)> = JSON_POST
            .iter()
            .copied()
            .chain([("mcp-session-id", session.as_str())])
            .chain(version.iter().copied())
            .collect();
        let answer = post(&http, &url, None, &headers, batch.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        let by_id = |id: Value| {
            answer
                .messages
                .iter()
                .find(|message| message["id"] == id)
                .unwrap_or_else(|| panic!("no answer to {id} in {answer:?}"))
                .clone()
        };
        assert_eq!(by_id(json!(1))["result"]["content"][0]["text"], "batched");
        assert!(by_id(json!(2))["result"]["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty()));
        assert_eq!(by_id(json!("p"))["result"], json!({}));
        assert_eq!(by_id(Value::Null)["error"]["code"], INVALID_REQUEST);
        assert!(by_id(json!("slow"))["result"]["content"].is_array());
        let progress = answer
            .messages
            .iter()
            .filter(|message| message["params"]["progressToken"] == "batched-progress")
            .count();
        assert_eq!(progress, 2, "{answer:?}");
        assert_eq!(
            answer.messages.len(),
            7,
            "one answer per request: {answer:?}"
        );
    }
    let notifications = r#"[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"none"}}]"#;
    let headers: Vec<(&str, &str)> = JSON_POST
        .iter()
        .copied()
        .chain([
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "2025-03-26"),
        ])
        .collect();
    let answer = post(&http, &url, None, &headers, notifications).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    hostile.assert_unharmed().await;
}

/// A batch is bounded: each message runs at once and its answer is held
/// until read, so one body could otherwise start tens of thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_longer_than_the_bound_is_refused() {
    let mut hostile = Hostile::start().await;
    let initialize = INITIALIZE.replace("2025-11-25", "2025-03-26");
    let (http, url) = (hostile.http.clone(), hostile.gateway.mcp_url());
    let session = open_session_with(&http, &url, &initialize).await;
    let ping = |n: usize| format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
    let headers: Vec<(&str, &str)> = JSON_POST
        .iter()
        .copied()
        .chain([("mcp-session-id", session.as_str())])
        .collect();
    let batch = |count: usize| format!("[{}]", (0..count).map(ping).collect::<Vec<_>>().join(","));
    let answer = post(&http, &url, None, &headers, batch(65)).await;
    assert_refused(&answer, b"", 400, INVALID_REQUEST);
    assert!(answer.text().contains("at most 64"), "{answer:?}");
    let answer = post(&http, &url, None, &headers, batch(64)).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.messages.len(), 64, "{answer:?}");
    hostile.assert_unharmed().await;
}

/// How many downstream sessions the gateway holds (`/status.json`).
async fn sessions_held(gateway: &Gateway) -> Value {
    status_json(gateway).await["downstream_sessions"].clone()
}

/// `INITIALIZE` with a client name `bytes` long.
fn padded_initialize(bytes: usize) -> String {
    INITIALIZE.replace(
        r#""name":"raw""#,
        &format!(r#""name":"{}""#, "r".repeat(bytes)),
    )
}

/// `request` as a JSON POST under an `Mcp-Session-Id` that is not text
/// (obs-text bytes), which rmcp reads as no session.
fn under_a_session_id_not_text(mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request = request.header(
        "mcp-session-id",
        reqwest::header::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
    );
    for (name, value) in JSON_POST {
        request = request.header(*name, *value);
    }
    request
}

/// `initialize` may not be batched: each would open a session whose id
/// the merged answer cannot carry, so one POST could fill `max_sessions`
/// 64 at a time with sessions nobody can end. Nor may a batch pass as a
/// session's with an `Mcp-Session-Id` that is not text, which names no
/// session (rmcp takes each such message for a new session's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_opens_no_session() {
    let mut hostile = Hostile::start().await;
    let initialize = INITIALIZE.replace("2025-11-25", "2025-03-26");
    let session = open_session_with(&hostile.http, &hostile.gateway.mcp_url(), &initialize).await;
    let before = sessions_held(&hostile.gateway).await;
    let batch = format!(
        "[{initialize}, {}]",
        initialize.replace(r#""id":1"#, r#""id":2"#)
    );
    let headers: Vec<(&str, &str)> = JSON_POST
        .iter()
        .copied()
        .chain([("mcp-session-id", session.as_str())])
        .collect();
    let answer = hostile.post(None, &headers, batch.clone()).await;
    assert_refused(&answer, b"", 400, INVALID_REQUEST);
    assert!(
        answer
            .text()
            .contains("initialize may not be sent in a batch"),
        "{answer:?}"
    );

    let request = hostile.http.post(hostile.gateway.mcp_url()).body(batch);
    let refused = within("POST", under_a_session_id_not_text(request).send())
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(refused.headers().get("mcp-session-id").is_none());
    assert_eq!(
        sessions_held(&hostile.gateway).await,
        before,
        "a batch opened sessions"
    );
    hostile.assert_unharmed().await;
}

/// An `initialize` is kept for its session's life as parsed JSON, many
/// times its size: outside a session a body may have at most 64 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_is_bounded() {
    let mut hostile = Hostile::start().await;
    let answer = hostile
        .post(None, JSON_POST, padded_initialize(66 * 1024))
        .await;
    assert_refused(&answer, b"", 413, INVALID_REQUEST);
    assert!(
        answer
            .text()
            .contains("outside a session, such as initialize"),
        "{answer:?}"
    );
    assert_eq!(answer.headers["connection"], "close", "{answer:?}");
    assert!(answer.headers.get("mcp-session-id").is_none());
    let answer = hostile
        .post(None, JSON_POST, padded_initialize(60 * 1024))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert!(answer.headers.get("mcp-session-id").is_some(), "{answer:?}");
    hostile.assert_unharmed().await;
}

/// An `Mcp-Session-Id` that is not text is refused before the body is
/// parsed (it is read and dropped): rmcp takes it for no session (a POST then opens one), while the
/// bounds on a request outside a session took it for one, and a 3 MiB
/// `initialize` opened a session holding it. (Before, such an initialize
/// at `max_sessions` had to get the limit's 503, not a 500 from a
/// factory that found no place reserved: it now reaches neither.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_that_is_not_text_is_refused_first() {
    let mut hostile = Hostile::start().await;
    let before = sessions_held(&hostile.gateway).await;
    let big = padded_initialize(3 << 20);
    // Unpooled: a POST answered before its body was read leaves its
    // connection closed, which a pooled client could pick next.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for method in [
        reqwest::Method::POST,
        reqwest::Method::GET,
        reqwest::Method::DELETE,
    ] {
        let mut request =
            under_a_session_id_not_text(http.request(method.clone(), hostile.gateway.mcp_url()));
        if method == reqwest::Method::POST {
            request = request.body(big.clone());
        }
        let answer = within("a request", request.send())
            .await
            .unwrap_or_else(|error| panic!("{method}: {error}"));
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{method}");
        assert!(answer.headers().get("mcp-session-id").is_none(), "{method}");
    }
    assert_eq!(
        sessions_held(&hostile.gateway).await,
        before,
        "a session was opened"
    );
    hostile.assert_unharmed().await;
}

/// The gateway's peak resident memory, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// A large body for a session that does not exist is answered 404 without
/// being parsed: parsed, such a body takes many times its size, and
/// anyone may post to made-up sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_posts_to_made_up_sessions_cost_no_memory() {
    let mut hostile = Hostile::start().await;
    let pid = hostile.gateway.proc.pid();
    let zeros = "0,".repeat(1_900_000);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"a":[{zeros}0]}}}}}}"#
    );
    assert!(body.len() > 3_500_000 && body.len() < 4 * 1024 * 1024);
    let before = peak_rss_kib(pid);
    let answers = futures::future::join_all((0..8).map(|n| {
        let session = format!("made-up-{n}");
        let (http, url, body) = (
            hostile.http.clone(),
            hostile.gateway.mcp_url(),
            body.clone(),
        );
        async move { post(&http, &url, Some(&session), JSON_POST, body).await }
    }))
    .await;
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    }
    let grown_mib = peak_rss_kib(pid).saturating_sub(before) / 1024;
    // Parsed, each would take some 50 MiB; read whole, 4.
    assert!(grown_mib < 24, "peak memory grew by {grown_mib} MiB");
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_batch_is_an_invalid_request() {
    check_refused("[]", 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn number_is_an_invalid_request() {
    check_refused("5", 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_is_an_invalid_request() {
    check_refused(r#""ping""#, 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_is_an_invalid_request() {
    check_refused("null", 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boolean_is_an_invalid_request() {
    check_refused("true", 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_object_is_an_invalid_request() {
    check_refused("{}", 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_jsonrpc_version_is_an_invalid_request() {
    check_refused(
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        400,
        INVALID_REQUEST,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_jsonrpc_version_is_an_invalid_request() {
    check_refused(r#"{"id":1,"method":"ping"}"#, 400, INVALID_REQUEST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_that_is_not_a_string_is_an_invalid_request() {
    check_refused(
        r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
        400,
        INVALID_REQUEST,
    )
    .await;
}

/// JSON-RPC 2.0 §4.2: `params` MUST be a structured value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_that_are_not_structured_are_an_invalid_request() {
    check_refused(
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#,
        400,
        INVALID_REQUEST,
    )
    .await;
}

// Sizes and depths.

/// 100 000 nested arrays (200 KB, well under the size limit) inside
/// `params`: refused with a JSON-RPC error, no stack overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_is_refused_and_survived() {
    const DEPTH: usize = 100_000;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"message":"deep","x":{}{}}}}}}}"#,
        "[".repeat(DEPTH),
        "]".repeat(DEPTH),
    );
    let mut hostile = Hostile::start().await;
    let answer = hostile.send(body.clone()).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let code = answer.body["error"]["code"].as_i64();
    assert!(
        code == Some(PARSE_ERROR) || code == Some(INVALID_REQUEST),
        "{answer:?}"
    );
    assert_refused(&answer, body.as_bytes(), 400, code.unwrap_or_default());
    hostile.assert_unharmed().await;
}

/// POSTs a `demo__echo` request whose body is `size` bytes over the limit,
/// `tries` times; every answer is a 413 with a JSON-RPC error, never a
/// connection torn down before the client could read it.
async fn check_too_large(size: usize, tries: usize) {
    let body = echo_request("1", &"x".repeat(MAX_BODY_BYTES + size));
    let mut hostile = Hostile::start().await;
    for _ in 0..tries {
        let answer = hostile.send(body.clone()).await;
        assert_eq!(
            answer.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{:?} {}",
            answer.headers,
            answer.text().chars().take(200).collect::<String>()
        );
        rpc_error(&answer, INVALID_REQUEST);
        assert!(answer.body["id"].is_null(), "{answer:?}");
        // The rest of the body is left unread: the connection ends.
        assert_eq!(answer.headers["connection"], "close", "{answer:?}");
    }
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_just_over_the_limit_is_too_large() {
    check_too_large(1024, 1).await;
}

/// RFC 9112 §9.6: a server that answers before reading the whole body must
/// keep reading for a while before it closes, or the client's TCP stack
/// gets a reset and loses the answer. One try passes by luck often enough;
/// twenty in a row do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_far_over_the_limit_is_too_large_every_time() {
    check_too_large(MAX_BODY_BYTES, 20).await;
}

// Headers: Content-Type (HTTP: 415) and Accept (HTTP: 406). The transport
// spec leaves the body to the server ("MAY comprise a JSON-RPC error"); it
// must at least say what to send.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_plain_content_type_is_unsupported() {
    check_headers_refused(
        &[("content-type", "text/plain"), ("accept", ACCEPT_BOTH)],
        415,
        "application/json",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_content_type_is_unsupported() {
    check_headers_refused(&[("accept", ACCEPT_BOTH)], 415, "application/json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_content_type_with_charset_is_accepted() {
    let mut hostile = Hostile::start().await;
    let headers = [
        ("content-type", "application/json; charset=utf-8"),
        ("accept", ACCEPT_BOTH),
    ];
    let answer = hostile
        .post(Some(&hostile.session), &headers, echo_request("2", "hi"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "hi",
        "{answer:?}"
    );
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_json_only_is_not_acceptable() {
    check_headers_refused(
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ],
        406,
        "text/event-stream",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_event_stream_only_is_not_acceptable() {
    check_headers_refused(
        &[
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ],
        406,
        "application/json",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_html_is_not_acceptable() {
    check_headers_refused(
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
        406,
        "text/event-stream",
    )
    .await;
}

/// reqwest always sends an `Accept`, so this one is written by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_accept_is_not_acceptable() {
    let mut hostile = Hostile::start().await;
    let body = echo_request("3", "hello");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         mcp-session-id: {session}\r\nmcp-protocol-version: {VERSION}\r\n\
         content-length: {length}\r\nconnection: close\r\n\r\n{body}",
        addr = hostile.gateway.addr,
        session = hostile.session,
        length = body.len(),
    );
    let answer = within("a POST without Accept", async {
        let mut stream = tokio::net::TcpStream::connect(hostile.gateway.addr)
            .await
            .expect("connect");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write the request");
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .expect("read the answer");
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await;
    let status_line = answer.lines().next().unwrap_or_default();
    assert!(status_line.contains(" 406 "), "{answer}");
    assert!(answer.contains("text/event-stream"), "{answer}");
    hostile.assert_unharmed().await;
}

// Request ids. MCP (2025-11-25, "Requests"): a string or an integer, never
// null; the answer carries the same id.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_id_is_echoed() {
    check_id_echoed(r#""req-ü-1""#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_string_id_is_echoed() {
    check_id_echoed(r#""""#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_id_is_echoed() {
    check_id_echoed("7").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_id_is_echoed() {
    check_id_echoed("-42").await;
}

/// 2^53 + 1: not representable as an f64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_integer_id_is_echoed() {
    check_id_echoed("9007199254740993").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i64_max_id_is_echoed() {
    check_id_echoed("9223372036854775807").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i64_min_id_is_echoed() {
    check_id_echoed("-9223372036854775808").await;
}

/// u64::MAX is a valid integer id; a server that cannot hold it may refuse
/// it as an invalid request, but must answer in JSON-RPC either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_beyond_i64_is_echoed_or_refused() {
    let id = "18446744073709551615";
    let body = echo_request(id, "hello");
    let mut hostile = Hostile::start().await;
    let answer = hostile.send(body.clone()).await;
    if answer.status == StatusCode::OK {
        assert_eq!(answer.body["id"], json!(u64::MAX), "{answer:?}");
        assert_eq!(answer.body["result"]["content"][0]["text"], "hello");
    } else {
        assert_refused(&answer, b"{}", 400, INVALID_REQUEST);
    }
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fractional_id_is_an_invalid_request() {
    check_id_refused("1.5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_id_is_an_invalid_request() {
    check_id_refused("null").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_id_is_an_invalid_request() {
    check_id_refused(r#"{"a":1}"#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_id_is_an_invalid_request() {
    check_id_refused("[1]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boolean_id_is_an_invalid_request() {
    check_id_refused("true").await;
}

// Methods and params on a valid session.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_is_method_not_found() {
    check_request_error("no/such/method", json!({}), METHOD_NOT_FOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_notification_is_accepted() {
    let mut hostile = Hostile::start().await;
    let answer = hostile
        .send(r#"{"jsonrpc":"2.0","method":"notifications/no_such_thing","params":{"x":1}}"#)
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    assert_eq!(answer.text(), "", "202 has no body: {answer:?}");
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_that_are_a_number_are_invalid_params() {
    check_request_error(
        "tools/call",
        json!({"name": "demo__echo", "arguments": 5}),
        INVALID_PARAMS,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_that_are_an_array_are_invalid_params() {
    check_request_error(
        "tools/call",
        json!({"name": "demo__echo", "arguments": ["hello"]}),
        INVALID_PARAMS,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_name_that_is_a_number_is_invalid_params() {
    check_request_error("tools/call", json!({"name": 5}), INVALID_PARAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_without_a_name_is_invalid_params() {
    check_request_error("tools/call", json!({}), INVALID_PARAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_uri_that_is_a_number_is_invalid_params() {
    check_request_error("resources/read", json!({"uri": 5}), INVALID_PARAMS).await;
}

// Task methods (2025-11-25) naming no task of this session.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_task_is_invalid_params() {
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        check_request_error(method, json!({"taskId": "demo/nope"}), INVALID_PARAMS).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_id_that_is_missing_or_a_number_is_invalid_params() {
    check_request_error("tasks/result", json!({}), INVALID_PARAMS).await;
    check_request_error("tasks/get", json!({"taskId": 5}), INVALID_PARAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_list_cursor_that_is_not_ours_is_invalid_params() {
    check_request_error(
        "tasks/list",
        json!({"cursor": "not-a-cursor"}),
        INVALID_PARAMS,
    )
    .await;
}

// Session ids (transport spec, "Session Management").

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_is_not_found() {
    let mut hostile = Hostile::start().await;
    let answer = hostile
        .post(
            Some("no-such-session"),
            JSON_POST,
            echo_request("1", "hello"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    hostile.assert_unharmed().await;
}

/// A body the gateway refuses before rmcp's session check (bad params for
/// a known method, bytes that are not JSON) still gets the 404 that tells
/// the client its session is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_with_a_refused_body_is_not_found() {
    let mut hostile = Hostile::start().await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"#,
    ] {
        let answer = hostile.post(Some("no-such-session"), JSON_POST, body).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{body}: {answer:?}");
    }
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_session_id_is_not_found() {
    let mut hostile = Hostile::start().await;
    let session = "s".repeat(4096);
    let answer = hostile
        .post(Some(&session), JSON_POST, echo_request("1", "hello"))
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    hostile.assert_unharmed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_session_is_a_bad_request() {
    let mut hostile = Hostile::start().await;
    let answer = hostile
        .post(
            None,
            JSON_POST,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        )
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert!(
        answer.text().to_lowercase().contains("session"),
        "the answer does not say a session is needed: {answer:?}"
    );
    hostile.assert_unharmed().await;
}

/// A request whose `_meta` names its version and capabilities (2026-07-28's
/// stateless lifecycle, which rmcp serves on a handler made for it alone)
/// is refused with or without a session id: served, it escaped every
/// session limit and state. The gateway speaks versions up to 2025-11-25.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_outside_any_session_is_refused() {
    let mut hostile = Hostile::start().await;
    let request = json!({
        "jsonrpc": "2.0", "id": "stateless", "method": "tools/call",
        "params": {
            "name": "demo__echo", "arguments": {"message": "escaped"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2025-11-25",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
    .to_string();
    let live = hostile.session.clone();
    let headers = [JSON_POST, &[("mcp-protocol-version", "2025-11-25")]].concat();
    for (session, headers) in [(None, &headers[..]), (Some(live.as_str()), JSON_POST)] {
        let answer = hostile.post(session, headers, request.clone()).await;
        assert!(
            [StatusCode::OK, StatusCode::BAD_REQUEST].contains(&answer.status),
            "{answer:?}"
        );
        let body = rpc_error(&answer, INVALID_REQUEST);
        assert_eq!(body["id"], "stateless", "{answer:?}");
        assert!(answer.text().contains("outside a session"), "{answer:?}");
    }
    hostile.assert_unharmed().await;
}

// Session floods.

/// Sends [`FLOOD`] `initialize` requests, [`FLOOD_CONCURRENCY`] at a time;
/// returns the session ids created and the other answers.
async fn flood(hostile: &Hostile) -> (Vec<String>, Vec<Answer>) {
    let url = hostile.gateway.mcp_url();
    let answers: Vec<Answer> = futures::stream::iter(0..FLOOD)
        .map(|_| post(&hostile.http, &url, None, JSON_POST, INITIALIZE))
        .buffer_unordered(FLOOD_CONCURRENCY)
        .collect()
        .await;
    let mut sessions = Vec::new();
    let mut refused = Vec::new();
    for answer in answers {
        match answer.session_id() {
            Some(session) if answer.status == StatusCode::OK => sessions.push(session),
            _ => refused.push(answer),
        }
    }
    (sessions, refused)
}

/// A session beyond `max_sessions`: 503 with a JSON-RPC error naming the
/// limit, and no session id.
fn assert_session_refused(answer: &Answer) {
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert!(answer.session_id().is_none(), "{answer:?}");
    let body = rpc_error(answer, SERVER_ERROR);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    let message = message.to_lowercase();
    assert!(
        message.contains("session") && message.contains("limit"),
        "the error does not name the session limit: {answer:?}"
    );
    assert!(
        body["id"].is_null() || body["id"] == 1,
        "id of the refused initialize: {answer:?}"
    );
}

async fn delete_session(hostile: &Hostile, session: &str) {
    let response = within(
        "DELETE",
        hostile
            .http
            .delete(hostile.gateway.mcp_url())
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .send(),
    )
    .await
    .unwrap_or_else(|error| panic!("DELETE failed: {error}"));
    assert!(
        response.status().is_success(),
        "DELETE: {}",
        response.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_flood_within_the_default_limit_is_served() {
    let mut hostile = Hostile::start().await;
    let (sessions, refused) = flood(&hostile).await;
    assert!(refused.is_empty(), "refused: {:?}", refused.first());
    assert_eq!(sessions.len(), FLOOD);
    let url = hostile.gateway.mcp_url();
    let last = sessions.last().expect("a session");
    let answer = post(&hostile.http, &url, Some(last), JSON_POST, INITIALIZED).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    assert_echoes(&hostile.http, &url, last).await;
    hostile.assert_unharmed().await;
}

/// `[limits] max_sessions`: creations beyond it get 503 and a JSON-RPC
/// error; the sessions that exist keep working; a DELETE frees a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_flood_beyond_max_sessions_is_refused() {
    let limits = format!("[limits]\nmax_sessions = {MAX_SESSIONS}\n");
    let mut hostile = Hostile::start_with(&limits).await;
    let (sessions, refused) = flood(&hostile).await;
    // The live session holds one slot.
    assert_eq!(
        sessions.len(),
        MAX_SESSIONS - 1,
        "sessions created with max_sessions = {MAX_SESSIONS} and one open"
    );
    assert_eq!(refused.len(), FLOOD - (MAX_SESSIONS - 1));
    for answer in &refused {
        assert_session_refused(answer);
    }
    hostile.assert_unharmed().await;

    // A session created by the flood works like any other.
    let url = hostile.gateway.mcp_url();
    let flooded = &sessions[0];
    let answer = post(&hostile.http, &url, Some(flooded), JSON_POST, INITIALIZED).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    assert_echoes(&hostile.http, &url, flooded).await;

    // A DELETE frees exactly one slot.
    delete_session(&hostile, flooded).await;
    let session = eventually("a slot after DELETE", Duration::from_secs(5), || async {
        let answer = post(&hostile.http, &url, None, JSON_POST, INITIALIZE).await;
        (answer.status == StatusCode::OK)
            .then(|| answer.session_id())
            .flatten()
    })
    .await;
    let answer = post(&hostile.http, &url, Some(&session), JSON_POST, INITIALIZED).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    assert_echoes(&hostile.http, &url, &session).await;
    let answer = post(&hostile.http, &url, None, JSON_POST, INITIALIZE).await;
    assert_session_refused(&answer);
    // Anything but an `initialize` without a session is a 400 at the
    // limit too (the session id is missing), not a 503 with a Retry-After
    // that has a client retry what can never succeed.
    let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}"#;
    let answer = post(&hostile.http, &url, None, JSON_POST, call).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    hostile.assert_unharmed().await;
}

/// A POST without a session whose body has not arrived holds no session
/// place (it did, for up to `request_read_timeout`: a few such sockets
/// locked new sessions out), and one whose body is refused gets its 400
/// even when the gateway is full, not a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_still_arriving_holds_no_session_place() {
    // The live session takes one place of two.
    let mut hostile = Hostile::start_with("[limits]\nmax_sessions = 2\n").await;
    let mut trickling = tokio::net::TcpStream::connect(hostile.gateway.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {length}\r\n\r\n{{",
        addr = hostile.gateway.addr,
        length = INITIALIZE.len(),
    );
    trickling
        .write_all(head.as_bytes())
        .await
        .expect("write the head and one byte");
    // Nothing tells when the gateway has read the head; on loopback it has
    // by the time a new connection's request is read (were it not, the
    // test would pass without showing anything, never fail wrongly).
    let url = hostile.gateway.mcp_url();
    let second = open_session(&hostile.http, &url).await;
    assert_echoes(&hostile.http, &url, &second).await;
    // Full now: a body that is not JSON is still told so.
    let answer = post(&hostile.http, &url, None, JSON_POST, "{not json").await;
    assert_refused(&answer, b"{not json", 400, PARSE_ERROR);
    let answer = post(&hostile.http, &url, None, JSON_POST, INITIALIZE).await;
    assert_session_refused(&answer);
    drop(trickling);
    hostile.assert_unharmed().await;
}

// Slow and silent clients ([server] request_read_timeout): a request's head,
// then its body, must arrive within it, and a connection idle that long
// between requests is closed; without a deadline such clients hold a
// socket and a task each for ever (slowloris).

/// The `request_read_timeout` the slow-client tests configure.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

async fn slow_client_gateway() -> Hostile {
    let mut hostile = Hostile::start_with(&format!(
        "request_read_timeout = \"{}ms\"\n",
        READ_TIMEOUT.as_millis()
    ))
    .await;
    // The gateway closes this client's idle connections too, as the
    // `Hostile` checks reuse one: the closing and a reuse could cross.
    hostile.http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a reqwest client");
    hostile
}

/// Reads `stream` until the gateway closes it (EOF or reset), for at most
/// 10 s; returns what it sent and how long that took.
async fn read_until_closed(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> (String, Duration) {
    let started = std::time::Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    within("the gateway to close the connection", async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => received.extend_from_slice(&buffer[..read]),
            }
        }
    })
    .await;
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

async fn connect_to(hostile: &Hostile) -> tokio::net::TcpStream {
    within(
        "connect",
        tokio::net::TcpStream::connect(hostile.gateway.addr),
    )
    .await
    .expect("connect to the gateway")
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_read_timeout() {
    let mut hostile = slow_client_gateway().await;
    let mut silent = connect_to(&hostile).await;
    let (received, after) = read_until_closed(&mut silent).await;
    assert_eq!(received, "", "nothing to answer");
    assert!(after >= READ_TIMEOUT / 2, "closed after {after:?}");
    hostile.assert_unharmed().await;
}

#[tokio::test]
async fn a_connection_idle_after_a_request_is_closed_at_the_read_timeout() {
    let mut hostile = slow_client_gateway().await;
    let mut idle = connect_to(&hostile).await;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n",
        hostile.gateway.addr
    );
    idle.write_all(request.as_bytes())
        .await
        .expect("write the request");
    let (received, _) = read_until_closed(&mut idle).await;
    assert!(received.starts_with("HTTP/1.1 200 "), "{received}");
    assert!(
        received.ends_with("ok\n"),
        "answered, then closed: {received}"
    );
    hostile.assert_unharmed().await;
}

#[tokio::test]
async fn a_request_head_sent_a_byte_at_a_time_is_cut_off() {
    let mut hostile = slow_client_gateway().await;
    let mut trickle = connect_to(&hostile).await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\nx-padding: ",
        hostile.gateway.addr
    );
    trickle
        .write_all(head.as_bytes())
        .await
        .expect("write the start of the head");
    let (mut reader, mut writer) = trickle.into_split();
    // One byte every 100 ms, each well within the deadline, never the end
    // of the head, for longer than the reader waits: only a deadline on
    // the whole head stops it.
    let writing = tokio::spawn(async move {
        for _ in 0..(OP_TIMEOUT.as_millis() / 100 + 50) {
            if writer.write_all(b"a").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Held open until the test ends: a close would end the head too.
        std::future::pending::<()>().await;
    });
    let (received, _) = read_until_closed(&mut reader).await;
    writing.abort();
    assert!(
        received.is_empty() || received.starts_with("HTTP/1.1 408 "),
        "{received}"
    );
    hostile.assert_unharmed().await;
}

#[tokio::test]
async fn a_body_sent_too_slowly_is_a_request_timeout() {
    let mut hostile = slow_client_gateway().await;
    let mut slow = connect_to(&hostile).await;
    let body = echo_request("7", "slowly");
    let head = hostile.post_head(body.len());
    slow.write_all(head.as_bytes())
        .await
        .expect("write the head");
    slow.write_all(&body.as_bytes()[..10])
        .await
        .expect("write the start of the body");
    let (received, after) = read_until_closed(&mut slow).await;
    assert!(after >= READ_TIMEOUT / 2, "answered after {after:?}");
    assert!(received.starts_with("HTTP/1.1 408 "), "{received}");
    assert!(
        received
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{received}"
    );
    let json = received.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: Value = serde_json::from_str(json).expect("a JSON body");
    assert_eq!(answer["error"]["code"], INVALID_REQUEST, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("request_read_timeout"), "{answer}");
    hostile.assert_unharmed().await;
}

/// A request refused for its params that names no session (and is no
/// `initialize`) gets the 400 for the missing session first, as any other
/// request without one: a 200 with -32602 had the client fix its params
/// and send them without a session again. An `initialize` refused for its
/// params gets its -32602.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_params_without_a_session_are_a_missing_session_first() {
    let mut hostile = Hostile::start().await;
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__echo","arguments":5}}"#;
    let answer = hostile.post(None, JSON_POST, call).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let initialize =
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}}"#;
    let answer = hostile.post(None, JSON_POST, initialize).await;
    assert_refused(&answer, initialize.as_bytes(), 200, INVALID_PARAMS);
    hostile.assert_unharmed().await;
}

/// A request racing its session's `DELETE` (sent on another connection
/// just after it) gets an answer for a session that ended (404, or its
/// call's error), never a 500 whose text names the session: rmcp checks
/// the session, then hands it the request, and a `DELETE` between the two
/// failed the second step with `Session not found: <the session id>`.
/// The first call to a per-session mount is the widest window (it opens
/// the upstream, here one that takes 0.2 s to start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_racing_its_sessions_delete_gets_no_internal_error() {
    let slow_start = format!("sleep 0.2; exec {BIN} demo-server");
    let config = format!(
        "{SERVER_TOML}[mounts.own]\ncommand = \"sh\"\nargs = [\"-c\", {slow_start:?}]\nisolation = \"per_session\"\n"
    );
    let gateway = Gateway::start(&config).await;
    let (poster, deleter) = (reqwest::Client::new(), reqwest::Client::new());
    let url = gateway.mcp_url();
    for round in 0..12u64 {
        let session = open_session(&poster, &url).await;
        // Both connections open and warm: the race is between requests.
        let ping = r#"{"jsonrpc":"2.0","id":"w","method":"ping"}"#;
        post(&poster, &url, Some(&session), JSON_POST, ping).await;
        post(&deleter, &url, Some(&session), JSON_POST, ping).await;
        let call = json!({"jsonrpc": "2.0", "id": round, "method": "tools/call",
                          "params": {"name": "own__echo", "arguments": {"message": "x"}}});
        let posted = async {
            within(
                "the racing POST",
                poster
                    .post(&url)
                    .header("mcp-session-id", &session)
                    .header("accept", "application/json, text/event-stream")
                    .header("content-type", "application/json")
                    .body(call.to_string())
                    .send(),
            )
            .await
            .expect("the racing POST")
        };
        let deleted = async {
            tokio::time::sleep(Duration::from_millis(round * 10)).await;
            within(
                "DELETE",
                deleter
                    .delete(&url)
                    .header("mcp-session-id", &session)
                    .send(),
            )
            .await
            .expect("DELETE")
        };
        let (posted, _) = tokio::join!(posted, deleted);
        let status = posted.status();
        let text = within("the answer", posted.text())
            .await
            .unwrap_or_default();
        assert_ne!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "round {round}: {text}"
        );
        assert!(!text.contains(&session), "round {round}: {status} {text}");
    }
}

/// A request id used again while the request that has it is in flight on
/// the session is refused (-32600), and the first request still gets its
/// answer: the second took its place in the routing of answers, and the
/// first's stream stayed open, unanswered, for good. The refused request
/// never runs upstream (it did: a quick call was answered, a slower one
/// ran on after its refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_in_use_is_refused_and_the_first_request_answered() {
    let mut hostile = Hostile::start().await;
    let slow = |steps: u32| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "demo__slow", "arguments": {"steps": steps, "delay_ms": 100},
                          "_meta": {"progressToken": "p"}}})
        .to_string()
    };
    // The first is read as it streams: the second goes once the first's
    // progress shows it in flight.
    let mut first = JSON_POST
        .iter()
        .fold(
            hostile
                .http
                .post(hostile.gateway.mcp_url())
                .header("mcp-session-id", &hostile.session),
            |request, (name, value)| request.header(*name, *value),
        )
        .body(slow(10))
        .send()
        .await
        .expect("the first call")
        .bytes_stream();
    let mut streamed = String::new();
    within("the first call's progress", async {
        while !streamed.contains("notifications/progress") {
            let chunk = first
                .next()
                .await
                .expect("more of the stream")
                .expect("a chunk");
            streamed.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    let second = hostile.send(slow(1)).await;
    let counter = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "demo__counter", "arguments": {}}})
        .to_string()
    };
    let second_quick = hostile.send(counter(1)).await;
    within("the first call's answer", async {
        while let Some(chunk) = first.next().await {
            streamed.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
        }
    })
    .await;
    let first = sse_response(&streamed);
    assert_eq!(
        first["result"]["content"][0]["text"], "done after 10 steps",
        "{streamed}"
    );
    let error = &rpc_error(&second, INVALID_REQUEST)["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| message.contains("already in use")),
        "{second:?}"
    );
    assert_eq!(second.body["id"], 1, "{second:?}");
    rpc_error(&second_quick, INVALID_REQUEST);
    let counted = hostile.send(counter(2)).await;
    assert_eq!(
        counted.body["result"]["content"][0]["text"], "1",
        "the refused call counted: {counted:?}"
    );
    // Once answered, the id is free again.
    let again = hostile.send(slow(1)).await;
    assert_eq!(
        again.body["result"]["content"][0]["text"], "done after 1 steps",
        "{again:?}"
    );
    hostile.assert_unharmed().await;
}

/// The Host check reads a request as HTTP/1.1 says (RFC 9112 §3.2): two
/// `Host` lines are refused (400) whichever comes first (the first one
/// decided), and an absolute-form target's authority is the one checked
/// (`Host` decided).
#[tokio::test]
async fn hosts_are_checked_as_http_1_1_reads_them() {
    let mut hostile = Hostile::start().await;
    let addr = hostile.gateway.addr;
    let allowed = format!("127.0.0.1:{}", addr.port());
    let exchange = |target: String, hosts: Vec<String>| async move {
        let mut stream = within("connect", tokio::net::TcpStream::connect(addr))
            .await
            .expect("connect to the gateway");
        let host_lines: String = hosts
            .iter()
            .map(|host| format!("host: {host}\r\n"))
            .collect();
        let request = format!(
            "POST {target} HTTP/1.1\r\n{host_lines}content-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nconnection: close\r\n\
             content-length: {}\r\n\r\n{INITIALIZE}",
            INITIALIZE.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write the request");
        read_until_closed(&mut stream).await.0
    };
    for hosts in [
        vec![allowed.clone(), "evil.example".to_owned()],
        vec!["evil.example".to_owned(), allowed.clone()],
    ] {
        let answer = exchange("/mcp".to_owned(), hosts.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{hosts:?}: {answer}");
    }
    let answer = exchange("http://evil.example/mcp".to_owned(), vec![allowed.clone()]).await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    let answer = exchange(format!("http://{allowed}/mcp"), vec![allowed.clone()]).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    hostile.assert_unharmed().await;
}

/// A request refused for its `Host` or `Origin` is answered before its
/// body is read: the answer says the connection ends with it.
#[tokio::test]
async fn a_host_or_origin_refusal_ends_its_connection() {
    let hostile = Hostile::start().await;
    let post = |header: &'static str, value: &'static str| {
        hostile
            .http
            .post(hostile.gateway.mcp_url())
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .header(header, value)
            .body("x".repeat(50_000))
            .send()
    };
    for (header, value) in [("origin", "http://evil.example"), ("host", "evil.example")] {
        let refused = within("POST", post(header, value))
            .await
            .expect("an answer");
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{header}");
        assert_eq!(refused.headers()["connection"], "close", "{header}");
    }
}

/// The same when the second request comes while the first still waits on
/// the quick path (its first 20 ms): the first holds its id from the
/// start. The second was answered then, its tool run. Each round sends
/// the first, then 2 ms later the second with its id; a second that
/// overtook the first on its way in is answered, and counted (the
/// counter says how many ran), and the first is then the one refused:
/// either refusal shows an id held from its request's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_in_use_from_the_start_is_refused() {
    let mut hostile = Hostile::start().await;
    const ROUNDS: u64 = 5;
    let mut refused = 0;
    let mut ran = 0;
    for round in 0..ROUNDS {
        let id = 100 + round;
        let slow = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "demo__slow", "arguments": {"steps": 3, "delay_ms": 100}}})
        .to_string();
        let first = {
            let (http, url, session) = (
                hostile.http.clone(),
                hostile.gateway.mcp_url(),
                hostile.session.clone(),
            );
            tokio::spawn(async move { post(&http, &url, Some(&session), JSON_POST, slow).await })
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        let counter = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                             "params": {"name": "demo__counter", "arguments": {}}})
        .to_string();
        let second = hostile.send(counter).await;
        let first = within("the first call", first)
            .await
            .expect("the first call");
        if first.body.get("error").is_some() {
            // The second overtook the first on its way in and took the
            // id: the first is the one refused, and the second ran.
            rpc_error(&first, INVALID_REQUEST);
            assert!(
                second.body.get("error").is_none(),
                "both refused: {second:?}"
            );
            ran += 1;
            refused += 1;
            continue;
        }
        assert_eq!(
            first.body["result"]["content"][0]["text"], "done after 3 steps",
            "{first:?}"
        );
        match second.body.get("error") {
            Some(_) => {
                rpc_error(&second, INVALID_REQUEST);
                refused += 1;
            }
            None => ran += 1,
        }
    }
    assert!(
        refused > 0,
        "no request was refused for an id in use in {ROUNDS} rounds"
    );
    let count = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "demo__counter", "arguments": {}}})
    .to_string();
    let counted = hostile.send(count).await;
    assert_eq!(
        counted.body["result"]["content"][0]["text"],
        (ran + 1).to_string(),
        "a refused call ran: {counted:?}"
    );
    hostile.assert_unharmed().await;
}

/// A call whose client went away while it waited on the quick path runs
/// on, and holds its id meanwhile: a client retrying the request with
/// the same id (its connection dropped) is refused, not run twice. The
/// id was given back with the connection.
///
/// The client must leave after the gateway started the call: a request
/// the gateway reads only once its client has gone is dropped by hyper
/// unstarted (nothing runs, nothing holds the id). Only the gateway's
/// debug line says which happened, so each attempt has an id of its own
/// and one whose call never started is tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_left_holds_its_id_until_it_ends() {
    let mut hostile = Hostile::start_logged().await;
    // Calls take the quick path only once the session layer knows the
    // session (after rmcp handled `initialized`).
    let mcp = hostile.gateway.mcp_url();
    wait_until_calls_are_quick(&hostile.http, &mcp, &hostile.session, "demo__echo").await;
    let counter = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "demo__counter", "arguments": {}}})
        .to_string()
    };
    for attempt in 0..10u64 {
        let id = 11 + attempt;
        let slow = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "demo__slow", "arguments": {"steps": 3, "delay_ms": 300}}})
        .to_string();
        let mut gone = connect_to(&hostile).await;
        let request = format!("{}{slow}", hostile.post_head(slow.len()));
        gone.write_all(request.as_bytes())
            .await
            .expect("write the call");
        tokio::time::sleep(Duration::from_millis(3)).await;
        drop(gone);
        let walked_away = format!("id=Number({id})");
        let left = poll_until(Duration::from_secs(2), || async {
            hostile
                .gateway
                .proc
                .stderr
                .snapshot()
                .iter()
                .any(|line| {
                    line.contains("the client went away before a quick answer")
                        && line.contains(&walked_away)
                })
                .then_some(())
        })
        .await
        .is_some();
        if !left {
            eprintln!("attempt {attempt}: the call never started before its client left");
            continue;
        }
        let retried = hostile.send(counter(id)).await;
        rpc_error(&retried, INVALID_REQUEST);
        // Once the first has ended, the id is free; the refused one never ran.
        let counted = eventually("the first call to end", OP_TIMEOUT, || async {
            let answer = hostile.send(counter(id)).await;
            answer.body.get("result").is_some().then_some(answer)
        })
        .await;
        assert_eq!(
            counted.body["result"]["content"][0]["text"], "1",
            "a refused call ran: {counted:?}"
        );
        hostile.assert_unharmed().await;
        return;
    }
    panic!("the client never left a started call in 10 tries");
}
