//! Graceful shutdown: on SIGTERM the gateway refuses new work, lets the
//! request in flight finish within `shutdown_grace`, then ends sessions and
//! leaves no child process behind (asserted by pid).

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Starts a `slow` call of `steps` × `delay_ms` on `tool` in a task of its
/// own, and returns once the upstream is running it (its first progress).
async fn slow_call_in_flight(
    client: &Client,
    tool: &'static str,
    steps: u64,
    delay_ms: u64,
) -> tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::service::ServiceError>> {
    let peer = client.peer().clone();
    let call = tokio::spawn(async move {
        let params = rmcp::model::CallToolRequestParams::new(tool).with_arguments(
            json!({"steps": steps, "delay_ms": delay_ms})
                .as_object()
                .cloned()
                .unwrap(),
        );
        peer.call_tool(params).await
    });
    eventually("the call to report progress", OP_TIMEOUT, || async {
        (!client.service().progress().is_empty()).then_some(())
    })
    .await;
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_call_in_flight_and_leaves_no_child() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"8s\"\n\n{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let mut gateway = Gateway::start(&config).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    let children = [
        call_pid(&a, "shared__pid").await,
        call_pid(&a, "private__pid").await,
        call_pid(&b, "private__pid").await,
    ];
    assert!(children.iter().all(|pid| process_alive(*pid)));

    // A call that needs 1.5 s is in flight when SIGTERM arrives, which
    // comes once the upstream is running it (first progress, after
    // 500 ms; a second left).
    let in_flight = slow_call_in_flight(&a, "shared__slow", 3, 500).await;
    // An initialize whose body has not all arrived when the signal comes.
    let mut trickling = tokio::net::TcpStream::connect(gateway.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: {accept}\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n",
        addr = gateway.addr,
        accept = raw::ACCEPT_BOTH,
        length = raw::INITIALIZE.len(),
    );
    let (first, rest) = raw::INITIALIZE.split_at(1);
    trickling
        .write_all(format!("{head}{first}").as_bytes())
        .await
        .expect("write the head");
    signal(gateway.proc.pid(), "TERM");

    // While it drains, a new session is refused with 503.
    let http = reqwest::Client::new();
    eventually(
        "a new session to be refused while draining",
        OP_TIMEOUT,
        || {
            let request = http
                .post(gateway.mcp_url())
                .header("content-type", "application/json")
                .header("accept", raw::ACCEPT_BOTH)
                .body(raw::INITIALIZE)
                .send();
            async move {
                let refused = request.await.ok()?;
                // Told to go elsewhere, on a new connection.
                (refused.status() == 503 && refused.headers()["connection"] == "close")
                    .then_some(())
            }
        },
    )
    .await;
    // And readiness says so, for load balancers that route by it.
    let readyz = within(
        "/readyz while draining",
        http.get(gateway.url("/readyz")).send(),
    )
    .await
    .expect("GET /readyz");
    assert_eq!(readyz.status(), 503);
    let readyz: serde_json::Value = readyz.json().await.expect("a JSON body");
    assert_eq!(readyz["draining"], true, "{readyz}");
    // So does the status page's JSON.
    let status = status_json(&gateway).await;
    assert_eq!(
        (&status["ready"], &status["draining"]),
        (&json!(false), &json!(true)),
        "{status}"
    );

    // Its body completed while draining: refused too, not a new session.
    // (Had the signal been handled before the gateway read the head, the
    // check before the body would refuse it: the test would pass without
    // showing the later check, never fail wrongly. On loopback the head
    // is read at once.)
    trickling
        .write_all(rest.as_bytes())
        .await
        .expect("write the rest");
    let mut answer = String::new();
    within(
        "the answer to the late body",
        trickling.read_to_string(&mut answer),
    )
    .await
    .expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");

    let finished = within("the call in flight", in_flight)
        .await
        .unwrap()
        .expect("the call in flight is answered");
    assert_eq!(ok_text(&finished), "done after 3 steps");

    let status = gateway.proc.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "gateway exited with {status}");
    for pid in children {
        eventually(&format!("child {pid} to be gone"), OP_TIMEOUT, || async {
            (!process_exists(pid)).then_some(())
        })
        .await;
    }
}

/// A call still running when `shutdown_grace` is over is answered with
/// an error that says so before the gateway exits: its client's stream
/// closed with no answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_outliving_the_grace_is_told_the_gateway_is_stopping() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"300ms\"\n\n{}",
        stdio_demo_mount("demo", ""),
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let call = slow_call_in_flight(&client, "demo__slow", 100, 100).await;
    signal(gateway.proc.pid(), "TERM");
    let answer = within("the cut-off call's answer", call)
        .await
        .expect("the call's task");
    match answer {
        Err(rmcp::service::ServiceError::McpError(error)) => {
            assert!(
                error
                    .message
                    .contains("shutting down and this request was still unanswered after server.shutdown_grace;"),
                "{error:?}"
            )
        }
        other => panic!("expected an error saying the gateway is stopping, got {other:?}"),
    }
    let status = gateway.proc.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "gateway exited with {status}");
}

/// A client that stops reading a large answer cannot hold the gateway up:
/// hyper has no write deadline, so its connection is closed a few seconds
/// after serving stops, and the process exits on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_not_reading_its_answer_does_not_hold_up_shutdown() {
    // 10 MiB: more than the gateway's send buffer (4 MiB at most on
    // Linux) and the client's small receive buffer hold together.
    const MESSAGE_BYTES: usize = 10 * 1024 * 1024;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n[limits]\nmax_body_size = \"16MiB\"\n\n{}",
        stdio_demo_mount("demo", ""),
    );
    let mut gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;

    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("a small receive buffer");
    let mut stalled = within("connecting", socket.connect(gateway.addr))
        .await
        .expect("connect to the gateway");
    let body = raw::echo_request("1", &"x".repeat(MESSAGE_BYTES));
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: {}\r\nmcp-session-id: {session}\r\nmcp-protocol-version: {}\r\ncontent-length: {}\r\n\r\n",
        gateway.addr,
        raw::ACCEPT_BOTH,
        raw::VERSION,
        body.len()
    );
    use tokio::io::AsyncWriteExt;
    within("sending the call", async {
        stalled.write_all(head.as_bytes()).await?;
        stalled.write_all(body.as_bytes()).await
    })
    .await
    .expect("send the call");
    // The answer is being written once the call is counted.
    let metrics = gateway.url("/metrics");
    eventually("the call to be answered", OP_TIMEOUT, || async {
        let text = http.get(&metrics).send().await.ok()?.text().await.ok()?;
        let series = r#"junction_requests_total{mount="demo",method="tools/call",outcome="ok"} 1"#;
        text.lines().any(|line| line == series).then_some(())
    })
    .await;

    signal(gateway.proc.pid(), "TERM");
    // Grace (1 s), then the connections' close limit (5 s), with room.
    let status = gateway.proc.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "gateway exited with {status}");
    drop(stalled);
}

/// An upstream that stopped reading its stdin (stopped, hung, deadlocked)
/// with a large request still being written to it cannot hold up the
/// gateway's exit: closing its stdin waits on that write, so the gateway
/// goes on to the signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stopped_reading_does_not_hold_up_shutdown() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n{}",
        stdio_demo_mount("demo", "timeouts = { request = \"1s\" }"),
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let child = call_pid(&client, "demo__pid").await;
    let _reaper = KillOnDrop(child);
    signal(child, "STOP");
    // 1 MiB: far more than a pipe holds, so the write blocks.
    let big = "x".repeat(1024 * 1024);
    let answer = call(&client, "demo__echo", json!({ "message": big })).await;
    assert_eq!(answer.is_error, Some(true), "a stopped upstream answered");

    signal(gateway.proc.pid(), "TERM");
    let status = gateway.proc.wait_exit(Duration::from_secs(30)).await;
    assert!(status.success(), "gateway exited with {status}");
    eventually(&format!("child {child} to be gone"), OP_TIMEOUT, || async {
        (!process_exists(child)).then_some(())
    })
    .await;
}

/// While the gateway drains, what a client sends for its work in flight
/// still gets through: here the cancel of a long call, which then ends
/// at once instead of running out the grace period. A new request is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_while_draining_still_reaches_the_call() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"30s\"\n\n{}",
        stdio_demo_mount("demo", ""),
    );
    let mut gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    let slow = json!({
        "jsonrpc": "2.0", "id": "long", "method": "tools/call",
        "params": {
            "name": "demo__slow",
            "arguments": {"steps": 100, "delay_ms": 200},
            "_meta": {"progressToken": "long"},
        },
    });
    let mut stream = within(
        "the long call's stream",
        http.post(&url)
            .header("content-type", "application/json")
            .header("accept", raw::ACCEPT_BOTH)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", raw::VERSION)
            .body(slow.to_string())
            .send(),
    )
    .await
    .expect("POST the long call");
    let mut seen = String::new();
    within("the first progress", async {
        while !seen.contains("notifications/progress") {
            let chunk = stream.chunk().await.expect("read").expect("more");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;

    signal(gateway.proc.pid(), "TERM");
    let post = |body: String| raw::post(&http, &url, Some(&session), raw::JSON_POST, body);
    eventually("the gateway to drain", OP_TIMEOUT, || async {
        let answer = post(raw::echo_request("1", "new work")).await;
        (answer.status == 503).then_some(())
    })
    .await;
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "long", "reason": "the user gave up"},
    });
    let answer = post(cancel.to_string()).await;
    assert_eq!(answer.status, 202, "the cancel was refused: {answer:?}");

    // The call ends without its result, and the gateway with it, long
    // before the 30 s grace would run out (20 s of steps were left).
    within("the long call's stream to end", async {
        while let Some(chunk) = stream.chunk().await.ok().flatten() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(
        !seen.contains("done after"),
        "the call ran to its end: {seen}"
    );
    let status = gateway.proc.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "gateway exited with {status}");
}

/// A per-session upstream whose close outlasts the teardown limit at
/// shutdown (here: its server stopped, so it neither reads its stdin's end
/// nor takes SIGTERM) still leaves nothing behind: what it started outside
/// its process group (a `setsid` helper, as Playwright's browsers) is
/// killed before the gateway exits. The close was dropped with the lanes,
/// and the search for such processes, handed to a blocking thread of a
/// runtime shutting down, never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_cut_short_at_shutdown_leaves_no_detached_process() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let marker = dir.path().join("straggler");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n{}",
        detached_straggler_mount("own", &marker, "isolation = \"per_session\"")
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let server = call_pid(&client, "own__pid").await;
    let straggler = straggler_pid(&marker).await;
    signal(server, "STOP");
    signal(gateway.proc.pid(), "TERM");
    gateway.proc.wait_exit(Duration::from_secs(30)).await;
    eventually("the detached straggler to be gone", OP_TIMEOUT, || async {
        (!process_alive(straggler)).then_some(())
    })
    .await;
    assert!(
        !process_alive(server),
        "the stopped server outlived the gateway"
    );
}

/// A second SIGINT (Ctrl-C pressed again) while the gateway waits out a
/// long grace period for a call in flight stops it at once, exit code
/// 130, its stdio child killed: it did nothing, and the operator had to
/// find and kill the process and its children by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_interrupt_stops_at_once_and_leaves_no_child() {
    a_second_signal_stops_at_once("INT", 130).await;
}

/// The same with SIGTERM (a supervisor that stops, then insists), exit
/// code 143 as a shell reports it: it was 130, as if Ctrl-C was pressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_termination_stops_at_once_with_its_own_code() {
    a_second_signal_stops_at_once("TERM", 143).await;
}

async fn a_second_signal_stops_at_once(name: &str, code: i32) {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"60s\"\n\n{}",
        stdio_demo_mount("demo", ""),
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let child = call_pid(&client, "demo__pid").await;
    let slow = slow_call_in_flight(&client, "demo__slow", 600, 100).await;

    signal(gateway.proc.pid(), name);
    eventually("the gateway to drain", OP_TIMEOUT, || async {
        (readyz(&gateway).await["draining"] == true).then_some(())
    })
    .await;
    // A second press, past the second in which a signal counts as the
    // first one forwarded (by `npm run`, say): sent until it stops.
    let mut status = None;
    for _ in 0..20 {
        // Not reaped before it is looked at here: a signal to it before
        // then reaches a zombie at worst.
        if let Some(exited) = gateway.proc.exited() {
            status = Some(exited);
            break;
        }
        signal(gateway.proc.pid(), name);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let status = match status {
        Some(status) => status,
        None => gateway.proc.wait_exit(Duration::from_secs(5)).await,
    };
    assert_eq!(status.code(), Some(code), "{name}: {status}");
    eventually("the child to be gone", OP_TIMEOUT, || async {
        (!process_alive(child)).then_some(())
    })
    .await;
    slow.abort();
}

/// A config edit while draining is not applied: it started the new mounts'
/// processes only for the shutdown to stop them. A SIGHUP then is said to
/// do nothing (ops helper: it was taken without a word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reload_while_draining() {
    let server = "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"8s\"\n\n";
    let config = format!("{server}{}", stdio_demo_mount("kept", ""));
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let in_flight = slow_call_in_flight(&client, "kept__slow", 3, 1000).await;
    signal(gateway.proc.pid(), "TERM");
    eventually("the drain to begin", OP_TIMEOUT, || async {
        (readyz(&gateway).await["draining"] == true).then_some(())
    })
    .await;
    let added = format!("{config}{}", stdio_demo_mount("added", ""));
    rewrite_config(&gateway.config_path, &added);
    signal(gateway.proc.pid(), "HUP");
    gateway
        .proc
        .wait_for_line("SIGHUP ignored: the gateway is shutting down", OP_TIMEOUT)
        .await;
    let _ = within("the call in flight", in_flight).await;
    gateway.proc.wait_exit(Duration::from_secs(20)).await;
    gateway.proc.stderr.drained().await;
    assert!(
        gateway.proc.stderr.find("config reloaded").is_none(),
        "reloaded while draining:\n{}",
        gateway.proc.stderr.text()
    );
}

/// The calls shutdown gives up on are cancelled upstream before their
/// upstream sessions close, on a shared and on a per-session mount: the
/// cancels raced the closes, and most were lost (a server that does not
/// tie a session's work to the session ran them on). Each says why (it
/// said "cancelled by the client").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_shutdown_gives_up_on_are_cancelled_upstream() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLED: AtomicUsize = AtomicUsize::new(0);
    static CANCELLED: AtomicUsize = AtomicUsize::new(0);
    let (port, upstream) = scripted_sse_upstream(json!({"tools": {}}), |request| {
        match request["method"].as_str() {
            Some("tools/list") => ScriptedReply::Result(
                json!({"tools": [{"name": "work", "inputSchema": {"type": "object"}}]}),
            ),
            Some("tools/call") => {
                CALLED.fetch_add(1, Ordering::SeqCst);
                ScriptedReply::Stream(vec![(
                    Duration::from_secs(30),
                    json!({"jsonrpc": "2.0", "id": "$request", "result": {"content": []}}),
                )])
            }
            // Counted only when it says why: the client did not cancel.
            Some("notifications/cancelled")
                if request["params"]["reason"] == "the gateway is shutting down" =>
            {
                CANCELLED.fetch_add(1, Ordering::SeqCst);
                ScriptedReply::Result(json!({}))
            }
            _ => ScriptedReply::Result(json!({})),
        }
    })
    .await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"300ms\"\n\n{}{}",
        http_mount("shared", &url, ""),
        http_mount("own", &url, "isolation = \"per_session\""),
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let mut calls = Vec::new();
    for tool in ["shared__work", "own__work"] {
        let peer = client.peer().clone();
        calls.push(tokio::spawn(async move {
            peer.call_tool(rmcp::model::CallToolRequestParams::new(tool))
                .await
        }));
    }
    eventually("the upstream to run both calls", OP_TIMEOUT, || async {
        (CALLED.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    signal(gateway.proc.pid(), "TERM");
    let status = gateway.proc.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "gateway exited with {status}");
    assert_eq!(CANCELLED.load(Ordering::SeqCst), 2);
    for call in calls {
        call.abort();
    }
    upstream.abort();
}
