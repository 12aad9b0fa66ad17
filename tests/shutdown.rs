//! Graceful shutdown: on SIGTERM the gateway refuses new work, lets the
//! request in flight finish within `shutdown_grace`, then ends sessions and
//! leaves no child process behind (asserted by pid).

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
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

    // A call that needs 1.5 s is in flight when SIGTERM arrives.
    let peer = a.peer().clone();
    let in_flight = tokio::spawn(async move {
        let params = rmcp::model::CallToolRequestParams::new("shared__slow").with_arguments(
            json!({"steps": 3, "delay_ms": 500})
                .as_object()
                .cloned()
                .unwrap(),
        );
        peer.call_tool(params).await
    });
    // The signal comes once the upstream is running it (first progress,
    // after 500 ms; a second left).
    eventually("the call to report progress", OP_TIMEOUT, || async {
        (!a.service().progress().is_empty()).then_some(())
    })
    .await;
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
            async move { (request.await.ok()?.status() == 503).then_some(()) }
        },
    )
    .await;

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
