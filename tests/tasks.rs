//! What the gateway itself says about 2025-11-25 tasks, over raw HTTP, in
//! front of the demo server (an rmcp server: it has no tasks). Task relay
//! through upstreams that have them is in tests/interop (server-everything
//! and tests/interop/fixtures/tasks_server.py).

mod common;

use common::{raw::*, *};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A gateway with the stdio demo server mounted as `demo`.
async fn gateway() -> Gateway {
    Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await
}

/// POSTs a JSON-RPC request on `session`.
async fn send(http: &reqwest::Client, gateway: &Gateway, session: &str, request: Value) -> Answer {
    post(
        http,
        &gateway.mcp_url(),
        Some(session),
        JSON_POST,
        request.to_string(),
    )
    .await
}

/// Calls `tool` as a task (id 2, TTL 60 s) on `session`; its task's id.
async fn start_task(
    http: &reqwest::Client,
    gateway: &Gateway,
    session: &str,
    tool: &str,
) -> String {
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "task": {"ttl": 60000}},
    });
    let answer = send(http, gateway, session, call).await;
    answer.body["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {answer:?}"))
        .to_owned()
}

/// A gateway with mount `never` on `task_result_never_ready.py`, and the
/// file in `dir` the fixture writes what it was told to.
async fn never_ready_gateway(dir: &tempfile::TempDir) -> (Gateway, std::path::PathBuf) {
    let told = dir.path().join("told");
    let mount = python_fixture_mount_with_args(
        "never",
        "task_result_never_ready.py",
        &[told.to_str().expect("a UTF-8 path")],
        "",
    );
    (Gateway::start(&format!("{SERVER_TOML}{mount}")).await, told)
}

fn initialize(version: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_declared_from_2025_11_25_on() {
    let gateway = gateway().await;
    let http = reqwest::Client::new();
    for (version, declared) in [("2025-11-25", true), ("2025-06-18", false)] {
        let answer = post(
            &http,
            &gateway.mcp_url(),
            None,
            JSON_POST,
            initialize(version),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        let result = &answer.body["result"];
        assert_eq!(result["protocolVersion"], version, "{answer:?}");
        let tasks = &result["capabilities"]["tasks"];
        if declared {
            assert_eq!(
                tasks,
                &json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
                "{answer:?}"
            );
        } else {
            assert!(tasks.is_null(), "tasks declared at {version}: {answer:?}");
        }
        // The rest of the capabilities are rmcp's, untouched.
        assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_lists_no_tasks() {
    let gateway = gateway().await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let request = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list", "params": {}});
    let answer = send(&http, &gateway, &session, request).await;
    assert_eq!(answer.body["result"], json!({"tasks": []}), "{answer:?}");
}

/// An upstream without tasks runs a `tools/call` with `task` as a plain
/// call (2025-11-25: a receiver that does not support task augmentation
/// processes the request normally); the gateway relays that answer and
/// makes up no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_call_to_an_upstream_without_tasks_is_answered_plainly() {
    let gateway = gateway().await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let request = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "demo__echo", "arguments": {"message": "plain"}, "task": {"ttl": 1000}},
    });
    let answer = send(&http, &gateway, &session, request).await;
    let result: &Value = &answer.body["result"];
    assert_eq!(result["content"][0]["text"], "plain", "{answer:?}");
    assert!(result.get("task").is_none(), "{answer:?}");
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list"});
    let answer = send(&http, &gateway, &session, list).await;
    assert_eq!(answer.body["result"], json!({"tasks": []}), "{answer:?}");
}

/// An upstream whose `tasks/list` keeps handing out cursors, slowly: its
/// pages together take at most the mount's `request_ceiling`, and what
/// they listed is answered. Each page got a fresh ceiling, so one
/// `tasks/list` could run 100 pages long (here 50 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_list_that_never_ends_is_cut_at_the_ceiling() {
    let mount = python_fixture_mount(
        "endless",
        "endless_task_pages.py",
        "timeouts = { request = \"2s\", request_ceiling = \"2s\" }",
    );
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let task_id = start_task(&http, &gateway, &session, "endless__work").await;
    // Well within `within`'s 15 s: the pages stop at the 2 s ceiling.
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/list"});
    let answer = send(&http, &gateway, &session, list).await;
    let listed: Vec<&str> = answer.body["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("tasks: {answer:?}"))
        .iter()
        .filter_map(|task| task["taskId"].as_str())
        .collect();
    assert_eq!(listed, [task_id.as_str()], "{answer:?}");
}

/// A task's result is relayed as the upstream wrote it, its links
/// namespaced: a block rmcp cannot read left them all unqualified, and a
/// priority rmcp reads as an `f32` came back as 0.30000001192092896.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_result_is_relayed_as_written_with_its_links_namespaced() {
    let mount = python_fixture_mount("endless", "endless_task_pages.py", "");
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let task_id = start_task(&http, &gateway, &session, "endless__work").await;
    let result = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id},
    });
    let answer = send(&http, &gateway, &session, result.clone()).await;
    assert_eq!(
        answer.body["result"]["content"],
        json!([
            {"type": "text", "text": "done", "annotations": {"priority": 0.3}},
            {"type": "resource_link", "uri": "endless+demo://a", "name": "a"},
            {"type": "video", "uri": "demo://v"},
            {"type": "resource", "resource": {"uri": "endless+demo://b", "text": "b"}},
        ]),
        "{answer:?}"
    );
    // The next one has only blocks rmcp reads, so it went through its
    // model: the priority came back as 0.30000001192092896.
    let answer = send(&http, &gateway, &session, result).await;
    assert_eq!(
        answer.body["result"]["content"],
        json!([
            {"type": "text", "text": "done", "annotations": {"priority": 0.3}},
            {"type": "resource_link", "uri": "endless+demo://a", "name": "a"},
            {"type": "resource", "resource": {"uri": "endless+demo://b", "text": "b"}},
        ]),
        "{answer:?}"
    );
}

/// The tasks a session created on a shared upstream are let go when the
/// session ends: the upstream's relay held each one's owner (the session's
/// peer, and rmcp's session behind it) until 1,024 newer tasks pushed it
/// out, about 12 KB per ended session (black-box helper). `/status.json`
/// counts the owners a mount's shared session remembers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_sessions_tasks_are_let_go() {
    let mount = python_fixture_mount("endless", "endless_task_pages.py", "");
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let http = reqwest::Client::new();
    let remembered = || async {
        let status = status_json(&gateway).await;
        status["mounts"][0]["tasks"].as_u64()
    };
    let (ending, staying) = (
        open_session(&http, &gateway.mcp_url()).await,
        open_session(&http, &gateway.mcp_url()).await,
    );
    start_task(&http, &gateway, &ending, "endless__work").await;
    let staying_task = start_task(&http, &gateway, &staying, "endless__work").await;
    assert_eq!(remembered().await, Some(2));
    let deleted = delete_session(&http, &gateway.mcp_url(), &ending).await;
    assert!(deleted.is_success(), "DELETE: {deleted}");
    eventually("the ended session's task let go", OP_TIMEOUT, || async {
        (remembered().await == Some(1)).then_some(())
    })
    .await;
    // The other session's task is still its own.
    let get = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": staying_task},
    });
    let answer = send(&http, &gateway, &staying, get).await;
    assert_eq!(answer.body["result"]["taskId"], staying_task, "{answer:?}");
}

/// A request rmcp's handler runs itself (here a `tasks/result` waiting for
/// its task) is given up at once when its session is deleted, and the
/// upstream told why. rmcp let it run 5 s more for nobody, then dropped
/// it, and the upstream was told the client had cancelled it (black-box
/// helper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sessions_waiting_request_is_cancelled_as_its_session_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, told) = never_ready_gateway(&dir).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let task_id = start_task(&http, &gateway, &session, "never__work").await;
    let result = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id},
    });
    let waiting = tokio::spawn({
        let (http, url, session) = (http.clone(), gateway.mcp_url(), session.clone());
        async move {
            http.post(url)
                .header("mcp-session-id", session)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(result.to_string())
                .send()
                .await
        }
    });
    let told_so_far = || std::fs::read_to_string(&told).unwrap_or_default();
    eventually("tasks/result to reach the upstream", OP_TIMEOUT, || async {
        told_so_far().contains("result").then_some(())
    })
    .await;
    let deleted = delete_session(&http, &gateway.mcp_url(), &session).await;
    assert!(deleted.is_success(), "DELETE: {deleted}");
    let cancel = eventually("the upstream to be told", OP_TIMEOUT, || async {
        let text = told_so_far();
        text.lines()
            .find_map(|line| line.strip_prefix("cancelled: ").map(str::to_owned))
    })
    .await;
    assert_eq!(cancel, "the client's session ended");
    waiting.abort();
}

/// A `tasks/result` cut short by its session's end tells its client that
/// the session ended, never that the mount failed ("mount never failed:
/// task cancelled"): the mount did nothing wrong, as for a `tools/call`
/// (`gateway::a_handed_over_call_cut_short_…`). The session's end may
/// close the stream before the answer is written, so a few sessions are
/// tried (up to 8, until two answers came) and at least one answer must
/// arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_request_cut_short_by_its_sessions_end_does_not_blame_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, told) = never_ready_gateway(&dir).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let results_told = || {
        let text = std::fs::read_to_string(&told).unwrap_or_default();
        text.lines().filter(|line| *line == "result").count()
    };
    let mut answers = Vec::new();
    for attempt in 0..8 {
        if answers.len() == 2 {
            break;
        }
        let session = open_session(&http, &mcp).await;
        let task_id = start_task(&http, &gateway, &session, "never__work").await;
        let result = json!({
            "jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id},
        });
        let waiting = {
            let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
            tokio::spawn(async move {
                post_reading_what_arrives(&http, &mcp, &session, result.to_string()).await
            })
        };
        eventually("tasks/result to reach the upstream", OP_TIMEOUT, || async {
            (results_told() > attempt).then_some(())
        })
        .await;
        let deleted = delete_session(&http, &mcp, &session).await;
        assert!(deleted.is_success(), "DELETE: {deleted}");
        let answer = waiting.await.expect("the tasks/result");
        if answer.contains("\"id\":3") {
            answers.push(answer);
        }
    }
    assert!(!answers.is_empty(), "no answer ever reached its client");
    for answer in &answers {
        assert!(
            answer.contains("the session has ended") && !answer.contains("mount never"),
            "{answer}"
        );
    }
}

/// A task-augmented call to a mount that cannot be reached is answered as
/// a plain call to it is: a tool result with `isError` naming the mount
/// (it was a JSON-RPC error, which a model never reads), and no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_call_to_an_unreachable_mount_is_a_tool_error() {
    let config = format!(
        "{SERVER_TOML}[supervision]\ncrash_loop_restarts = 1\ndown_retry = \"1h\"\n\n\
         [mounts.dead]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n\n{}",
        stdio_demo_mount("demo", "")
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    for (id, task) in [(2, Some(json!({"ttl": 60000}))), (3, None)] {
        let mut params = json!({"name": "dead__anything", "arguments": {}});
        if let Some(task) = task {
            params["task"] = task;
        }
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let answer = send(&http, &gateway, &session, call).await;
        let result = &answer.body["result"];
        assert_eq!(result["isError"], true, "{answer:?}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("mount dead is unavailable"), "{answer:?}");
        assert!(result.get("task").is_none(), "{answer:?}");
        // Shaped as every answer for a 2025-11-25 client: no `resultType`
        // (2026-07-28's).
        assert!(result.get("resultType").is_none(), "{answer:?}");
    }
    // Both counted as what they are: tool errors.
    let metrics = within("GET /metrics", async {
        http.get(gateway.url("/metrics")).send().await?.text().await
    })
    .await
    .expect("metrics");
    let series =
        r#"junction_requests_total{mount="dead",method="tools/call",outcome="tool_error"} "#;
    let counted = metrics.lines().find_map(|line| line.strip_prefix(series));
    assert_eq!(counted, Some("2"), "{metrics}");
}

/// A task lives on the per-session upstream that created it: once that
/// has ended, `tasks/get` says the task is unknown without starting a new
/// upstream (a process, a place under `max_upstream_sessions`) to say it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_an_ended_per_session_upstream_is_unknown_without_a_restart() {
    let mount = python_fixture_mount(
        "own",
        "endless_task_pages.py",
        "isolation = \"per_session\"",
    );
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    let task_id = start_task(&http, &gateway, &session, "own__work").await;
    let pid = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "own__pid", "arguments": {}},
    });
    let pid = send(&http, &gateway, &session, pid).await.tool_pid();
    kill(pid);
    eventually("the upstream to be gone", OP_TIMEOUT, || async {
        (!process_exists(pid)).then_some(())
    })
    .await;

    let get =
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": task_id}});
    let answer = send(&http, &gateway, &session, get).await;
    assert_eq!(answer.body["error"]["code"], -32602, "{answer:?}");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the upstream session of mount own that ran it has ended"),
        "says why: {answer:?}"
    );
    assert_eq!(answer.body["error"]["data"]["mount"], "own", "{answer:?}");
    let status = status_json(&gateway).await;
    assert_eq!(
        readyz_mount(&status, "own")["restarts"],
        0,
        "an upstream was started to answer: {status}"
    );
}

/// A reload that removes a mount takes the tasks on it with it: its
/// sessions are told the task is gone (not that the mount is unavailable,
/// as if asking again might help), the same way each time they ask, and
/// `tasks/list` no longer lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_a_mount_a_reload_removed_are_gone_and_no_longer_listed() {
    let kept = stdio_demo_mount("demo", "");
    let removed = python_fixture_mount("gone", "endless_task_pages.py", "");
    let gateway = Gateway::start(&format!("{SERVER_TOML}{kept}{removed}")).await;
    let http = reqwest::Client::new();
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "gone__work", "arguments": {}, "task": {"ttl": 600000}},
    });
    // One session asks with `tasks/get`, the other with `tasks/list`.
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let session = open_session(&http, &gateway.mcp_url()).await;
        let answer = send(&http, &gateway, &session, call.clone()).await;
        let task_id = answer.body["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {answer:?}"))
            .to_owned();
        sessions.push((session, task_id));
    }

    rewrite_config(&gateway.config_path, &format!("{SERVER_TOML}{kept}"));
    eventually("the reload to remove mount gone", OP_TIMEOUT, || async {
        let status = readyz(&gateway).await;
        let mounts = status["mounts"].as_array().cloned().unwrap_or_default();
        (!mounts.iter().any(|mount| mount["name"] == "gone")).then_some(())
    })
    .await;

    let get = |task_id: &str| json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}});
    let (session, task_id) = &sessions[0];
    let answer = send(&http, &gateway, session, get(task_id)).await;
    assert_eq!(answer.body["error"]["code"], -32602, "{answer:?}");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is gone"), "says why: {answer:?}");
    assert_eq!(answer.body["error"]["data"]["mount"], "gone", "{answer:?}");
    for method in ["tasks/get", "tasks/result"] {
        let mut again = get(task_id);
        again["method"] = json!(method);
        let again = send(&http, &gateway, session, again).await;
        assert_eq!(
            again.body["error"], answer.body["error"],
            "{method}: the same answer"
        );
    }

    let (session, task_id) = &sessions[1];
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}});
    let listed = send(&http, &gateway, session, list.clone()).await;
    assert_eq!(listed.body["result"]["tasks"], json!([]), "{listed:?}");
    let answer = send(&http, &gateway, session, get(task_id)).await;
    assert_eq!(answer.body["error"]["code"], -32602, "{answer:?}");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is gone"), "after tasks/list: {answer:?}");
    assert_eq!(answer.body["error"]["data"]["mount"], "gone", "{answer:?}");
    let listed = send(&http, &gateway, session, list).await;
    assert_eq!(listed.body["result"]["tasks"], json!([]), "{listed:?}");
}

/// A `task` that is not a `TaskMetadata` is refused -32602, and the tool
/// does not run: it ran as a plain call (or went upstream as a task with
/// a `ttl` of text), while its client expected a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_is_not_task_metadata_is_refused() {
    let gateway = gateway().await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway.mcp_url()).await;
    for (id, task) in [
        (2, json!("x")),
        (3, json!([])),
        (4, json!(true)),
        (5, json!({"ttl": "abc"})),
    ] {
        let call = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__counter", "arguments": {}, "task": task},
        });
        let answer = send(&http, &gateway, &session, call).await;
        assert_eq!(answer.body["error"]["code"], -32602, "{task}: {answer:?}");
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("`task"), "{task}: {answer:?}");
    }
    let call = json!({
        "jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "demo__counter", "arguments": {}},
    });
    let counted = send(&http, &gateway, &session, call).await;
    assert_eq!(
        counted.body["result"]["content"][0]["text"], "1",
        "a refused call ran: {counted:?}"
    );
}

/// To a client of a version before tasks (its requests name 2025-06-18),
/// `task` means nothing: its call runs as a plain one, whatever `task` it
/// carries, as before tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_from_a_client_before_tasks_is_ignored() {
    let gateway = gateway().await;
    let http = reqwest::Client::new();
    let session = open_session_with(&http, &gateway.mcp_url(), &initialize("2025-06-18")).await;
    for (id, task) in [(2, json!("x")), (3, json!({"ttl": 60000}))] {
        let call = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__counter", "arguments": {}, "task": task},
        });
        let answer = within(
            "a call",
            http.post(gateway.mcp_url())
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-06-18")
                .body(call.to_string())
                .send(),
        )
        .await
        .expect("the call");
        let text = within("its answer", answer.text())
            .await
            .expect("an answer");
        let expected = format!(r#""text":"{}""#, id - 1);
        assert!(text.contains(&expected), "{task}: {text}");
        assert!(!text.contains("\"task\""), "{task}: {text}");
    }
}
