//! Raw MCP over HTTP for the tests that check what goes on the wire
//! (statuses, headers, JSON-RPC framing), where an MCP client library would
//! hide it: one [`post`] that sends a POST as given and unframes an SSE
//! answer to the JSON-RPC response it carries, and a session opened by hand.

use reqwest::{
    header::{HeaderMap, CONTENT_TYPE},
    StatusCode,
};
use serde_json::{json, Value};

use super::within;

/// The protocol version raw sessions negotiate and then send.
pub const VERSION: &str = "2025-11-25";
/// What a POST must accept (transport spec, "Sending Messages").
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// The headers of a well-formed POST.
pub const JSON_POST: &[(&str, &str)] = &[
    ("content-type", "application/json"),
    ("accept", ACCEPT_BOTH),
];

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// What the gateway answered to one POST.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// A JSON body as is; the JSON-RPC response inside an SSE body; any
    /// other body as a JSON string (empty if there was none).
    pub body: Value,
    /// Every JSON-RPC message of an SSE body, in order (notifications
    /// included); the JSON body alone otherwise.
    pub messages: Vec<Value>,
}

impl Answer {
    pub fn session_id(&self) -> Option<String> {
        let value = self.headers.get("mcp-session-id")?;
        Some(value.to_str().expect("ASCII session id").to_owned())
    }

    /// The text of a tool result's first content block.
    pub fn tool_text(&self) -> Option<&str> {
        self.body["result"]["content"][0]["text"].as_str()
    }

    /// The pid a demo server's (or fixture's) `pid` tool answered.
    pub fn tool_pid(&self) -> u32 {
        self.tool_text()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("a pid: {self:?}"))
    }

    /// The body as text, for answers that are not JSON.
    pub fn text(&self) -> String {
        match &self.body {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

/// POSTs `body` as [`post`] does, and returns whatever text arrived,
/// empty if the stream was cut before its end (a session ended under the
/// request): for tests about what may or may not reach the client.
pub async fn post_reading_what_arrives(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    body: impl Into<Vec<u8>>,
) -> String {
    let mut request = http
        .post(url)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", VERSION)
        .body(body.into());
    for (name, value) in JSON_POST {
        request = request.header(*name, *value);
    }
    let response = within("POST", request.send())
        .await
        .unwrap_or_else(|error| panic!("POST failed: {error:?}"));
    within("reading the answer", response.text())
        .await
        .unwrap_or_default()
}

/// POSTs `body` to `url` with exactly `headers` (reqwest adds `accept: */*`
/// when none is given) plus, with a session, its id and protocol version.
pub async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Answer {
    let mut request = http.post(url).body(body.into());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION);
    }
    let response = within("POST", request.send())
        .await
        .unwrap_or_else(|error| panic!("POST failed: {error:?}"));
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = within("reading the answer", response.bytes())
        .await
        .unwrap_or_else(|error| panic!("reading the answer to a POST ({status}): {error}"));
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let (body, messages) = if content_type.starts_with("text/event-stream") {
        (sse_response(&text), sse_messages(&text))
    } else if content_type.starts_with("application/json") {
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("{status} with a bad JSON body {text:?}: {error}"));
        (body.clone(), vec![body])
    } else {
        (Value::String(text), Vec::new())
    };
    Answer {
        status,
        headers,
        body,
        messages,
    }
}

/// The JSON-RPC response an SSE body carries: each event's `data` lines
/// joined, priming events (empty data) skipped, the first message with a
/// `result` or an `error`.
pub fn sse_response(text: &str) -> Value {
    sse_messages(text)
        .into_iter()
        .find(|message| message.get("result").is_some() || message.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in the SSE body {text:?}"))
}

/// Every JSON-RPC message of an SSE body, in order: each event's `data`
/// lines joined, priming events (empty data) skipped.
pub fn sse_messages(text: &str) -> Vec<Value> {
    let text = text.replace("\r\n", "\n");
    text.split("\n\n")
        .map(|event| {
            event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|data| !data.trim().is_empty())
        .map(|data| {
            serde_json::from_str::<Value>(&data)
                .unwrap_or_else(|error| panic!("SSE data is not JSON {data:?}: {error}"))
        })
        .collect()
}

/// DELETEs `session` (with the protocol version header); its status.
pub async fn delete_session(http: &reqwest::Client, url: &str, session: &str) -> StatusCode {
    let request = http
        .delete(url)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", VERSION);
    within("DELETE", request.send())
        .await
        .unwrap_or_else(|error| panic!("DELETE failed: {error}"))
        .status()
}

/// `initialize`, then `notifications/initialized`; returns the session id.
pub async fn open_session(http: &reqwest::Client, url: &str) -> String {
    open_session_with(http, url, INITIALIZE).await
}

/// [`open_session`] with this `initialize` request (id 1).
pub async fn open_session_with(http: &reqwest::Client, url: &str, initialize: &str) -> String {
    let answer = post(http, url, None, JSON_POST, initialize.to_owned()).await;
    assert_eq!(answer.status, StatusCode::OK, "initialize: {answer:?}");
    assert_eq!(answer.body["id"], 1, "initialize: {answer:?}");
    assert!(
        answer.body.get("result").is_some(),
        "initialize: {answer:?}"
    );
    let session = answer
        .session_id()
        .unwrap_or_else(|| panic!("initialize gave no session id: {answer:?}"));
    let answer = post(http, url, Some(&session), JSON_POST, INITIALIZED).await;
    assert_eq!(
        answer.status,
        StatusCode::ACCEPTED,
        "initialized: {answer:?}"
    );
    session
}

/// A `tools/call demo__echo` request with the raw JSON `id`.
pub fn echo_request(id: &str, message: &str) -> String {
    let request = json!({
        "jsonrpc": "2.0",
        "id": "ID",
        "method": "tools/call",
        "params": {"name": "demo__echo", "arguments": {"message": message}},
    });
    request.to_string().replacen("\"ID\"", id, 1)
}

/// `session` answers a `demo__echo` call with its own id and text.
pub async fn assert_echoes(http: &reqwest::Client, url: &str, session: &str) {
    let request = echo_request("\"unharmed\"", "still here");
    let answer = post(http, url, Some(session), JSON_POST, request).await;
    assert_eq!(answer.status, StatusCode::OK, "echo: {answer:?}");
    assert_eq!(answer.body["id"], "unharmed", "echo: {answer:?}");
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "still here",
        "echo: {answer:?}"
    );
}

/// Waits until `session`'s calls of `echo` (an echo tool) are answered
/// before rmcp's handler (`downstream/quick_call.rs`), as a plain JSON
/// answer: the session layer knows a session only once rmcp has handled
/// its `initialized`, which it does after answering it.
pub async fn wait_until_calls_are_quick(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    echo: &str,
) {
    super::eventually(
        "a quick call",
        std::time::Duration::from_secs(10),
        || async {
            let request = echo_request("\"q\"", "quick").replace("demo__echo", echo);
            let answer = post(http, url, Some(session), JSON_POST, request).await;
            assert_eq!(
                answer.body["result"]["content"][0]["text"], "quick",
                "{answer:?}"
            );
            (answer.headers[CONTENT_TYPE] == "application/json").then_some(())
        },
    )
    .await;
}

/// A `reqwest` client that sends `Authorization: authorization` on every
/// request, as an MCP client holding its own token does.
pub fn client_with_token(authorization: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        authorization.parse().expect("a header value"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// `tool`'s text answer to a call in `session`.
pub async fn tool_text(http: &reqwest::Client, url: &str, session: &str, tool: &str) -> String {
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}});
    let answer = post(http, url, Some(session), JSON_POST, call.to_string()).await;
    answer
        .tool_text()
        .unwrap_or_else(|| panic!("{tool}: {answer:?}"))
        .to_owned()
}
