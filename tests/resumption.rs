//! Downstream Streamable HTTP resumption (issue #3): a client whose SSE
//! stream drops reconnects with `GET` + `Last-Event-ID` and gets the rest of
//! *that* stream — the messages after the last event it read, the response
//! to its request included — and nothing that belongs to another stream.
//!
//! What the MCP 2025-11-25 transport spec says ("Resumability and
//! Redelivery", "Sending Messages to the Server", "Multiple Connections"):
//! - event ids are unique across all streams of a session and identify the
//!   stream they belong to;
//! - the client resumes with `GET` and `Last-Event-ID: <the last id it
//!   received>`; the server replays "messages that would have been sent
//!   after the last event ID, on the stream that was disconnected" and MUST
//!   NOT replay messages that would have been delivered on a different
//!   stream;
//! - disconnection is not a cancel; each message goes on one stream only;
//! - a POST stream starts with a priming event (an id, empty data) and a
//!   `retry` the client MUST wait before reconnecting.
//!
//! Every test starts the real binary with the stdio demo server mounted as
//! `demo`, talks raw HTTP with reqwest and reads SSE bodies chunk by chunk
//! ([`SseReader`]), so a test can stop reading and drop the connection in
//! the middle of a stream. Every wait is bounded.
//!
//! rmcp 3.11's session manager alone repeats the event `Last-Event-ID`
//! names and forgets a request's stream once its response is sent; the
//! gateway's `http/resumable/` fixes both, and the tests here hold it to
//! that: nothing is repeated, and a response produced while the client was
//! away is still delivered when it comes back.

mod common;

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use common::{
    raw::{open_session, ACCEPT_BOTH, VERSION},
    *,
};
use reqwest::{header::CONTENT_TYPE, StatusCode};
use serde_json::{json, Value};

const EVENT_STREAM: &str = "text/event-stream";

/// How long a stream that should end (or stay quiet) is watched.
const QUIET: Duration = Duration::from_secs(3);

/// One dispatched SSE event (WHATWG "event stream interpretation"):
/// comment-only blocks (keep-alives) are not events and never show up here.
#[derive(Debug, Clone)]
struct SseEvent {
    id: Option<String>,
    /// The `data` lines joined with `\n`; empty for a priming event.
    data: String,
    retry: Option<u64>,
}

impl SseEvent {
    /// The JSON-RPC message the event carries, if it carries data.
    fn message(&self) -> Option<Value> {
        if self.data.trim().is_empty() {
            return None;
        }
        Some(
            serde_json::from_str(&self.data)
                .unwrap_or_else(|error| panic!("SSE data is not JSON {:?}: {error}", self.data)),
        )
    }
}

/// What one bounded read of a stream gave.
#[derive(Debug)]
enum Read {
    Event(SseEvent),
    /// The server ended the body.
    End,
    /// Nothing more arrived before the deadline.
    Idle,
}

/// An SSE response body read incrementally; dropping it drops the
/// connection (an unfinished body is never returned to reqwest's pool).
struct SseReader {
    what: String,
    response: reqwest::Response,
    buffer: Vec<u8>,
    ended: bool,
}

impl SseReader {
    /// Wraps a response that must be a `200 text/event-stream`.
    fn new(what: &str, response: reqwest::Response) -> SseReader {
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{what}: {:?}",
            response.headers()
        );
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        assert!(
            content_type.starts_with(EVENT_STREAM),
            "{what}: content-type {content_type:?}"
        );
        SseReader {
            what: what.to_owned(),
            response,
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event, the end of the body, or [`Read::Idle`] at `deadline`.
    async fn next(&mut self, deadline: Instant) -> Read {
        loop {
            if let Some(event) = self.take_event() {
                return Read::Event(event);
            }
            if self.ended {
                // A last block without its blank line is not dispatched.
                return Read::End;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Err(_) => return Read::Idle,
                Ok(Ok(Some(bytes))) => {
                    // JSON text never holds a raw CR, so dropping every CR
                    // turns CRLF line ends into LF ones.
                    self.buffer
                        .extend(bytes.iter().copied().filter(|&byte| byte != b'\r'));
                }
                Ok(Ok(None)) => self.ended = true,
                Ok(Err(error)) => panic!("{}: reading the body failed: {error}", self.what),
            }
        }
    }

    /// The next event that must arrive before `deadline`.
    async fn expect_event(&mut self, deadline: Instant) -> SseEvent {
        match self.next(deadline).await {
            Read::Event(event) => event,
            other => panic!("{}: expected an event, got {other:?}", self.what),
        }
    }

    /// Every event until the body ends; panics if it is still open at
    /// `deadline`.
    async fn until_end(&mut self, deadline: Instant) -> Vec<SseEvent> {
        let mut events = Vec::new();
        loop {
            match self.next(deadline).await {
                Read::Event(event) => events.push(event),
                Read::End => return events,
                Read::Idle => panic!(
                    "{}: still open at the deadline after {events:#?}",
                    self.what
                ),
            }
        }
    }

    /// Every event until the body ends or `deadline`, whichever is first.
    async fn until_end_or(&mut self, deadline: Instant) -> (Vec<SseEvent>, bool) {
        let mut events = Vec::new();
        loop {
            match self.next(deadline).await {
                Read::Event(event) => events.push(event),
                Read::End => return (events, true),
                Read::Idle => return (events, false),
            }
        }
    }

    /// Cuts the first complete event out of the buffer, skipping blocks
    /// that hold only comments (keep-alives).
    fn take_event(&mut self) -> Option<SseEvent> {
        loop {
            let at = self.buffer.windows(2).position(|pair| pair == b"\n\n")?;
            let block: Vec<u8> = self.buffer.drain(..at + 2).collect();
            let block = String::from_utf8(block)
                .unwrap_or_else(|error| panic!("{}: SSE block is not UTF-8: {error}", self.what));
            let mut event = SseEvent {
                id: None,
                data: String::new(),
                retry: None,
            };
            let mut data_lines = Vec::new();
            let mut dispatch = false;
            for line in block.lines() {
                if line.is_empty() || line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => event.id = Some(value.to_owned()),
                    "data" => data_lines.push(value.to_owned()),
                    "retry" => event.retry = value.parse().ok(),
                    _ => {}
                }
                dispatch = true;
            }
            if dispatch {
                event.data = data_lines.join("\n");
                return Some(event);
            }
        }
    }
}

/// The raw requests of one gateway session.
struct Session {
    gateway: Gateway,
    http: reqwest::Client,
    id: String,
}

impl Session {
    /// A gateway with the stdio demo mounted as `demo` and one initialized
    /// session on it.
    async fn start() -> Session {
        Session::start_with("").await
    }

    /// [`Session::start`] with `mounts` (TOML) mounted beside `demo`.
    async fn start_with(mounts: &str) -> Session {
        let config = format!("{SERVER_TOML}{}{mounts}", stdio_demo_mount("demo", ""));
        let gateway = Gateway::start(&config).await;
        let http = reqwest::Client::new();
        let id = open_session(&http, &gateway.mcp_url()).await;
        Session { gateway, http, id }
    }

    /// A session on a gateway whose idle sessions sleep after 200 ms.
    async fn start_sleepy() -> Session {
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nsession_hibernate_after = \"200ms\"\n\n{}",
            stdio_demo_mount("demo", "")
        );
        let gateway = Gateway::start(&config).await;
        let http = reqwest::Client::new();
        let id = open_session(&http, &gateway.mcp_url()).await;
        Session { gateway, http, id }
    }

    /// Another initialized session on the same gateway.
    async fn other(&self) -> String {
        open_session(&self.http, &self.gateway.mcp_url()).await
    }

    /// POSTs a request on this session; its answer must be an SSE stream.
    async fn post_stream(&self, what: &str, request: &Value) -> SseReader {
        SseReader::new(what, self.post(what, request).await)
    }

    /// POSTs a request on this session and reads its answer to the end: an
    /// SSE stream's events, or a JSON answer (a quick call's) as one event
    /// without an id.
    async fn post_answer(&self, what: &str, request: &Value) -> Vec<SseEvent> {
        self.post_answer_as(&self.id, what, request).await
    }

    /// [`Session::post_answer`] on another session of the same gateway.
    async fn post_answer_as(&self, session: &str, what: &str, request: &Value) -> Vec<SseEvent> {
        let response = self.post_as(session, what, request).await;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
        if !is_json {
            let mut stream = SseReader::new(what, response);
            return stream.until_end(Instant::now() + OP_TIMEOUT).await;
        }
        assert_eq!(response.status(), StatusCode::OK, "{what}");
        let data = within(what, response.text())
            .await
            .unwrap_or_else(|error| panic!("{what}: reading the answer failed: {error}"));
        vec![SseEvent {
            id: None,
            data,
            retry: None,
        }]
    }

    async fn post(&self, what: &str, request: &Value) -> reqwest::Response {
        self.post_as(&self.id, what, request).await
    }

    /// [`Session::post`] on another session of the same gateway.
    async fn post_as(&self, session: &str, what: &str, request: &Value) -> reqwest::Response {
        within(
            what,
            self.http
                .post(self.gateway.mcp_url())
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", VERSION)
                .body(request.to_string())
                .send(),
        )
        .await
        .unwrap_or_else(|error| panic!("{what}: POST failed: {error}"))
    }

    /// `GET` the endpoint for `session` with `Last-Event-ID` (none when
    /// `last_event_id` is `None`).
    async fn get(&self, session: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = self
            .http
            .get(self.gateway.mcp_url())
            .header("accept", EVENT_STREAM)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        within("GET", request.send())
            .await
            .unwrap_or_else(|error| panic!("GET (Last-Event-ID {last_event_id:?}) failed: {error}"))
    }

    /// Resumes this session's stream after `last_event_id`.
    async fn resume(&self, last_event_id: &str) -> SseReader {
        let response = self.get(&self.id, Some(last_event_id)).await;
        SseReader::new(&format!("resume after {last_event_id:?}"), response)
    }

    /// Calls `name` under request id `id`, its answer read to its end.
    async fn call(&self, id: &str, name: &str, arguments: Value) -> Vec<SseEvent> {
        let request = tool_call(id, name, arguments);
        self.post_answer(&format!("{name} ({id})"), &request).await
    }

    /// Calls `demo__toggle_bonus`, which makes the gateway announce
    /// `tools/list_changed` on the session's `GET` stream.
    async fn toggle_bonus(&self, id: &str) {
        let events = self.call(id, "demo__toggle_bonus", json!({})).await;
        assert_eq!(sort_out(&events).responses.len(), 1, "{id}: {events:#?}");
    }

    /// The session still answers a call on a new POST, with its own id.
    async fn assert_working(&self) {
        let events = self
            .call("still-here", "demo__echo", json!({"message": "still here"}))
            .await;
        let responses: Vec<Value> = events
            .iter()
            .filter_map(SseEvent::message)
            .filter(is_response)
            .collect();
        assert_eq!(responses.len(), 1, "echo: {events:#?}");
        assert_eq!(responses[0]["id"], "still-here", "echo: {events:#?}");
        assert_eq!(
            responses[0]["result"]["content"][0]["text"], "still here",
            "echo: {events:#?}"
        );
        let stderr = self.gateway.proc.stderr.text();
        assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    }
}

/// A `tools/call` request of `name` under request id `id`.
fn tool_call(id: &str, name: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    })
}

/// A `tools/call demo__slow` request asking for progress under `token`.
fn slow_call(id: &str, token: &str, steps: u32, delay_ms: u64) -> Value {
    let mut request = tool_call(
        id,
        "demo__slow",
        json!({"steps": steps, "delay_ms": delay_ms}),
    );
    request["params"]["_meta"] = json!({"progressToken": token});
    request
}

/// The ids of `ids` that are also in `others`.
fn ids_in_both<'a>(ids: &'a [String], others: &HashSet<&String>) -> Vec<&'a String> {
    ids.iter().filter(|id| others.contains(id)).collect()
}

fn is_response(message: &Value) -> bool {
    message.get("result").is_some() || message.get("error").is_some()
}

/// `(token, progress)` of a progress notification.
fn progress_of(message: &Value) -> Option<(String, u64)> {
    if message["method"] != "notifications/progress" {
        return None;
    }
    let token = message["params"]["progressToken"].as_str()?.to_owned();
    let progress = message["params"]["progress"].as_f64()?;
    Some((token, progress as u64))
}

/// What one stream carried, sorted out.
#[derive(Debug, Default)]
struct Carried {
    /// `(token, progress)` of each progress notification, in order.
    progress: Vec<(String, u64)>,
    /// Each response or error, in order.
    responses: Vec<Value>,
    /// Any other message.
    others: Vec<Value>,
    /// The id of every event, in order.
    ids: Vec<String>,
    /// Events with data but no id (the client could not resume after them).
    without_id: Vec<SseEvent>,
}

fn sort_out(events: &[SseEvent]) -> Carried {
    let mut carried = Carried::default();
    for event in events {
        if let Some(id) = &event.id {
            carried.ids.push(id.clone());
        }
        let Some(message) = event.message() else {
            continue;
        };
        if event.id.is_none() {
            carried.without_id.push(event.clone());
        }
        if let Some(progress) = progress_of(&message) {
            carried.progress.push(progress);
        } else if is_response(&message) {
            carried.responses.push(message);
        } else {
            carried.others.push(message);
        }
    }
    carried
}

/// `1..=n` under `token`, for comparing with [`Carried::progress`].
fn steps(token: &str, range: std::ops::RangeInclusive<u64>) -> Vec<(String, u64)> {
    range.map(|step| (token.to_owned(), step)).collect()
}

/// Reads a fresh POST stream up to and including its `count`-th progress
/// notification (priming event included), checking each event on the way.
async fn read_progress(stream: &mut SseReader, token: &str, count: u64) -> Vec<SseEvent> {
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut read = Vec::new();
    let mut seen = 0;
    while seen < count {
        let event = stream.expect_event(deadline).await;
        assert!(
            event.id.is_some(),
            "{}: an event without an id: {event:?}",
            stream.what
        );
        if let Some(message) = event.message() {
            assert_eq!(
                progress_of(&message),
                Some((token.to_owned(), seen + 1)),
                "{}: expected progress {} first: {event:?}",
                stream.what,
                seen + 1
            );
            seen += 1;
        }
        read.push(event);
    }
    read
}

/// The id of the last event read, for `Last-Event-ID`.
fn last_id(read: &[SseEvent]) -> String {
    read.last()
        .and_then(|event| event.id.clone())
        .expect("events with ids were read")
}

/// The one response of a stream: for request `id`, a `demo__slow` result
/// after `steps` steps.
fn assert_slow_response(carried: &Carried, id: &str, steps: u32, what: &str) {
    assert_eq!(
        carried.responses.len(),
        1,
        "{what}: expected exactly the response to {id:?}: {carried:#?}"
    );
    let response = &carried.responses[0];
    assert_eq!(response["id"], id, "{what}: {carried:#?}");
    assert_eq!(
        response["result"]["content"][0]["text"],
        format!("done after {steps} steps"),
        "{what}: {carried:#?}"
    );
}

/// Two slow calls on one session, each on its own POST stream; A's stream
/// drops and is resumed: only A's events and A's response arrive there,
/// and B's POST stream still carries all of B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_replays_only_the_stream_that_dropped() {
    let session = Session::start().await;
    let mut stream_a = session
        .post_stream("call A", &slow_call("call-a", "tok-a", 6, 200))
        .await;
    let mut stream_b = session
        .post_stream("call B", &slow_call("call-b", "tok-b", 8, 200))
        .await;
    let reading_b =
        tokio::spawn(async move { stream_b.until_end(Instant::now() + OP_TIMEOUT).await });

    let read_a = read_progress(&mut stream_a, "tok-a", 1).await;
    let last_a = last_id(&read_a);
    drop(stream_a);
    let mut resumed = session.resume(&last_a).await;
    let events_a = resumed.until_end(Instant::now() + OP_TIMEOUT).await;
    let events_b = within("B's stream", reading_b)
        .await
        .expect("B's reader panicked");
    eprintln!(
        "A before the drop: {read_a:#?}\nA resumed after {last_a:?}: {events_a:#?}\nB: {events_b:#?}"
    );
    let resumed_a = sort_out(&events_a);
    let b = sort_out(&events_b);

    // Nothing of B on A's resumed stream.
    assert!(
        resumed_a.progress.iter().all(|(token, _)| token == "tok-a"),
        "B's progress on A's resumed stream: {events_a:#?}"
    );
    assert!(
        resumed_a.responses.iter().all(|r| r["id"] == "call-a"),
        "another response on A's resumed stream: {events_a:#?}"
    );
    let shared = ids_in_both(&resumed_a.ids, &b.ids.iter().collect());
    assert!(
        shared.is_empty(),
        "event ids {shared:?} appear on both A's resumed stream and B's stream"
    );
    assert!(
        b.others.is_empty() && resumed_a.others.is_empty(),
        "unexpected messages: A {resumed_a:#?}, B {b:#?}"
    );
    // A's response on A's resumed stream.
    assert_slow_response(&resumed_a, "call-a", 6, "A's resumed stream");
    // All of B, on B's own stream.
    assert_eq!(
        b.progress,
        steps("tok-b", 1..=8),
        "B's stream: {events_b:#?}"
    );
    assert_slow_response(&b, "call-b", 8, "B's stream");
    // All of A's rest, strictly after the last event read: nothing read
    // before the drop comes again.
    let read_ids = read_a.iter().filter_map(|e| e.id.as_ref()).collect();
    let repeated = ids_in_both(&resumed_a.ids, &read_ids);
    assert!(
        repeated.is_empty(),
        "A's resumed stream repeats events read before the drop (ids {repeated:?}): \
         read {read_a:#?}, resumed after {last_a:?}: {events_a:#?}"
    );
    assert_eq!(
        resumed_a.progress,
        steps("tok-a", 2..=6),
        "A's resumed stream should carry A's progress 2..=6: {events_a:#?}"
    );
    session.assert_working().await;
}

/// `Last-Event-ID`s that name no stream of this session — malformed, an
/// unknown stream, another session's stream — get a clear answer (an HTTP
/// client error, an SSE stream that ends without a message, or a fresh
/// stream that carries nothing of the running call), never the messages of
/// a call that is running on its own POST stream; that call and the
/// session carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_last_event_id_gets_nothing_of_other_streams() {
    let session = Session::start().await;
    let mut stream_b = session
        .post_stream("call B", &slow_call("call-b", "tok-b", 5, 200))
        .await;
    // B's priming event names B's stream.
    let priming_b = stream_b.expect_event(Instant::now() + OP_TIMEOUT).await;
    let id_b = priming_b.id.clone().expect("B's priming event has an id");
    let reading_b =
        tokio::spawn(async move { stream_b.until_end(Instant::now() + OP_TIMEOUT).await });

    let other_session = session.other().await;
    // (session, Last-Event-ID, why)
    let unknown_stream = format!("0/{}", u64::MAX);
    let attempts: Vec<(&str, &str, &str)> = vec![
        (&session.id, "not-an-event-id", "malformed"),
        (&session.id, "", "empty"),
        (&session.id, "1/not-a-number", "malformed stream part"),
        (&session.id, "-3", "negative"),
        (&session.id, &unknown_stream, "unknown stream"),
        (&session.id, "7", "an index on no stream"),
        (&other_session, &id_b, "B's stream, from another session"),
    ];
    let mut watching = Vec::new();
    for (on, last_event_id, why) in attempts {
        let response = session.get(on, Some(last_event_id)).await;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let what = format!("{why} (Last-Event-ID {last_event_id:?})");
        if status.is_client_error() {
            eprintln!("{what}: {status}");
            continue;
        }
        assert!(
            status == StatusCode::OK && content_type.starts_with(EVENT_STREAM),
            "{what}: neither a client error nor an SSE stream: {status} {content_type:?}"
        );
        let mut stream = SseReader::new(&what, response);
        watching.push(tokio::spawn(async move {
            // Watched until B is surely over (B takes about a second).
            let (events, ended) = stream.until_end_or(Instant::now() + QUIET).await;
            (what, events, ended)
        }));
    }

    let events_b = within("B's stream", reading_b)
        .await
        .expect("B's reader panicked");
    let b = sort_out(&events_b);
    assert_eq!(
        b.progress,
        steps("tok-b", 1..=5),
        "B's stream: {events_b:#?}"
    );
    assert_slow_response(&b, "call-b", 5, "B's stream");
    for watch in watching {
        let (what, events, ended) = within("a resume attempt", watch)
            .await
            .expect("a watcher panicked");
        eprintln!(
            "{what}: 200 SSE, {} after {events:?}",
            if ended { "ended" } else { "still open" }
        );
        let carried = sort_out(&events);
        assert!(
            carried.progress.is_empty() && carried.responses.is_empty(),
            "{what}: delivered messages of another stream: {events:#?}"
        );
    }
    session.assert_working().await;
    // A plain GET still opens the stream for unsolicited messages.
    let mut plain = SseReader::new("plain GET", session.get(&session.id, None).await);
    let first = plain.expect_event(Instant::now() + OP_TIMEOUT).await;
    assert!(first.message().is_none(), "plain GET: {first:?}");
}

/// A resume of a stream that cannot be resumed is refused, not answered
/// with an empty stream: a client takes an empty stream for one to open
/// again (the TypeScript SDK, resuming after an error answer it took for
/// none, then opened a second `GET` stream, and the two cut each other
/// off every 3 s). One of the session's streams that has ended gets 405
/// (the TypeScript SDK resumes every call its user cancels, and reported
/// a 400 as an error, twice; it stops quietly at a 405); any other id
/// 400, so does a `GET`-stream id no stream gave out yet, which rmcp
/// answered with such a stream. An unknown session still gets 404; the
/// `GET` stream can be resumed by an id it gave out, or its priming `0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_of_a_stream_that_cannot_be_resumed_is_refused() {
    let session = Session::start().await;
    let events = session
        .post_answer(
            "a call answered on its stream",
            &slow_call("c", "tok", 2, 50),
        )
        .await;
    let answered = last_id(&events);
    let other = session.other().await;
    let unknown = format!("0/{}", u64::MAX);
    let future = u64::MAX.to_string();
    let ended = session.get(&session.id, Some(&answered)).await;
    assert_eq!(
        ended.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "a stream read to its answer"
    );
    assert!(
        ended.headers().contains_key(reqwest::header::ALLOW),
        "a 405 says what is allowed"
    );
    for (on, last_event_id, why) in [
        (&session.id, unknown.as_str(), "an unknown stream"),
        (&session.id, "not-an-event-id", "no id of the gateway's"),
        (&other, answered.as_str(), "another session's stream"),
        (&session.id, "5", "a GET-stream id not given out yet"),
        (&session.id, &future, "a GET-stream id from far off"),
    ] {
        let response = session.get(on, Some(last_event_id)).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{why} (Last-Event-ID {last_event_id:?})"
        );
    }
    // Bytes past ASCII are allowed in a header value but are in no id the
    // gateway gives out: refused too, not taken for no id at all.
    let not_ascii = session
        .http
        .get(session.gateway.mcp_url())
        .header("accept", EVENT_STREAM)
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", VERSION)
        .header(
            "last-event-id",
            reqwest::header::HeaderValue::from_bytes("0/\u{e9}".as_bytes()).unwrap(),
        );
    let response = within("GET", not_ascii.send()).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::BAD_REQUEST,
        "a Last-Event-ID that is not ASCII"
    );
    let response = session.get("no-such-session", Some(&answered)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let standalone = session.get(&session.id, Some("0")).await;
    assert_eq!(standalone.status(), StatusCode::OK);
    let content_type = standalone.headers().get(CONTENT_TYPE).cloned();
    assert!(
        content_type.is_some_and(|value| value.as_bytes().starts_with(EVENT_STREAM.as_bytes())),
        "the GET stream resumed"
    );
    drop(standalone);
    session.assert_working().await;
}

/// A request stream's number (in its event ids, `<index>/<stream>`)
/// counts that session's streams only: numbers counted across sessions
/// told every client how much the gateway sent the others (black-box
/// helper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_numbers_count_one_sessions_streams_only() {
    let session = Session::start().await;
    let stream_number = |events: &[SseEvent]| -> u64 {
        let id = last_id(events);
        let (_, stream) = id.split_once('/').expect("an id <index>/<stream>");
        stream.parse().expect("a stream number")
    };
    let call = |id: &str| slow_call(id, &format!("tok-{id}"), 1, 1);
    let first = stream_number(&session.post_answer("A's first", &call("a1")).await);
    let other = session.other().await;
    for n in 0..5 {
        let id = format!("b{n}");
        let events = session.post_answer_as(&other, "B's call", &call(&id)).await;
        assert!(!events.is_empty(), "B's call {n} answered");
    }
    let second = stream_number(&session.post_answer("A's second", &call("a2")).await);
    assert_eq!(second, first + 1, "A's streams are numbered apart from B's");
}

/// The count of `demo` tool calls answered `ok`, from `/metrics`.
async fn calls_answered(session: &Session) -> u64 {
    calls_answered_on(session, "demo").await
}

/// The count of `mount`'s tool calls answered `ok`, from `/metrics`.
async fn calls_answered_on(session: &Session, mount: &str) -> u64 {
    let metrics = within(
        "GET /metrics",
        session.http.get(session.gateway.url("/metrics")).send(),
    )
    .await
    .expect("GET /metrics")
    .text()
    .await
    .expect("metrics body");
    let series =
        format!(r#"junction_requests_total{{mount="{mount}",method="tools/call",outcome="ok"}} "#);
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0, |count| count.trim().parse().expect("a counter value"))
}

/// The client drops a call's stream after the first progress and comes
/// back only after the gateway answered the call: the resume still carries
/// the rest of the progress and the response, and can be repeated (the
/// client may drop the resumed stream too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_sent_while_the_client_was_away_is_resumed() {
    let session = Session::start().await;
    let mut stream = session
        .post_stream("call C", &slow_call("call-c", "tok-c", 3, 50))
        .await;
    let read = read_progress(&mut stream, "tok-c", 1).await;
    let last = last_id(&read);
    drop(stream);
    // Answered by the gateway while nobody reads the stream.
    eventually("the call to be answered", OP_TIMEOUT, || async {
        (calls_answered(&session).await >= 1).then_some(())
    })
    .await;

    for attempt in 1..=2 {
        let mut resumed = session.resume(&last).await;
        let events = resumed.until_end(Instant::now() + OP_TIMEOUT).await;
        eprintln!("resume {attempt} after {last:?}: {events:#?}");
        let carried = sort_out(&events);
        assert_eq!(
            carried.progress,
            steps("tok-c", 2..=3),
            "resume {attempt}: {events:#?}"
        );
        assert_slow_response(&carried, "call-c", 3, &format!("resume {attempt}"));
        assert!(
            !carried.ids.contains(&last),
            "resume {attempt} repeats {last:?}: {events:#?}"
        );
        assert!(carried.without_id.is_empty(), "{events:#?}");
    }
    session.assert_working().await;
}

/// The client resumes a call's stream while its old connection is still
/// open, unread, with far more of the stream than the sockets hold (a
/// network that dropped without the server noticing): the resume carries
/// the rest and the response at once. The old connection's writer, stuck
/// on its full socket, read no more of the stream, so the rest waited for
/// TCP to give up on that connection, many minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_is_not_held_back_by_the_stuck_connection_it_replaces() {
    const COUNT: u64 = 60;
    let session =
        Session::start_with(&python_fixture_mount("flood", "flood_progress.py", "")).await;
    let mut request = tool_call(
        "call-f",
        "flood__flood",
        json!({"count": COUNT, "size": 1024 * 1024}),
    );
    request["params"]["_meta"] = json!({"progressToken": "tok-f"});
    let mut stream = session.post_stream("call F", &request).await;
    let read = read_progress(&mut stream, "tok-f", 1).await;
    let last = last_id(&read);
    // Answered upstream and by the gateway while nobody reads the stream,
    // whose connection stays open.
    // 60 MB through a debug build on a shared machine: a generous bound.
    let bound = Duration::from_secs(90);
    eventually("the call to be answered", bound, || async {
        (calls_answered_on(&session, "flood").await >= 1).then_some(())
    })
    .await;

    let mut resumed = session.resume(&last).await;
    let events = resumed.until_end(Instant::now() + bound).await;
    let carried = sort_out(&events);
    assert_eq!(carried.progress, steps("tok-f", 2..=COUNT));
    assert_eq!(carried.responses.len(), 1, "{:?}", carried.responses);
    assert_eq!(carried.responses[0]["id"], "call-f");
    drop(stream);
    session.assert_working().await;
}

/// The stream for unsolicited messages (`GET`) resumes strictly after the
/// last id read too, and its ids never repeat the priming event's. The
/// client resumes while the server still holds the old connection open (as
/// when the network dropped and the server has not noticed yet): the old
/// stream is ended and the resumed one carries the messages, instead of
/// rmcp's keep-alive-only "shadow" stream that would never carry one. The
/// messages are `tools/list_changed`, which `demo__toggle_bonus` causes and
/// which belong to no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_stream_resumes_after_the_last_id() {
    let session = Session::start().await;
    let mut standalone = SseReader::new("GET", session.get(&session.id, None).await);
    let priming = standalone.expect_event(Instant::now() + OP_TIMEOUT).await;
    assert!(priming.message().is_none(), "priming: {priming:?}");

    // Each toggle changes three lists, announced in no fixed order; all
    // three arrive before the next toggle.
    session.toggle_bonus("toggle-1").await;
    let first = expect_list_changes(&mut standalone).await;
    session.toggle_bonus("toggle-2").await;
    let second = expect_list_changes(&mut standalone).await;
    let ids: Vec<String> = std::iter::once(&priming)
        .chain(&first)
        .chain(&second)
        .map(|e| e.id.clone().expect("an id"))
        .collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        7,
        "event ids repeat: {ids:?}"
    );

    // Resumed after the first toggle's last message: the second toggle's,
    // and nothing before them.
    let mut resumed = session.resume(&ids[3]).await;
    let again = expect_list_changes(&mut resumed).await;
    let again_ids: Vec<_> = again.iter().map(|e| e.id.clone()).collect();
    let second_ids: Vec<_> = second.iter().map(|e| e.id.clone()).collect();
    assert_eq!(again_ids, second_ids);
    // The old stream is over, with nothing more on it.
    let (left, ended) = standalone.until_end_or(Instant::now() + OP_TIMEOUT).await;
    assert!(
        ended && left.is_empty(),
        "old stream: ended {ended}, {left:#?}"
    );
    // And the resumed one is the live stream.
    session.toggle_bonus("toggle-3").await;
    let third = expect_list_changes(&mut resumed).await;
    for event in &third {
        assert!(
            !ids.contains(event.id.as_ref().expect("an id")),
            "{event:?}"
        );
    }
    session.assert_working().await;
}

/// A `GET` stream resumed after more messages than rmcp keeps (64) were
/// sent to nobody gets every one of them: rmcp replayed its latest and the
/// ones before were lost (without a word, before the gateway said so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_resumed_after_many_messages_gets_them_all() {
    assert_resumed_with_all_it_missed(OldStream::Dropped).await;
}

/// So does one whose old connection the server still writes to (a
/// client whose network dropped): what was given out to that connection
/// and never reached the client was replayed only as far as rmcp keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_resumed_from_a_lingering_connection_gets_all_it_missed() {
    assert_resumed_with_all_it_missed(OldStream::Lingers).await;
}

/// A `GET` stream left as `old` says while 40 toggles (120 messages, more
/// than rmcp keeps) were sent, resumed: it gets every toggle's changes,
/// and the gateway logs no loss.
async fn assert_resumed_with_all_it_missed(old: OldStream) {
    const TOGGLES: usize = 40;
    let session = Session::start().await;
    let (last, mut resumed) = resumed_after_toggles(&session, TOGGLES, old).await;
    for n in 1..=TOGGLES {
        let changes = expect_list_changes(&mut resumed).await;
        assert_eq!(changes.len(), 3, "toggle {n}");
    }
    session.assert_working().await;
    assert!(
        session
            .gateway
            .proc
            .stderr
            .find("more messages than are kept")
            .is_none(),
        "resumed after {last}: nothing was lost"
    );
}

/// More toggles than the gateway keeps the messages of (256, three per
/// toggle).
const TOGGLES_PAST_WHAT_IS_KEPT: usize = 90;

/// One resumed after more than the gateway keeps gets the latest ones,
/// and the gateway's log says that the others were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_resumed_after_too_many_messages_says_so_in_the_log() {
    let mut session = Session::start().await;
    let (_, mut resumed) =
        resumed_after_toggles(&session, TOGGLES_PAST_WHAT_IS_KEPT, OldStream::Dropped).await;
    let latest = resumed.expect_event(Instant::now() + OP_TIMEOUT).await;
    assert!(latest.message().is_some(), "{latest:?}");
    session
        .gateway
        .proc
        .wait_for_line("more messages than are kept", OP_TIMEOUT)
        .await;
}

/// So does a new `GET` (no `Last-Event-ID`), which carries what no stream
/// carried yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_get_stream_after_too_many_messages_says_so_in_the_log() {
    let mut session = Session::start().await;
    let (_, resumed) =
        resumed_after_toggles(&session, TOGGLES_PAST_WHAT_IS_KEPT, OldStream::Dropped).await;
    drop(resumed);
    session
        .gateway
        .proc
        .wait_for_line("more messages than are kept", OP_TIMEOUT)
        .await;
    let lost_before = log_count(&session, "more messages than are kept");
    for n in 1..=TOGGLES_PAST_WHAT_IS_KEPT {
        session.toggle_bonus(&format!("again-{n}")).await;
        let list =
            json!({"jsonrpc": "2.0", "id": format!("again-list-{n}"), "method": "tools/list"});
        assert!(!session.post_answer("tools/list", &list).await.is_empty());
    }
    let mut fresh = SseReader::new("GET", session.get(&session.id, None).await);
    fresh.expect_event(Instant::now() + OP_TIMEOUT).await;
    eventually("the loss said again", OP_TIMEOUT, || async {
        (log_count(&session, "more messages than are kept") > lost_before).then_some(())
    })
    .await;
}

/// Notes whose updates a session is sent before it opens a `GET`: more
/// than rmcp keeps by default (16), fewer than it is set to keep (64).
const NOTES_UPDATED: usize = 24;

/// Messages sent to a session before its first `GET` all reach that
/// `GET`: nobody reads rmcp's stream until then, and rmcp keeps them
/// (review: with rmcp's default, 16 of 24 arrived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_sent_before_the_first_get_reaches_it() {
    let session = Session::start().await;
    subscribe_to_notes(&session).await;
    update_notes_from_another_session(&session).await;
    let mut stream = SseReader::new("GET", session.get(&session.id, None).await);
    expect_note_updates(&mut stream).await;
}

/// So do the messages a session missed while asleep, which the gateway
/// tells it as it wakes (here by a `ping`), before its `GET` opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_missed_asleep_reaches_the_get_after_the_wake() {
    let session = Session::start_sleepy().await;
    subscribe_to_notes(&session).await;
    eventually("the session to sleep", OP_TIMEOUT, || async {
        let metrics = metrics_text(&session.gateway).await;
        metrics
            .contains("junction_downstream_sessions_asleep 1")
            .then_some(())
    })
    .await;
    update_notes_from_another_session(&session).await;
    let ping = json!({"jsonrpc": "2.0", "id": "wake", "method": "ping"});
    assert!(!session.post_answer("ping", &ping).await.is_empty());
    let mut stream = SseReader::new("GET", session.get(&session.id, None).await);
    expect_note_updates(&mut stream).await;
}

/// Subscribes `session` to the demo's notes `n0` … (see [`NOTES_UPDATED`]).
async fn subscribe_to_notes(session: &Session) {
    for n in 0..NOTES_UPDATED {
        let subscribe = json!({
            "jsonrpc": "2.0", "id": format!("subscribe-{n}"), "method": "resources/subscribe",
            "params": {"uri": format!("demo+demo://notes/n{n}")},
        });
        assert!(!session
            .post_answer("subscribe", &subscribe)
            .await
            .is_empty());
    }
}

/// Another session writes each of the notes `session` subscribed to.
async fn update_notes_from_another_session(session: &Session) {
    let writer = session.other().await;
    for n in 0..NOTES_UPDATED {
        let remember = tool_call(
            &format!("remember-{n}"),
            "demo__remember",
            json!({"key": format!("n{n}"), "value": "v"}),
        );
        let answer = session.post_answer_as(&writer, "remember", &remember).await;
        assert_eq!(sort_out(&answer).responses.len(), 1, "{answer:#?}");
    }
}

/// Reads `stream` until it carried an update of each note.
async fn expect_note_updates(stream: &mut SseReader) {
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut updated = HashSet::new();
    while updated.len() < NOTES_UPDATED {
        let event = stream.expect_event(deadline).await;
        let Some(message) = event.message() else {
            continue;
        };
        if message["method"] == "notifications/resources/updated" {
            updated.insert(
                message["params"]["uri"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
}

/// How many of the gateway's log lines so far contain `needle`.
fn log_count(session: &Session, needle: &str) -> usize {
    session
        .gateway
        .proc
        .stderr
        .text()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

/// What becomes of a `GET` stream the client stops reading.
enum OldStream {
    /// The client closes it.
    Dropped,
    /// It stays open, unread: the server writes on into a connection that
    /// no longer reaches its client.
    Lingers,
}

/// A `GET` stream that carried one toggle's list changes and then was
/// left as `old` says, `toggles` more toggles (each one's lists read again
/// before the next, so each sends its three changes), and that stream
/// resumed after its last id (returned).
async fn resumed_after_toggles(
    session: &Session,
    toggles: usize,
    old: OldStream,
) -> (String, SseReader) {
    let mut standalone = SseReader::new("GET", session.get(&session.id, None).await);
    standalone.expect_event(Instant::now() + OP_TIMEOUT).await;
    session.toggle_bonus("toggle-0").await;
    let first = expect_list_changes(&mut standalone).await;
    let last = first.last().and_then(|e| e.id.clone()).expect("an id");
    let _lingering = match old {
        OldStream::Dropped => {
            drop(standalone);
            None
        }
        OldStream::Lingers => Some(standalone),
    };
    for n in 1..=toggles {
        session.toggle_bonus(&format!("toggle-{n}")).await;
        let listed = session
            .post_answer(
                "tools/list",
                &json!({"jsonrpc": "2.0", "id": format!("list-{n}"), "method": "tools/list"}),
            )
            .await;
        assert!(!listed.is_empty(), "tools/list {n}");
    }
    let resumed = session.resume(&last).await;
    (last, resumed)
}

/// A new `GET` while the session's earlier one is still open (a client
/// that reconnects before the server noticed its old connection is dead):
/// the new stream is the live one and the old one ends. rmcp made the new
/// one a keep-alive-only "shadow", and the client, kept busy by its
/// keep-alives, never learnt of a list change again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_get_stream_replaces_one_still_open() {
    let session = Session::start().await;
    let mut first = SseReader::new("GET 1", session.get(&session.id, None).await);
    first.expect_event(Instant::now() + OP_TIMEOUT).await;
    let mut second = SseReader::new("GET 2", session.get(&session.id, None).await);
    let priming = second.expect_event(Instant::now() + OP_TIMEOUT).await;
    assert!(priming.message().is_none(), "priming: {priming:?}");

    session.toggle_bonus("toggle-1").await;
    expect_list_changes(&mut second).await;
    let (left, ended) = first.until_end_or(Instant::now() + OP_TIMEOUT).await;
    assert!(
        ended && left.is_empty(),
        "old stream: ended {ended}, {left:#?}"
    );
    session.assert_working().await;
}

/// `GET`s opened all at once (a client's reconnects overlapping) leave one
/// live stream, the others ended: two opening together each cut the old
/// ones before either was registered, and one became rmcp's "shadow",
/// kept open with keep-alives and never a message (3 runs in 5, black-box
/// helper). Five rounds: the race was lost often enough to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_opened_at_once_leave_one_live_stream() {
    let session = Session::start().await;
    for round in 0..5 {
        let opening = (0..4).map(|_| session.get(&session.id, None));
        let mut streams: Vec<SseReader> = futures::future::join_all(opening)
            .await
            .into_iter()
            .map(|response| SseReader::new("GET", response))
            .collect();
        session.toggle_bonus(&format!("toggle-{round}")).await;
        // The ones cut end at once; the live one carries the changes.
        let deadline = Instant::now() + Duration::from_secs(2);
        let read = futures::future::join_all(
            streams
                .iter_mut()
                .map(|stream| stream.until_end_or(deadline)),
        )
        .await;
        let carried = |events: &[SseEvent]| {
            events
                .iter()
                .filter_map(SseEvent::message)
                .filter(|message| message["method"] == "notifications/tools/list_changed")
                .count()
        };
        let open: Vec<usize> = read
            .iter()
            .enumerate()
            .filter(|(_, (_, ended))| !ended)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(open.len(), 1, "round {round}: {read:#?}");
        assert_eq!(carried(&read[open[0]].0), 1, "round {round}: {read:#?}");
    }
}

/// A new `GET` (no `Last-Event-ID`) after one that closed carries only
/// what no stream has carried: rmcp alone replays all it keeps, so the
/// first stream's messages came again, under the same ids (transport spec:
/// a message is not broadcast across streams; ids unique in the session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_get_stream_does_not_repeat_what_an_earlier_one_carried() {
    let session = Session::start().await;
    let (carried, mut second, _priming) = a_second_get_stream(&session).await;
    session.toggle_bonus("toggle-2").await;
    let next = expect_list_changes(&mut second).await;
    assert_none_carried_again(&carried, &next, "on the second stream");
    session.assert_working().await;
}

/// A first `GET` stream that carried the demo's list changes and was
/// closed, then a second one: what the first carried, the second, and
/// its priming event.
async fn a_second_get_stream(session: &Session) -> (Vec<SseEvent>, SseReader, SseEvent) {
    let mut first = SseReader::new("GET", session.get(&session.id, None).await);
    first.expect_event(Instant::now() + OP_TIMEOUT).await;
    session.toggle_bonus("toggle-1").await;
    let carried = expect_list_changes(&mut first).await;
    drop(first);
    let mut second = SseReader::new("GET", session.get(&session.id, None).await);
    let priming = second.expect_event(Instant::now() + OP_TIMEOUT).await;
    assert!(priming.message().is_none(), "priming: {priming:?}");
    (carried, second, priming)
}

/// No event of `next` has an id one of `carried` had.
fn assert_none_carried_again(carried: &[SseEvent], next: &[SseEvent], where_: &str) {
    let carried_ids: HashSet<_> = carried.iter().map(|e| e.id.clone()).collect();
    for event in next {
        assert!(
            !carried_ids.contains(&event.id),
            "carried again {where_}: {event:?}"
        );
    }
}

/// The next three events on `stream`: the demo's `toggle_bonus` changes
/// its tool, prompt and resource lists, and each is announced once.
async fn expect_list_changes(stream: &mut SseReader) -> Vec<SseEvent> {
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(stream.expect_event(Instant::now() + OP_TIMEOUT).await);
    }
    let mut methods: Vec<Value> = events
        .iter()
        .map(|event| event.message().expect("a message")["method"].clone())
        .collect();
    methods.sort_by_key(|method| method.to_string());
    assert_eq!(
        methods,
        [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/tools/list_changed"
        ],
        "{events:#?}"
    );
    events
}

/// A log message an upstream sends while serving a call goes on that
/// call's own POST stream, before its response, with an id of that stream
/// (how it resumes is unit-tested in `request_stream.rs`); the `GET` stream, which carries what belongs
/// to no request, does not get it (the next thing on it is the
/// `list_changed` a later call causes). Transport spec: messages on a
/// POST's stream "SHOULD relate to the originating client request", those
/// on the GET stream "SHOULD be unrelated".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_log_messages_ride_its_own_stream() {
    let session = Session::start().await;
    let mut standalone = SseReader::new("GET", session.get(&session.id, None).await);
    standalone.expect_event(Instant::now() + OP_TIMEOUT).await;

    let arguments = json!({"level": "info", "data": {"said": "on my stream"}});
    let events = session.call("log-1", "demo__log", arguments).await;
    eprintln!("log call's stream: {events:#?}");
    let messages: Vec<(Option<String>, Value)> = events
        .iter()
        .filter_map(|e| e.message().map(|m| (e.id.clone(), m)))
        .collect();
    assert_eq!(
        messages.len(),
        2,
        "the log message, then the response: {events:#?}"
    );
    let (log_id, logged) = &messages[0];
    assert_eq!(logged["method"], "notifications/message", "{events:#?}");
    assert_eq!(
        logged["params"]["data"]["said"], "on my stream",
        "{events:#?}"
    );
    assert_eq!(messages[1].1["id"], "log-1", "{events:#?}");
    // An id of this stream, placed between rmcp's events.
    let ids: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    assert!(
        log_id
            .as_deref()
            .is_some_and(|id| id.contains('.') && id.contains('/')),
        "{ids:?}"
    );
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "ids repeat: {ids:?}"
    );

    session.toggle_bonus("toggle").await;
    let next = standalone.expect_event(Instant::now() + OP_TIMEOUT).await;
    let method = next.message().expect("a message")["method"].clone();
    assert!(
        method
            .as_str()
            .is_some_and(|m| m.ends_with("/list_changed")),
        "the GET stream got something else first: {next:?}"
    );
    session.assert_working().await;
}

/// A client gone before its call's answer, while the gateway still holds
/// the call as a quick one (it waits ~20 ms to send a quick answer whole,
/// as JSON), has not cancelled it either: the call runs to its end
/// upstream, as one on rmcp's stream does. The request is written whole on
/// a raw connection that is closed at once, well within those 20 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_a_quick_answer_has_not_cancelled_the_call() {
    use tokio::io::AsyncWriteExt;

    let session = Session::start().await;
    let mcp = session.gateway.mcp_url();
    raw::wait_until_calls_are_quick(&session.http, &mcp, &session.id, "demo__echo").await;
    let answered_before = calls_answered(&session).await;

    let body = tool_call("gone", "demo__slow", json!({"steps": 2, "delay_ms": 100})).to_string();
    let path = reqwest::Url::parse(&mcp)
        .expect("the MCP URL")
        .path()
        .to_owned();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: {ACCEPT_BOTH}\r\nmcp-session-id: {id}\r\nmcp-protocol-version: {VERSION}\r\n\
         content-length: {length}\r\n\r\n{body}",
        addr = session.gateway.addr,
        id = session.id,
        length = body.len(),
    );
    let mut connection = within(
        "connect",
        tokio::net::TcpStream::connect(session.gateway.addr),
    )
    .await
    .expect("connect to the gateway");
    within("write the call", connection.write_all(request.as_bytes()))
        .await
        .expect("write the call");
    // Gone while the gateway waits for the answer: after it has read the
    // request, before the 20 ms are up (or, on a slow day, after: then the
    // call is on rmcp's stream, which must not cancel it either).
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(connection);

    eventually("the abandoned call to end", OP_TIMEOUT, || async {
        (calls_answered(&session).await > answered_before).then_some(())
    })
    .await;
    let events = session
        .call("count", "demo__cancellations", json!({}))
        .await;
    let answers = sort_out(&events).responses;
    assert_eq!(
        answers[0]["result"]["content"][0]["text"], "0",
        "the upstream saw the call cancelled: {events:#?}"
    );
    session.assert_working().await;
}

/// A session that slept and woke is a new rmcp session underneath, which
/// numbers its `GET` stream's events from 0 again; its client resuming
/// that stream with an id from before the sleep must get what was sent
/// since, not have it skipped as if it were already seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_stream_resumes_across_a_sleep() {
    let session = Session::start_sleepy().await;

    let mut standalone = SseReader::new("GET", session.get(&session.id, None).await);
    standalone.expect_event(Instant::now() + OP_TIMEOUT).await;
    session.toggle_bonus("before-sleep").await;
    let before = expect_list_changes(&mut standalone).await;
    let last = before
        .iter()
        .filter_map(|e| e.id.clone())
        .max_by_key(|id| id.parse::<u64>().unwrap_or(0));
    let last = last.expect("an id");
    drop(standalone);

    // Asleep (no stream open, nothing in flight), then woken by a call
    // whose list changes wait for the client's next GET.
    eventually("the session to sleep", OP_TIMEOUT, || async {
        let metrics = session
            .http
            .get(session.gateway.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metrics
            .contains("junction_downstream_sessions_asleep 1")
            .then_some(())
    })
    .await;
    session.toggle_bonus("after-waking").await;

    let mut resumed = session.resume(&last).await;
    let after = expect_list_changes(&mut resumed).await;
    let before_ids: HashSet<_> = before.iter().map(|e| e.id.clone()).collect();
    for event in &after {
        assert!(
            !before_ids.contains(&event.id),
            "an id given twice: {event:?}"
        );
    }
    session.assert_working().await;
}

/// Resuming after a new `GET`'s priming event (rmcp's id `0` on every
/// stream) replays what that stream carried, not what an earlier stream
/// did: rmcp took `0` for "all I keep", and the first stream's messages
/// came again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_after_a_priming_event_repeats_no_earlier_stream() {
    let session = Session::start().await;
    let (carried, second, priming) = a_second_get_stream(&session).await;
    assert_eq!(priming.id.as_deref(), Some("0"), "rmcp's priming id");
    drop(second);
    // Sent as the second stream goes: whether it still carries them or
    // not, the resume after its priming event must.
    session.toggle_bonus("toggle-2").await;

    let mut resumed = SseReader::new(
        "GET (resumed after the priming event)",
        session.get(&session.id, priming.id.as_deref()).await,
    );
    let next = expect_list_changes(&mut resumed).await;
    assert_none_carried_again(&carried, &next, "after the priming event");
    session.assert_working().await;
}
