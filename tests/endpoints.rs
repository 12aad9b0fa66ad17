//! `[endpoints.NAME]`: an MCP endpoint of its own at `/mcp/NAME` serving
//! only some of the mounts (for clients that cap how many tools they take).
//! A session sees, lists and reaches only its endpoint's mounts, for its
//! whole life (asleep and woken too); a reload changes endpoints live; a
//! name no endpoint has (or no longer has) is 404.
// `resources/subscribe` is the handshake era's (2025-11-25 and before),
// which is what the gateway serves.
#![allow(deprecated)]

mod common;

use std::time::Duration;

use common::raw::{self, JSON_POST};
use common::*;
use reqwest::StatusCode;
use serde_json::json;

/// `shared` and `private` (per session) run the demo server; `just-private`
/// serves the second alone.
fn config(server_extra: &str, endpoints: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server_extra}\n\n{}{}{endpoints}",
        stdio_demo_mount("shared", ""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    )
}

const JUST_PRIVATE: &str = "[endpoints.just-private]\nmounts = [\"private\"]\n";

/// The mounts `names` (sorted, as `tool_names` gives them) are of.
fn mounts_of(names: &[String]) -> Vec<&str> {
    let mut mounts: Vec<&str> = names
        .iter()
        .filter_map(|name| name.split("__").next())
        .collect();
    mounts.dedup();
    mounts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_lists_and_reaches_only_its_mounts() {
    let gateway = Gateway::start(&config("", JUST_PRIVATE)).await;
    let narrow = connect(&format!("{}/just-private", gateway.mcp_url())).await;
    let names = tool_names(&narrow).await;
    assert_eq!(mounts_of(&names), ["private"], "{names:?}");
    let echo = call(&narrow, "private__echo", json!({"message": "here"})).await;
    assert_eq!(ok_text(&echo), "here");
    // The other mount's tool is unknown here, as a tool of no mount is.
    let refused = call_err(&narrow, "shared__echo", json!({"message": "x"})).await;
    assert_eq!(refused.code.0, -32602, "{refused:?}");
    let resources = within("resources/list", narrow.list_all_resources())
        .await
        .expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["private+demo://readme"]);
    let unlisted = within(
        "resources/read",
        narrow.read_resource(rmcp::model::ReadResourceRequestParams::new(
            "shared+demo://readme",
        )),
    )
    .await;
    assert!(
        unlisted.is_err(),
        "another endpoint's resource: {unlisted:?}"
    );
    let info = narrow.peer_info().expect("server info");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(instructions.contains("\n- private ("), "{instructions}");
    assert!(!instructions.contains("\n- shared ("), "{instructions}");

    // The status says where it is, what it serves and who uses it.
    let status = status_json(&gateway).await;
    assert_eq!(
        status["endpoints"],
        json!([{
            "name": "just-private",
            "path": "/mcp/just-private",
            "sse_path": "/sse/just-private",
            "mounts": ["private"],
            "downstream_sessions": 1,
        }]),
        "{status}"
    );

    // The main endpoint still serves every mount.
    let wide = gateway.connect().await;
    let names = tool_names(&wide).await;
    assert_eq!(mounts_of(&names), ["private", "shared"], "{names:?}");
    // A change to a mount the endpoint does not serve is not told there.
    call(&wide, "shared__toggle_bonus", json!({})).await;
    eventually("the main session to be told", OP_TIMEOUT, || async {
        (wide.service().tool_list_changes() > 0).then_some(())
    })
    .await;
    // Told to every session at once, in one pass: by the time the main
    // session lists the new tool, a notice sent here would have come.
    eventually("the main session to list the bonus", OP_TIMEOUT, || async {
        let names = tool_names(&wide).await;
        names
            .iter()
            .any(|name| name == "shared__bonus")
            .then_some(())
    })
    .await;
    assert_eq!(mounts_of(&tool_names(&narrow).await), ["private"]);
    assert_eq!(narrow.service().tool_list_changes(), 0);
    close(wide).await;
    close(narrow).await;

    // No such endpoint: 404, with what is wrong.
    let http = reqwest::Client::new();
    let nowhere = raw::post(
        &http,
        &format!("{}/nowhere", gateway.mcp_url()),
        None,
        JSON_POST,
        raw::INITIALIZE.to_owned(),
    )
    .await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND, "{nowhere:?}");
    assert!(
        nowhere.text().contains("no endpoint named \"nowhere\""),
        "{nowhere:?}"
    );
    // A name is the path's segment as it is, on both transports.
    for path in ["/mcp/just%2Dprivate", "/sse/just%2Dprivate"] {
        let get = within("GET", http.get(gateway.url(path)).send()).await;
        assert_eq!(get.expect("GET").status(), StatusCode::NOT_FOUND, "{path}");
    }
}

/// A session asleep wakes on its own endpoint, whatever path its waking
/// request took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_endpoint_through_sleep() {
    let gateway =
        Gateway::start(&config("session_hibernate_after = \"200ms\"", JUST_PRIVATE)).await;
    let http = reqwest::Client::new();
    let narrow_url = format!("{}/just-private", gateway.mcp_url());
    let session = raw::open_session(&http, &narrow_url).await;
    eventually(
        "the session to fall asleep",
        Duration::from_secs(10),
        || async {
            let metrics = metrics_text(&gateway).await;
            let asleep = metric_value(&metrics, "junction_downstream_sessions_asleep");
            (asleep == Some(1.0)).then_some(())
        },
    )
    .await;
    // Woken through the main endpoint's path.
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string();
    let listed = raw::post(&http, &gateway.mcp_url(), Some(&session), JSON_POST, list).await;
    assert_eq!(listed.status, StatusCode::OK, "{listed:?}");
    let names: Vec<String> = listed.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools: {listed:?}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(mounts_of(&names), ["private"], "{names:?}");
}

/// A reload adds, changes and removes endpoints at once: a session of a
/// changed endpoint is told its lists changed and lists the new mounts; a
/// session of the main endpoint is told nothing; a removed endpoint's
/// sessions end, their streams open or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_endpoints_live() {
    // Sleeping soon makes the sweep that ends sessions run often.
    let server = "session_hibernate_after = \"2s\"";
    let gateway = Gateway::start(&config(server, JUST_PRIVATE)).await;
    let narrow = connect(&format!("{}/just-private", gateway.mcp_url())).await;
    assert_eq!(mounts_of(&tool_names(&narrow).await), ["private"]);
    let wide = gateway.connect().await;

    rewrite_config(
        &gateway.config_path,
        &config(server, "[endpoints.just-private]\nmounts = [\"shared\"]\n[endpoints.added]\nmounts = [\"shared\", \"private\"]\n"),
    );
    eventually("the session to be told", OP_TIMEOUT, || async {
        (narrow.service().tool_list_changes() > 0).then_some(())
    })
    .await;
    assert_eq!(mounts_of(&tool_names(&narrow).await), ["shared"]);
    let echo = call(&narrow, "shared__echo", json!({"message": "moved"})).await;
    assert_eq!(ok_text(&echo), "moved");
    let added = connect(&format!("{}/added", gateway.mcp_url())).await;
    assert_eq!(mounts_of(&tool_names(&added).await), ["private", "shared"]);
    close(added).await;

    // Removed: its path is 404, for new sessions and the ones open, which
    // end (this one holds its `GET` stream open).
    rewrite_config(&gateway.config_path, &config(server, ""));
    let http = reqwest::Client::new();
    let url = format!("{}/added", gateway.mcp_url());
    // Asked with a `GET` outside any session: an `initialize` would open
    // one each time until the reload.
    eventually("the endpoint to be gone", OP_TIMEOUT, || async {
        let answer = http.get(&url).send().await.ok()?;
        (answer.status() == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    let answer = raw::post(&http, &url, None, JSON_POST, raw::INITIALIZE.to_owned()).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    let gone = within("tools/list", narrow.list_all_tools()).await;
    let error = gone.expect_err("the endpoint is gone").to_string();
    assert!(
        error.contains("no endpoint named \"just-private\""),
        "{error}"
    );
    eventually(
        "the removed endpoint's session to end",
        OP_TIMEOUT,
        || async {
            let status = status_json(&gateway).await;
            (status["downstream_sessions"] == 1).then_some(())
        },
    )
    .await;
    // The main session's lists never changed.
    assert_eq!(wide.service().tool_list_changes(), 0);
    assert_eq!(mounts_of(&tool_names(&wide).await), ["private", "shared"]);
    close(wide).await;
}

/// A reload keeps the running `[server]`: a new endpoint's path must not
/// be one the running older transport serves, whatever the new file says
/// of `sse_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_refuses_an_endpoint_on_a_running_path() {
    let mut gateway = Gateway::start(&config("sse_path = \"/mcp/sse\"", "")).await;
    rewrite_config(
        &gateway.config_path,
        &config(
            "sse_path = \"/legacy\"",
            "[endpoints.sse]\nmounts = [\"shared\"]\n",
        ),
    );
    gateway
        .proc
        .wait_for_line("invalid config with the running paths", OP_TIMEOUT)
        .await;
}

/// What the shared demo process is subscribed to, as its `subscriptions`
/// tool says (`None` while the call fails).
async fn held_by_shared(client: &Client) -> Option<Vec<String>> {
    let params = rmcp::model::CallToolRequestParams::new("shared__subscriptions");
    let result = within("tools/call subscriptions", client.call_tool(params))
        .await
        .ok()?;
    (result.is_error != Some(true)).then(|| text(&result).lines().map(str::to_owned).collect())
}

/// A reload that takes a mount off an endpoint ends what its sessions
/// hold there: a subscription is let go of upstream, a per-session
/// upstream is closed, and the mount's names leave their lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_taken_off_an_endpoint_is_let_go_of() {
    let both = "[endpoints.ide]\nmounts = [\"shared\", \"private\"]\n";
    let gateway = Gateway::start(&config("", both)).await;
    let narrow = connect(&format!("{}/ide", gateway.mcp_url())).await;
    let observer = gateway.connect().await;
    within(
        "resources/subscribe",
        narrow.subscribe(rmcp::model::SubscribeRequestParams::new(
            "shared+demo://notes/a",
        )),
    )
    .await
    .expect("subscribed");
    let held = |expected: Vec<String>| {
        let observer = &observer;
        async move {
            held_by_shared(observer)
                .await
                .filter(|uris| *uris == expected)
        }
    };
    eventually("the upstream to hold the note", OP_TIMEOUT, || {
        held(vec!["demo://notes/a".to_owned()])
    })
    .await;

    rewrite_config(
        &gateway.config_path,
        &config("", JUST_PRIVATE.replace("just-private", "ide").as_str()),
    );
    eventually("the upstream to be let go of the note", OP_TIMEOUT, || {
        held(Vec::new())
    })
    .await;
    assert_eq!(mounts_of(&tool_names(&narrow).await), ["private"]);

    // Its per-session upstream of a mount taken off too is closed (its
    // process would run until the session ended).
    let pid = call_pid(&narrow, "private__pid").await;
    rewrite_config(
        &gateway.config_path,
        &config("", "[endpoints.ide]\nmounts = [\"shared\"]\n"),
    );
    eventually("the per-session process to exit", OP_TIMEOUT, || async {
        (!process_alive(pid)).then_some(())
    })
    .await;
    assert_eq!(mounts_of(&tool_names(&narrow).await), ["shared"]);
    close(observer).await;
    close(narrow).await;
}
