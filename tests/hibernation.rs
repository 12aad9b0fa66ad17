//! Idle downstream sessions sleep and wake: the client never notices.
//!
//! A session with nothing in flight and no stream open for
//! `session_hibernate_after` gives up rmcp's per-session machinery and keeps
//! its state; its next request wakes it under the same id with the same
//! state. A session with a `GET` stream open never sleeps; one asleep past
//! `session_idle_timeout`, or deleted, is gone (404).

mod common;

use std::time::Duration;

use common::raw::{self, JSON_POST};
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long a test waits for a session to fall asleep or expire.
const SETTLE: Duration = Duration::from_secs(10);

fn config(server: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n\n{}",
        stdio_demo_mount("demo", "")
    )
}

/// `junction_downstream_sessions_asleep` from `/metrics`.
async fn asleep(gateway: &Gateway) -> u64 {
    let metrics = metrics_text(gateway).await;
    metric_value(&metrics, "junction_downstream_sessions_asleep").unwrap_or(0.0) as u64
}

async fn wait_asleep(gateway: &Gateway, count: u64) {
    eventually("sessions to fall asleep", SETTLE, || async {
        (asleep(gateway).await == count).then_some(())
    })
    .await;
}

/// `session` is unknown to the gateway: 404.
async fn assert_gone(http: &reqwest::Client, url: &str, session: &str) {
    let echo = raw::echo_request("1", "x");
    let gone = raw::post(http, url, Some(session), JSON_POST, echo).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{gone:?}");
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Calls `demo__log` at `level`; the log messages that came on the call's
/// own stream.
async fn log_at(http: &reqwest::Client, url: &str, session: &str, level: &str) -> Vec<Value> {
    let body = request(
        7,
        "tools/call",
        json!({"name": "demo__log", "arguments": {"level": level, "data": level}}),
    );
    let response = within(
        "tools/call demo__log",
        http.post(url)
            .header("content-type", "application/json")
            .header("accept", raw::ACCEPT_BOTH)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", raw::VERSION)
            .body(body)
            .send(),
    )
    .await
    .expect("POST");
    assert_eq!(response.status(), StatusCode::OK);
    let text = within("call body", response.text()).await.unwrap();
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: String = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str::<Value>(&data).ok()
        })
        .filter(|message| message["method"] == "notifications/message")
        .map(|message| message["params"]["data"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_sleeps_and_wakes_with_its_state() {
    let gateway = Gateway::start(&config("session_hibernate_after = \"200ms\"")).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    let set_level = request(2, "logging/setLevel", json!({"level": "error"}));
    let answer = raw::post(&http, &url, Some(&session), JSON_POST, set_level).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    // A client with its GET stream open is never put to sleep.
    let listening = connect(&url).await;

    wait_asleep(&gateway, 1).await;
    // Asleep: the same id answers (a session unknown would get 404).
    // (Whether it is awake now is not asserted: 200 ms later it may sleep
    // again, and the next call wakes it again.)
    raw::assert_echoes(&http, &url, &session).await;
    // Its log level survived: an info message is filtered, an error is not.
    assert_eq!(
        log_at(&http, &url, &session, "info").await,
        Vec::<Value>::new()
    );
    assert_eq!(
        log_at(&http, &url, &session, "error").await,
        [json!("error")]
    );

    // It sleeps again, and a DELETE while asleep ends it.
    wait_asleep(&gateway, 1).await;
    let deleted = raw::delete_session(&http, &url, &session).await;
    assert!(deleted.is_success(), "{deleted}");
    assert_eq!(asleep(&gateway).await, 0);
    assert_gone(&http, &url, &session).await;

    // The listening client slept through none of it.
    let echoed = call(&listening, "demo__echo", json!({"message": "awake"})).await;
    assert_eq!(ok_text(&echoed), "awake");
    close(listening).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_asleep_past_its_idle_timeout_is_gone() {
    let gateway = Gateway::start(&config(
        "session_hibernate_after = \"100ms\"\nsession_idle_timeout = \"1s\"",
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    wait_asleep(&gateway, 1).await;
    wait_asleep(&gateway, 0).await;
    assert_gone(&http, &url, &session).await;
}

/// A session asleep keeps its place under `max_sessions`, and can always
/// wake up into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_asleep_keeps_its_place_under_max_sessions() {
    let gateway = Gateway::start(&format!(
        "[limits]\nmax_sessions = 1\n\n{}",
        config("session_hibernate_after = \"100ms\"")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    wait_asleep(&gateway, 1).await;
    let refused = raw::post(&http, &url, None, JSON_POST, raw::INITIALIZE).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    raw::assert_echoes(&http, &url, &session).await;
}

/// A session in use is not idle, whichever path answers it: a session
/// that cannot sleep (its per-session upstream is open), without a GET
/// stream, used only by quick tool calls and first-page lists (answered
/// before rmcp's session worker sees them) outlives `session_idle_timeout`
/// many times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_use_outlives_the_idle_timeout() {
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_idle_timeout = \"1s\"\n\n{}",
        stdio_demo_mount("own", "isolation = \"per_session\"")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    // 16 requests 200 ms apart: at least 3 s of use, three idle timeouts.
    for calls in 0..16 {
        let body = if calls % 2 == 0 {
            request(
                10 + calls,
                "tools/call",
                json!({"name": "own__echo", "arguments": {"message": "here"}}),
            )
        } else {
            request(10 + calls, "tools/list", json!({}))
        };
        let answer = raw::post(&http, &url, Some(&session), JSON_POST, body).await;
        assert_eq!(answer.status, StatusCode::OK, "request {calls}: {answer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a session would have been told while asleep (a resource it
/// subscribed to changed, a list changed) it is told on waking: awake
/// without a `GET` stream, rmcp would have kept both for its next `GET`.
/// The update keeps the upstream's `_meta` (the demo names the note's
/// key); it was told with the URI alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_changed_while_asleep_is_told_on_waking() {
    let gateway = Gateway::start(&config("session_hibernate_after = \"200ms\"")).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let uri = "demo+demo://notes/while-asleep";
    let sleeper = subscribed_session(&http, &url, uri).await;
    wait_asleep(&gateway, 1).await;

    // Another client (its GET stream open: it never sleeps) changes both.
    let other = change_note_and_tools(&url, "while-asleep").await;
    assert_eq!(asleep(&gateway).await, 1, "the sleeper woke too early");

    // The sleeper's GET wakes it; both come on that stream.
    let seen = get_until_told(&http, &url, &sleeper, uri).await;
    assert!(told(&seen, uri), "the woken session's GET stream: {seen:?}");
    assert!(
        seen.contains(r#""_meta":{"x-demo-key":"while-asleep"}"#),
        "{seen:?}"
    );
    close(other).await;
}

/// Whether a `GET` stream's text so far carries a tools list change and
/// an update of `uri`.
fn told(seen: &str, uri: &str) -> bool {
    seen.contains("notifications/tools/list_changed")
        && seen.contains("notifications/resources/updated")
        && seen.contains(uri)
}

/// Opens `session`'s `GET` stream and reads it until it has been told of a
/// tools change and `uri`'s update, or for `SETTLE`; returns what it read.
async fn get_until_told(http: &reqwest::Client, url: &str, session: &str, uri: &str) -> String {
    get_until(http, url, session, |seen| told(seen, uri)).await
}

/// Opens `session`'s `GET` stream and reads it until `done` with what it
/// read, or for `SETTLE`; returns what it read.
async fn get_until(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut stream = within(
        "GET",
        http.get(url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", raw::VERSION)
            .send(),
    )
    .await
    .expect("GET");
    assert_eq!(stream.status(), StatusCode::OK);
    let mut seen = String::new();
    let _ = tokio::time::timeout(SETTLE, async {
        while !done(&seen) {
            match stream.chunk().await {
                Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => break,
            }
        }
    })
    .await;
    seen
}

/// What was sent to a session awake without a `GET` stream waits in rmcp
/// for its next `GET`; falling asleep closes rmcp's session, so that is
/// kept too, and told on waking. Twice: woken by a request (not a `GET`),
/// what it is told waits in the new rmcp session, and it sleeps again
/// before its `GET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_waited_for_a_get_survives_sleeping_twice() {
    // Long enough for the changes below to come before the first sleep on
    // a loaded machine (the test says so if they do not).
    let gateway = Gateway::start(&config("session_hibernate_after = \"3s\"")).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let uri = "demo+demo://notes/before-sleep";
    let sleeper = subscribed_session(&http, &url, uri).await;

    // Changed while the sleeper is awake, its GET not open.
    let other = change_note_and_tools(&url, "before-sleep").await;
    assert_eq!(
        asleep(&gateway).await,
        0,
        "the sleeper slept before the change: the test no longer tests it"
    );

    wait_asleep(&gateway, 1).await;
    let ping = request(3, "ping", json!({}));
    let answer = raw::post(&http, &url, Some(&sleeper), JSON_POST, ping).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(asleep(&gateway).await, 0, "the ping did not wake it");
    wait_asleep(&gateway, 1).await;

    let seen = get_until_told(&http, &url, &sleeper, uri).await;
    assert!(
        told(&seen, uri),
        "the twice-woken session's GET stream: {seen:?}"
    );
    close(other).await;
}

/// A session (no `GET` stream: it may sleep) subscribed to `uri`.
async fn subscribed_session(http: &reqwest::Client, url: &str, uri: &str) -> String {
    let session = raw::open_session(http, url).await;
    let subscribe = request(2, "resources/subscribe", json!({ "uri": uri }));
    let answer = raw::post(http, url, Some(&session), JSON_POST, subscribe).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    session
}

/// Another client (its `GET` stream open: it never sleeps) changes the
/// demo note `key` and the tool list, and has heard of the change.
async fn change_note_and_tools(url: &str, key: &str) -> Client {
    let other = connect(url).await;
    let changes_before = other.service().tool_list_changes();
    call(&other, "demo__remember", json!({"key": key, "value": "v"})).await;
    call(&other, "demo__toggle_bonus", json!({})).await;
    eventually("the other client to hear of the change", SETTLE, || async {
        (other.service().tool_list_changes() > changes_before).then_some(())
    })
    .await;
    other
}

/// A session whose per-session upstream has ended (its process killed)
/// holds nothing that sleeping would lose, and sleeps; woken, its next
/// call opens a fresh upstream. It stayed awake for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_per_session_upstream_ended_sleeps() {
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_hibernate_after = \"200ms\"\n\n{}",
        stdio_demo_mount("own", "isolation = \"per_session\"")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    let pid_call = |id| {
        request(
            id,
            "tools/call",
            json!({"name": "own__pid", "arguments": {}}),
        )
    };
    let pid = raw::post(&http, &url, Some(&session), JSON_POST, pid_call(2))
        .await
        .tool_pid();
    kill(pid);

    wait_asleep(&gateway, 1).await;
    let answer = raw::post(&http, &url, Some(&session), JSON_POST, pid_call(3)).await;
    let again = answer.tool_text();
    assert!(
        again.is_some_and(|again| again != pid.to_string()),
        "{answer:?}"
    );
}

/// Requests arriving together at a sleeping session all wake it into one
/// session and are all answered: one that reached the session being
/// restored before its replayed `initialize` stopped it (500s, and the
/// session's resumable streams forgotten).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_arriving_together_at_a_sleeping_session_are_all_answered() {
    let gateway = Gateway::start(&config("session_hibernate_after = \"100ms\"")).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    for round in 0..8u64 {
        wait_asleep(&gateway, 1).await;
        let requests = (0..6u64).map(|n| {
            let body = match n % 3 {
                0 => raw::echo_request(&(100 * round + n).to_string(), "together"),
                1 => request(100 * round + n, "ping", json!({})),
                _ => request(100 * round + n, "prompts/list", json!({})),
            };
            raw::post(&http, &url, Some(&session), JSON_POST, body)
        });
        for answer in futures::future::join_all(requests).await {
            assert_eq!(answer.status, StatusCode::OK, "round {round}: {answer:?}");
            assert!(
                answer.body.get("result").is_some(),
                "round {round}: {answer:?}"
            );
        }
    }
}

/// A session's tasks keep it awake only within their TTLs: the relay
/// holds its peer for their status notifications and in-task requests
/// until then. Past its task's TTL an idle session sleeps, and the task is
/// unknown to it from then on; a session whose task is within its TTL
/// stays awake and keeps it. One task kept a session awake for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_sleeps_once_its_tasks_are_past_their_ttl() {
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_hibernate_after = \"200ms\"\n\n{}",
        python_fixture_mount("tasks", "endless_task_pages.py", "")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let mut tasks = Vec::new();
    for ttl in [60_000, 300] {
        let session = raw::open_session(&http, &url).await;
        let call = request(
            2,
            "tools/call",
            json!({"name": "tasks__work", "arguments": {}, "task": {"ttl": ttl}}),
        );
        let answer = raw::post(&http, &url, Some(&session), JSON_POST, call).await;
        let task = answer.body["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {answer:?}"))
            .to_owned();
        tasks.push((session, task));
    }

    wait_asleep(&gateway, 1).await;
    let get = |(session, task): &(String, String)| {
        let body = request(3, "tasks/get", json!({"taskId": task}));
        let session = session.clone();
        let (http, url) = (&http, &url);
        async move { raw::post(http, url, Some(&session), JSON_POST, body).await }
    };
    let kept = get(&tasks[0]).await;
    assert_eq!(kept.body["result"]["status"], "working", "{kept:?}");
    let forgotten = get(&tasks[1]).await;
    assert_eq!(
        forgotten.body["error"]["code"], -32602,
        "woken past its TTL, the task is unknown: {forgotten:?}"
    );
}

/// Log lines a server writes for a call that timed out (the call counts
/// as running upstream for 30 s more, and what it sends goes to its
/// session) reach the session after it slept: kept while it sleeps and
/// told at the wake, as other log lines are. They were sent to the peer
/// the sleep had closed, and lost (black-box helper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_calls_late_log_lines_reach_its_session_after_a_sleep() {
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_hibernate_after = \"200ms\"\n\n[timeouts]\nrequest = \"500ms\"\n\n{}",
        python_fixture_mount("late", "logs_later.py", "")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    let call = request(
        2,
        "tools/call",
        json!({"name": "late__logs_later", "arguments": {"delay": 2, "n": 3}}),
    );
    let answer = raw::post(&http, &url, Some(&session), JSON_POST, call).await;
    assert!(
        answer.text().contains("timed out") || answer.body["result"]["isError"] == true,
        "the call times out: {answer:?}"
    );
    wait_asleep(&gateway, 1).await;
    // The lines come 2 s after the call, while it sleeps: waited for
    // until the gateway has relayed all three.
    eventually("the late log lines relayed", SETTLE, || async {
        let metrics = metrics_text(&gateway).await;
        let relayed = metric_value(&metrics, "junction_relayed_messages_total{kind=\"log\"}");
        relayed.is_some_and(|count| count >= 3.0).then_some(())
    })
    .await;
    assert_eq!(asleep(&gateway).await, 1, "told while it slept");
    let seen = get_until(&http, &url, &session, |seen| seen.contains("late 2")).await;
    for line in ["late 0", "late 1", "late 2"] {
        assert!(seen.contains(line), "no {line:?} on the woken GET: {seen}");
    }
}

/// Waking a session is no new `initialize`: the count of initializes (what
/// dashboards read as new sessions) does not move when a session wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_is_not_counted_as_an_initialize() {
    let gateway = Gateway::start(&config("session_hibernate_after = \"100ms\"")).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let initializes = || async {
        let metrics = metrics_text(&gateway).await;
        let series = "junction_requests_total{mount=\"-\",method=\"initialize\",outcome=\"ok\"}";
        metric_value(&metrics, series).unwrap_or(0.0)
    };
    let session = raw::open_session(&http, &url).await;
    assert_eq!(initializes().await, 1.0);
    wait_asleep(&gateway, 1).await;
    let answer = raw::post(
        &http,
        &url,
        Some(&session),
        JSON_POST,
        request(5, "ping", json!({})),
    )
    .await;
    assert!(answer.body.get("result").is_some(), "{answer:?}");
    assert_eq!(initializes().await, 1.0, "a wake counted as an initialize");
}

/// A per-session mount of a server that shows the `Authorization` it got,
/// forwarding the client's `X-Mine-Token` as it (`own`: the mount's own
/// headers), and a session opened with the token `first`, asleep. Returns
/// the server (stopped when dropped), the gateway and the session's id.
async fn asleep_with_a_token(
    own: &str,
) -> (common::forgetful_http::ForgetfulHttpServer, Gateway, String) {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_hibernate_after = \"100ms\"\n\n{}",
        http_mount(
            "mine",
            &server.url(),
            &format!("isolation = \"per_session\"\nforward_headers = {{ Authorization = \"X-Mine-Token\" }}\n{own}")
        )
    ))
    .await;
    let url = gateway.mcp_url();
    let http = reqwest::Client::new();
    let first = [JSON_POST, &[("x-mine-token", "first")]].concat();
    let initialize = raw::post(&http, &url, None, &first, raw::INITIALIZE).await;
    let session = initialize.session_id().expect("a session");
    let initialized = raw::post(&http, &url, Some(&session), &first, raw::INITIALIZED);
    assert_eq!(initialized.await.status, StatusCode::ACCEPTED);
    wait_asleep(&gateway, 1).await;
    (server, gateway, session)
}

/// A session woken by a request takes the headers its per-session
/// upstreams forward from that request: a client that renewed its token
/// while the session slept opens its upstream with the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_session_forwards_the_headers_of_the_request_that_woke_it() {
    let (_server, gateway, session) = asleep_with_a_token("").await;
    let renewed = [JSON_POST, &[("x-mine-token", "renewed")]].concat();
    let call = request(2, "tools/call", json!({"name": "mine__authorization"}));
    let http = reqwest::Client::new();
    let answer = raw::post(&http, &gateway.mcp_url(), Some(&session), &renewed, call).await;
    assert_eq!(answer.tool_text(), Some("renewed / renewed"), "{answer:?}");
}

/// A session woken by a request without the headers its per-session
/// upstreams forward keeps the values its client sent before it slept
/// (README: "one without a header leaves the value it had"). They were
/// lost with the session's state: the upstream opened without the
/// client's token, or with the mount's own credential in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_session_keeps_the_headers_its_client_sent_before() {
    let (_server, gateway, session) =
        asleep_with_a_token("headers = { Authorization = \"mount-own\" }").await;
    let call = request(2, "tools/call", json!({"name": "mine__authorization"}));
    let http = reqwest::Client::new();
    let answer = raw::post(&http, &gateway.mcp_url(), Some(&session), JSON_POST, call).await;
    assert_eq!(answer.tool_text(), Some("first / first"), "{answer:?}");
}
