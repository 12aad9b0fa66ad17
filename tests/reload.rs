//! Hot reload end to end: the real gateway serving a config file that the
//! test rewrites (and signals with SIGHUP) while a client session is open.
//!
//! What is checked is what a client and the process table can see: list
//! change notifications, the tool list, the pids the demo servers report,
//! calls in flight, and the gateway's log lines about each reload.

mod common;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use common::*;
use serde_json::{json, Value};

/// How long a reload may take to be noticed (the file is polled every
/// second) and applied.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a retired upstream's child may take to go away.
const CHILD_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's log lines that contain every one of `needles`.
fn log_lines(gateway: &Gateway, needles: &[&str]) -> Vec<String> {
    gateway
        .proc
        .stderr
        .snapshot()
        .into_iter()
        .filter(|line| needles.iter().all(|needle| line.contains(needle)))
        .collect()
}

/// Waits until the log holds `count` lines containing every one of
/// `needles`, and returns the last of them.
async fn wait_for_log(gateway: &Gateway, needles: &[&str], count: usize) -> String {
    eventually(
        &format!("{count} log line(s) with {needles:?}"),
        RELOAD_TIMEOUT,
        || async {
            let lines = log_lines(gateway, needles);
            (lines.len() >= count).then(|| lines.last().cloned().unwrap_or_default())
        },
    )
    .await
}

/// Waits until `client`'s slow call has reported progress: it is in
/// flight upstream.
async fn until_in_flight(client: &Client) {
    eventually(
        "the slow call to be in flight upstream",
        RELOAD_TIMEOUT,
        || async { (!client.service().progress().is_empty()).then_some(()) },
    )
    .await;
}

/// Waits until `client` has been told its tools list changed more than
/// the `before` times it had been.
async fn until_tools_changed(client: &Client, before: usize) {
    eventually("tools/list_changed", RELOAD_TIMEOUT, || async {
        (client.service().tool_list_changes() > before).then_some(())
    })
    .await;
}

/// A config of `mounts` (TOML) on a free port.
fn config(mounts: &str) -> String {
    format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{mounts}")
}

/// A gateway with the stdio demo mounted `per_session` as `own`, and a
/// client that has listed its tools (so its profile's lists are known).
async fn listed_per_session_demo() -> (Gateway, Client, Vec<String>) {
    let gateway = Gateway::start(&config(&stdio_demo_mount(
        "own",
        "isolation = \"per_session\"",
    )))
    .await;
    let client = gateway.connect().await;
    let listed = tool_names(&client).await;
    assert!(listed.contains(&"own__echo".to_owned()), "{listed:?}");
    (gateway, client, listed)
}

fn has_prefix(names: &[String], prefix: &str) -> bool {
    names.iter().any(|name| name.starts_with(prefix))
}

fn slow_args(steps: u32, delay_ms: u64) -> Value {
    json!({"steps": steps, "delay_ms": delay_ms})
}

/// The config before the edit: an unchanged shared mount `keep`, an
/// unchanged per_session mount `own`, a shared mount `changed` that the
/// edit changes, and a per_session mount `gone` that the edit removes.
fn config_before() -> String {
    format!(
        "{SERVER_TOML}{}{}{}{}",
        stdio_demo_mount("keep", ""),
        stdio_demo_mount("own", "isolation = \"per_session\""),
        stdio_demo_mount("changed", ""),
        stdio_demo_mount("gone", "isolation = \"per_session\""),
    )
}

/// The config after the edit: `added` is new, `changed` has an env var,
/// `gone` is removed, `keep` and `own` are exactly as before.
fn config_after() -> String {
    format!(
        "{SERVER_TOML}{}{}{}{}",
        stdio_demo_mount("keep", ""),
        stdio_demo_mount("own", "isolation = \"per_session\""),
        stdio_demo_mount("changed", "env = { RELOAD_TEST_MARK = \"2\" }"),
        stdio_demo_mount("added", ""),
    )
}

/// `config_after` plus a mount `rejected`, with two problems: an unknown
/// isolation mode for `own` and a bad `[timeouts]` duration. Were it
/// applied, `rejected__*` would be listed and `own` restarted.
fn config_invalid() -> String {
    format!(
        "{SERVER_TOML}[timeouts]\nrequest = \"soon\"\n\n{}{}{}{}{}",
        stdio_demo_mount("keep", ""),
        stdio_demo_mount("own", "isolation = \"sometimes\""),
        stdio_demo_mount("changed", "env = { RELOAD_TEST_MARK = \"2\" }"),
        stdio_demo_mount("added", ""),
        stdio_demo_mount("rejected", ""),
    )
}

/// One edit adds, changes and removes mounts while a client session is
/// open with a call in flight: only what changed is touched. Then an
/// invalid edit is rejected with every problem logged, and SIGHUP reloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_touches_only_what_changed() {
    let gateway = Gateway::start(&config_before()).await;
    let client = gateway.connect().await;

    let names = tool_names(&client).await;
    for prefix in ["keep__", "own__", "changed__", "gone__"] {
        assert!(has_prefix(&names, prefix), "no {prefix}* in {names:?}");
    }
    assert!(!has_prefix(&names, "added__"), "{names:?}");

    let keep_pid = call_pid(&client, "keep__pid").await;
    let own_pid = call_pid(&client, "own__pid").await;
    let changed_pid = call_pid(&client, "changed__pid").await;
    let gone_pid = call_pid(&client, "gone__pid").await;
    for pid in [keep_pid, own_pid, changed_pid, gone_pid] {
        assert!(process_alive(pid), "demo process {pid} is not running");
    }
    // The per-session upstreams are the session's own processes.
    assert_ne!(own_pid, keep_pid);
    assert_ne!(gone_pid, keep_pid);
    let list_changes_before = client.service().tool_list_changes();

    // A long call on `keep` is in flight across the whole reload.
    let slow_done = AtomicBool::new(false);
    let slow = async {
        let result = call(&client, "keep__slow", slow_args(80, 100)).await;
        slow_done.store(true, Ordering::SeqCst);
        result
    };
    let edit = async {
        until_in_flight(&client).await;
        rewrite_config(&gateway.config_path, &config_after());
        let line = wait_for_log(&gateway, &["config reloaded"], 1).await;
        for field in [
            "trigger=config file changed",
            "added=added",
            "removed=gone",
            "changed=changed",
        ] {
            assert!(line.contains(field), "no {field:?} in {line:?}");
        }
        // Still ready while the added mount starts: a reload applied by
        // every replica at once must not take them all out of service.
        let readyz = within("GET /readyz", reqwest::get(gateway.url("/readyz")))
            .await
            .expect("readyz");
        assert_eq!(readyz.status(), 200, "readiness dropped during a reload");
        assert!(
            !slow_done.load(Ordering::SeqCst),
            "the slow call ended before the reload finished; it proves nothing"
        );
    };
    let (slow_result, ()) = tokio::join!(slow, edit);
    assert_eq!(ok_text(&slow_result), "done after 80 steps");

    // The client is told, and its lists show the new mount set.
    until_tools_changed(&client, list_changes_before).await;
    let names = eventually(
        "the added mount's tools to be listed",
        RELOAD_TIMEOUT,
        || async {
            let names = tool_names(&client).await;
            has_prefix(&names, "added__").then_some(names)
        },
    )
    .await;
    for prefix in ["keep__", "own__", "changed__", "added__"] {
        assert!(has_prefix(&names, prefix), "no {prefix}* in {names:?}");
    }
    assert!(!has_prefix(&names, "gone__"), "{names:?}");
    let unknown = call_err(&client, "gone__pid", Value::Null).await;
    assert_eq!(
        unknown.code,
        rmcp::model::ErrorCode::INVALID_PARAMS,
        "{unknown:?}"
    );
    let echoed = call(&client, "added__echo", json!({"message": "new"})).await;
    assert_eq!(ok_text(&echoed), "new");

    // Unchanged mounts were not touched: same processes, same session.
    assert_eq!(call_pid(&client, "keep__pid").await, keep_pid);
    assert_eq!(call_pid(&client, "own__pid").await, own_pid);
    // The changed mount runs a new process; the old one is gone.
    let changed_pid_after = call_pid(&client, "changed__pid").await;
    assert_ne!(
        changed_pid_after, changed_pid,
        "`changed` was not restarted"
    );
    assert!(process_alive(changed_pid_after));
    // An operator sees it on /metrics (every mount has answered since): the reload counted, each mount of
    // the new config in its phase, the removed one gone.
    let metrics = metrics_text(&gateway).await;
    let reload_metrics = |metrics: &str| {
        (
            metric_value(metrics, "junction_config_reloads_total{result=\"applied\"}"),
            metric_value(
                metrics,
                "junction_config_reloads_total{result=\"rejected\"}",
            ),
            metric_value(metrics, "junction_config_last_reload_successful"),
        )
    };
    assert_eq!(
        reload_metrics(&metrics),
        (Some(1.0), Some(0.0), Some(1.0)),
        "{metrics}"
    );
    for mount in ["keep", "own", "changed", "added"] {
        let state = |state: &str| {
            metric_value(
                &metrics,
                &format!("junction_mount_state{{mount=\"{mount}\",state=\"{state}\"}}"),
            )
        };
        assert_eq!(state("ready"), Some(1.0), "{mount}: {metrics}");
        assert_eq!(state("down"), Some(0.0), "{mount}: {metrics}");
    }
    assert!(
        !metrics.contains("junction_mount_state{mount=\"gone\""),
        "{metrics}"
    );
    // Nor its upstream sessions (a series left at 0 for ever, one more
    // with each rename).
    assert!(
        !metrics.contains("junction_upstream_sessions{mount=\"gone\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("junction_upstream_sessions{mount=\"own\"}"),
        "{metrics}"
    );
    // The removed mount's per-session child, and the replaced mount's old
    // child, end and are reaped.
    eventually(
        "the removed mount's per-session child and the replaced child to exit",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_alive(gone_pid) && !process_alive(changed_pid)).then_some(()) },
    )
    .await;
    eventually(
        "the retired children to be reaped",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_exists(gone_pid) && !process_exists(changed_pid)).then_some(()) },
    )
    .await;
    assert!(process_alive(keep_pid) && process_alive(own_pid));

    // An invalid edit is rejected, every problem logged with its field path;
    // the running config keeps serving unchanged.
    let names_before = tool_names(&client).await;
    let list_changes_before = client.service().tool_list_changes();
    rewrite_config(&gateway.config_path, &config_invalid());
    let rejected = wait_for_log(&gateway, &["config reload rejected"], 1).await;
    assert!(
        rejected.contains("the running config keeps serving"),
        "{rejected:?}"
    );
    assert!(rejected.contains("problems=2"), "{rejected:?}");
    assert!(
        rejected.contains("trigger=config file changed"),
        "{rejected:?}"
    );
    for path in ["mounts.own.isolation", "timeouts.request"] {
        let problems = log_lines(&gateway, &["invalid config", path]);
        assert_eq!(problems.len(), 1, "no problem logged for {path}");
        assert!(problems[0].contains("ERROR"), "{problems:?}");
    }
    // Each problem names the offending value too.
    for value in ["\"sometimes\"", "\"soon\""] {
        assert_eq!(
            log_lines(&gateway, &["invalid config", value]).len(),
            1,
            "{value}"
        );
    }
    assert_eq!(log_lines(&gateway, &["config reloaded"]).len(), 1);
    assert_eq!(tool_names(&client).await, names_before);
    assert_eq!(call_pid(&client, "keep__pid").await, keep_pid);
    assert_eq!(call_pid(&client, "own__pid").await, own_pid);
    assert_eq!(call_pid(&client, "changed__pid").await, changed_pid_after);
    let echoed = call(&client, "added__echo", json!({"message": "still"})).await;
    assert_eq!(ok_text(&echoed), "still");
    assert_eq!(client.service().tool_list_changes(), list_changes_before);

    // SIGHUP reads the file again: still invalid, still rejected.
    hang_up(&gateway);
    let line = wait_for_log(&gateway, &["config reload rejected", "trigger=SIGHUP"], 1).await;
    assert!(line.contains("problems=2"), "{line:?}");
    assert_eq!(
        reload_metrics(&metrics_text(&gateway).await),
        (Some(1.0), Some(2.0), Some(0.0))
    );

    // The file is fixed (the poll applies it: nothing to change); then
    // SIGHUP with an unchanged file reloads it once more, touching nothing.
    rewrite_config(&gateway.config_path, &config_after());
    let line = wait_for_log(&gateway, &["config reloaded"], 2).await;
    assert!(line.contains("trigger=config file changed"), "{line:?}");
    hang_up(&gateway);
    let line = wait_for_log(&gateway, &["config reloaded", "trigger=SIGHUP"], 1).await;
    for field in ["added= ", "removed= ", "changed= ", "unchanged=4"] {
        assert!(line.contains(field), "no {field:?} in {line:?}");
    }
    assert_eq!(call_pid(&client, "keep__pid").await, keep_pid);
    assert_eq!(call_pid(&client, "own__pid").await, own_pid);
    assert_eq!(call_pid(&client, "changed__pid").await, changed_pid_after);
    assert_eq!(tool_names(&client).await, names_before);
    assert_eq!(
        reload_metrics(&metrics_text(&gateway).await),
        (Some(3.0), Some(2.0), Some(1.0))
    );

    // A change that waits for a restart is applied but for it: the file
    // and the running config differ, and the gauge says so; the warning
    // names the key, not only its section.
    rewrite_config(
        &gateway.config_path,
        &format!("[telemetry]\nlog_level = \"info\"\n\n{}", config_after()),
    );
    wait_for_log(
        &gateway,
        &["changes to [telemetry] (log_level) take effect after a restart"],
        1,
    )
    .await;
    wait_for_log(&gateway, &["config reloaded"], 4).await;
    assert_eq!(
        reload_metrics(&metrics_text(&gateway).await),
        (Some(4.0), Some(2.0), Some(0.0))
    );
    close(client).await;
}

/// A mount added by a reload that takes a while to start does not make a
/// ready gateway unready: `/readyz` stays 200 and shows it `starting`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_never_makes_a_ready_gateway_unready() {
    reload_adds_a_slow_mount(true).await;
}

/// The same when nothing asked `/readyz` before the reload: readiness is
/// the gateway's, not its probe's (it was latched only when asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_readiness_nobody_asked_for() {
    reload_adds_a_slow_mount(false).await;
}

/// Reloads a gateway serving `keep` (ready, asked or not) to add a mount
/// that starts answering only after 5 s; `/readyz` must stay 200.
async fn reload_adds_a_slow_mount(asked_before: bool) {
    let before = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n{}",
        stdio_demo_mount("keep", "")
    );
    let gateway = if asked_before {
        Gateway::start(&before).await
    } else {
        // Ready without asking: a call through `keep` is answered once its
        // first start has finished.
        let gateway = Gateway::launch(&before, "toml", &[]).await;
        let client = gateway.connect().await;
        assert_eq!(
            ok_text(&call(&client, "keep__echo", json!({"message": "up"})).await),
            "up"
        );
        close(client).await;
        gateway
    };
    // Starts answering only after 5 s.
    let slow_start = format!(
        "[mounts.late]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 5; exec {BIN} demo-server\"]\n\n"
    );
    rewrite_config(&gateway.config_path, &format!("{before}{slow_start}"));
    wait_for_log(&gateway, &["config reloaded", "added=late"], 1).await;
    let response = within("GET /readyz", reqwest::get(gateway.url("/readyz")))
        .await
        .expect("readyz");
    assert_eq!(response.status(), 200);
    let body: Value = within("readyz body", response.json())
        .await
        .expect("readyz JSON");
    assert_eq!(readyz_mount(&body, "late")["state"], "starting", "{body}");
    assert_eq!(body["ready"], true, "{body}");
}

/// Two pass-through mounts offer the same names and the first in the file
/// serves them: a reload that only swaps their order changes what every
/// name reaches, so clients are told their lists changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_reorders_pass_through_mounts_is_announced() {
    let config = |first: &str, second: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n{}{}",
            stdio_demo_mount(first, "namespace = \"\""),
            stdio_demo_mount(second, "namespace = \"\""),
        )
    };
    let gateway = Gateway::start(&config("one", "two")).await;
    let client = gateway.connect().await;
    let pid_before = call_pid(&client, "pid").await;
    let list_changes_before = client.service().tool_list_changes();

    rewrite_config(&gateway.config_path, &config("two", "one"));
    let line = wait_for_log(&gateway, &["config reloaded"], 1).await;
    assert!(line.contains("unchanged=2"), "{line}");
    until_tools_changed(&client, list_changes_before).await;
    let pid_after = call_pid(&client, "pid").await;
    assert_ne!(pid_after, pid_before, "the first mount still serves `pid`");
    close(client).await;
}

/// A mount a reload changes keeps its names while its new upstream starts:
/// a call waits for the start, as after a restart. Its catalog was empty
/// until the new one's discovery, so a pass-through name it won went to
/// the other mount that offers it meanwhile (a different server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_mount_keeps_its_names_while_it_restarts() {
    let config = |first: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n{first}{}",
            stdio_demo_mount("second", "namespace = \"\""),
        )
    };
    let gateway = Gateway::start(&config(&stdio_demo_mount("first", "namespace = \"\""))).await;
    let client = gateway.connect().await;
    let pid_before = call_pid(&client, "pid").await;

    // `first` changes (now started through `sh`, answering after 2 s).
    let slow_first = format!(
        "[mounts.first]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 2; exec {BIN} demo-server\"]\nnamespace = \"\"\n\n"
    );
    rewrite_config(&gateway.config_path, &config(&slow_first));
    wait_for_log(&gateway, &["config reloaded", "changed=first"], 1).await;
    let during = call_pid(&client, "pid").await;
    wait_state(&gateway, "first", "ready").await;
    let after = call_pid(&client, "pid").await;
    assert_ne!(after, pid_before, "the old `first` still serves");
    assert_eq!(
        during, after,
        "a call during the restart went to another mount than the one that serves it after"
    );
    close(client).await;
}

/// A changed stdio mount's new child starts once the old one has exited: a
/// server holding something exclusive (here a lock file; a fixed port, a
/// browser profile) failed its first starts against the old child still
/// shutting down, counted as restarts, and could go `down`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_stdio_mount_starts_after_the_old_child_exits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lock = dir.path().join("server.lock");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exclusive_lock.py");
    let config = |generation: u32| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[mounts.locked]\ncommand = \"python3\"\nargs = [{:?}, {:?}]\nenv = {{ GENERATION = \"{generation}\" }}\n",
            fixture.display().to_string(),
            lock.display().to_string(),
        )
    };
    let gateway = Gateway::start(&config(1)).await;
    let client = gateway.connect().await;
    let before = call_pid(&client, "locked__pid").await;

    rewrite_config(&gateway.config_path, &config(2));
    wait_for_log(&gateway, &["config reloaded", "changed=locked"], 1).await;
    let after = call_pid(&client, "locked__pid").await;
    assert_ne!(after, before, "the old child still serves");
    let status = status_json(&gateway).await;
    let mount = readyz_mount(&status, "locked");
    assert_eq!(
        mount["restarts"], 0,
        "the new child failed to start: {mount}"
    );
    close(client).await;
}

/// A stdio mount changed twice while its first version still lets a call
/// finish: the third version's child starts once the first's has exited,
/// not beside it (it waited only for the second, which closed at once,
/// and a server holding a lock failed its starts until the mount went
/// down). So does one removed, then added back, while it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_mount_changed_twice_while_draining_starts_after_every_old_child() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lock = dir.path().join("server.lock");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exclusive_lock.py");
    let mount = |generation: u32| {
        format!(
            "[mounts.locked]\ncommand = \"python3\"\nargs = [{:?}, {:?}]\nenv = {{ GENERATION = \"{generation}\" }}\n",
            fixture.display().to_string(),
            lock.display().to_string(),
        )
    };
    let config = |mounts: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n{}{mounts}",
            stdio_demo_mount("keep", "")
        )
    };
    let gateway = Gateway::start(&config(&mount(1))).await;
    let client = gateway.connect().await;
    for (edits, why) in [
        ([mount(2), mount(3)], "changed twice"),
        ([String::new(), mount(4)], "removed, then added back"),
    ] {
        let before = call_pid(&client, "locked__pid").await;
        let reloads_before = log_lines(&gateway, &["config reloaded"]).len();
        let progress_before = client.service().progress().len();
        let (slept, ()) = tokio::join!(
            call(&client, "locked__slow", json!({"seconds": 3})),
            async {
                eventually("the slow call in flight", RELOAD_TIMEOUT, || async {
                    (client.service().progress().len() > progress_before).then_some(())
                })
                .await;
                for (n, edit) in edits.iter().enumerate() {
                    rewrite_config(&gateway.config_path, &config(edit));
                    wait_for_log(&gateway, &["config reloaded"], reloads_before + n + 1).await;
                }
            }
        );
        assert_eq!(
            ok_text(&slept),
            "slept",
            "{why}: the first version answered"
        );
        let after = call_pid(&client, "locked__pid").await;
        assert_ne!(after, before, "{why}: a new child serves");
        let status = status_json(&gateway).await;
        let locked = readyz_mount(&status, "locked");
        assert_eq!(
            locked["restarts"], 0,
            "{why}: a child failed to start: {locked}"
        );
    }
    close(client).await;
}

/// An edit of a mount's own tuning (its timeouts, its
/// `max_upstream_sessions`) applies to the running mount: its upstreams,
/// their state and a call in flight go on (they were restarted, the call
/// failed as if the upstream had gone away), and the new timeout holds
/// for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_whose_tuning_changes_keeps_running() {
    let config = |request: &str, max: u32| {
        format!(
            "{SERVER_TOML}{}{}",
            stdio_demo_mount(
                "tuned",
                &format!("timeouts = {{ request = \"{request}\" }}")
            ),
            stdio_demo_mount(
                "own",
                &format!("isolation = \"per_session\"\nmax_upstream_sessions = {max}")
            ),
        )
    };
    let gateway = Gateway::start(&config("30s", 2)).await;
    let client = gateway.connect().await;
    let shared_pid = call_pid(&client, "tuned__pid").await;
    let own_pid = call_pid(&client, "own__pid").await;
    let stored = call(
        &client,
        "tuned__remember",
        json!({"key": "k", "value": "v"}),
    )
    .await;
    assert_eq!(ok_text(&stored), "stored k");

    let slow_done = AtomicBool::new(false);
    let slow = async {
        // Silent for 5 s (no progress without a token): longer than a
        // reload takes to be noticed and applied.
        let result = call(&client, "tuned__slow", slow_args(10, 500)).await;
        slow_done.store(true, Ordering::SeqCst);
        result
    };
    let edit = async {
        rewrite_config(&gateway.config_path, &config("300ms", 3));
        let line = wait_for_log(&gateway, &["config reloaded"], 1).await;
        assert!(line.contains("retuned=tuned,own"), "{line}");
        assert!(line.contains("changed= "), "{line}");
        assert!(
            !slow_done.load(Ordering::SeqCst),
            "the slow call ended before the reload; it proves nothing"
        );
    };
    let (slow_result, ()) = tokio::join!(slow, edit);
    assert_eq!(ok_text(&slow_result), "done after 10 steps");
    assert_eq!(call_pid(&client, "tuned__pid").await, shared_pid);
    assert_eq!(call_pid(&client, "own__pid").await, own_pid);
    let recalled = call(&client, "tuned__recall", json!({"key": "k"})).await;
    assert_eq!(ok_text(&recalled), "v");

    let timed_out = call(&client, "tuned__slow", slow_args(3, 500)).await;
    assert_eq!(timed_out.is_error, Some(true), "{timed_out:?}");
    assert!(text(&timed_out).contains("300ms"), "{timed_out:?}");
    close(client).await;
}

/// `[supervision]` is reloaded live, for a mount already waiting too: a
/// `down_retry` cut from an hour to a moment applies now, not after the
/// hour the mount was already waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervision_reload_reaches_a_mount_already_down() {
    let config = |down_retry: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[supervision]\ncrash_loop_restarts = 1\ndown_retry = \"{down_retry}\"\n\n[mounts.broken]\ncommand = \"false\"\n"
        )
    };
    let gateway = Gateway::start(&config("1h")).await;
    let restarts = || async {
        let status = status_json(&gateway).await;
        let mount = readyz_mount(&status, "broken");
        (mount["health"] == "down").then(|| mount["restarts"].as_u64())?
    };
    let before = eventually("the mount to be down", RELOAD_TIMEOUT, restarts).await;

    rewrite_config(&gateway.config_path, &config("100ms"));
    wait_for_log(&gateway, &["config reloaded"], 1).await;
    eventually("a retry within moments", RELOAD_TIMEOUT, || async {
        restarts().await.filter(|now| *now > before)
    })
    .await;
}

/// A call waiting for a changed mount's start goes to the mount serving
/// the name if another reload replaces that one meanwhile: it was told
/// "the mount was removed", though the name never stopped being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_on_a_replaced_mount_goes_to_its_successor() {
    let gateway = Gateway::start(&config(&stdio_demo_mount("first", ""))).await;
    let client = gateway.connect().await;
    let before = call_pid(&client, "first__pid").await;

    // `first` changes to one that takes 3 s to start; a call waits for it.
    let slow = format!(
        "[mounts.first]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 3; exec {BIN} demo-server\"]\n\n"
    );
    rewrite_config(&gateway.config_path, &config(&slow));
    wait_for_log(&gateway, &["config reloaded", "changed=first"], 1).await;
    let waiting = tokio::spawn(async move {
        let pid = call_pid(&client, "first__pid").await;
        (client, pid)
    });
    // Replaced again before it has started.
    rewrite_config(
        &gateway.config_path,
        &config(&stdio_demo_mount("first", "env = { AGAIN = \"1\" }")),
    );
    wait_for_log(&gateway, &["config reloaded", "changed=first"], 2).await;
    let (client, after) = waiting.await.expect("the waiting call");
    assert_ne!(after, before, "answered by the first `first`");
    close(client).await;
}

/// A changed per-session mount lists, to a client whose profile is not
/// the full one, what the mount before it listed for that profile until
/// its own discovery for it: with the full profile's catalog alone
/// inherited, that client's list waited for a new discovery and, when it
/// failed (here: the new mount's second start), was shown the full
/// profile's tools (`ask_model`, for a client without sampling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_per_session_mount_keeps_each_profiles_lists() {
    let (gateway, client, before) = listed_per_session_demo().await;
    assert!(!before.contains(&"own__ask_model".to_owned()), "{before:?}");

    let starts = tempfile::tempdir().expect("a temp dir");
    rewrite_config(
        &gateway.config_path,
        &config(&second_start_fails_mount("own", starts.path())),
    );
    wait_for_log(&gateway, &["config reloaded", "changed=own"], 1).await;
    // The new mount's own start first (the script's first), then, once
    // it is ready, the client's profile's: its second, the failing one.
    wait_state(&gateway, "own", "ready").await;
    let starts = starts.path().join("starts");
    eventually("the profile's start", RELOAD_TIMEOUT, || async {
        let count: u32 = std::fs::read_to_string(&starts).ok()?.trim().parse().ok()?;
        (count >= 2).then_some(())
    })
    .await;
    let after = tool_names(&client).await;
    assert_eq!(after, before, "the client's own profile's lists");
    close(client).await;
}

/// A changed per-session mount finds out its lists for every profile it
/// inherited, once its own start is done, and tells their clients what
/// changed: a client whose profile is not the full one was told its lists
/// changed at the reload and, until it listed again, was listed the old
/// upstream's tools (names the new one does not have).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_per_session_mount_tells_each_profile_its_new_lists() {
    let (gateway, client, _) = listed_per_session_demo().await;
    let told = client.service().tool_list_changes();

    let other = python_fixture_mount(
        "own",
        "endless_task_pages.py",
        "isolation = \"per_session\"",
    );
    rewrite_config(&gateway.config_path, &config(&other));
    wait_for_log(&gateway, &["config reloaded", "changed=own"], 1).await;
    // Told at the reload, and again once its profile's lists are known,
    // without listing in between.
    until_tools_changed(&client, told + 1).await;
    let after = tool_names(&client).await;
    assert!(
        after.contains(&"own__work".to_owned()) && !after.contains(&"own__echo".to_owned()),
        "{after:?}"
    );
    close(client).await;
}

/// A per_session mount a reload makes shared starts only its own upstream:
/// it inherited a catalog for each client profile, and the discovery of
/// each was started as for a per_session mount, each an upstream (a
/// child) serving nothing for as long as the mount lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_made_shared_starts_one_upstream() {
    let (gateway, client, _) = listed_per_session_demo().await;

    let starts = tempfile::tempdir().expect("a temp dir");
    let count = starts.path().join("starts");
    let script = format!("echo start >> {}; exec {BIN} demo-server", count.display());
    let shared = format!("[mounts.own]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n\n");
    rewrite_config(&gateway.config_path, &config(&shared));
    wait_for_log(&gateway, &["config reloaded", "changed=own"], 1).await;
    wait_state(&gateway, "own", "ready").await;
    assert_eq!(
        ok_text(&call(&client, "own__echo", json!({"message": "hi"})).await),
        "hi"
    );
    // What started by now has written its line: a start for another
    // profile begins as the mount becomes ready.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = std::fs::read_to_string(&count).unwrap_or_default();
    assert_eq!(started.lines().count(), 1, "{started:?}");
    close(client).await;
}

/// `include_tools` and `exclude_tools` decide what a mount offers, for a
/// shared and a per-session mount alike: hidden tools are not listed and a
/// call to one is an unknown tool. A reload that changes only them keeps
/// the upstreams running (same pids) and tells sessions the tools list
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_tool_patterns_changes_the_lists_not_the_upstreams() {
    let config = |patterns: &str| {
        format!(
            "{SERVER_TOML}{}{}",
            stdio_demo_mount("shared", patterns),
            stdio_demo_mount("own", &format!("isolation = \"per_session\"\n{patterns}")),
        )
    };
    let gateway = Gateway::start(&config("include_tools = [\"pid\", \"e*\"]")).await;
    let client = gateway.connect().await;
    let mut names = tool_names(&client).await;
    names.sort();
    assert_eq!(
        names,
        ["own__echo", "own__pid", "shared__echo", "shared__pid"]
    );
    let shared_pid = call_pid(&client, "shared__pid").await;
    let own_pid = call_pid(&client, "own__pid").await;
    for hidden in ["shared__add", "own__counter"] {
        let refused = call_err(&client, hidden, json!({"a": 1, "b": 2})).await;
        assert_eq!(
            refused.code,
            rmcp::model::ErrorCode::INVALID_PARAMS,
            "{refused:?}"
        );
        assert!(refused.message.contains(hidden), "{refused:?}");
    }

    let list_changes_before = client.service().tool_list_changes();
    rewrite_config(&gateway.config_path, &config("exclude_tools = [\"echo\"]"));
    let line = wait_for_log(&gateway, &["config reloaded"], 1).await;
    assert!(line.contains("retuned=shared,own"), "{line}");
    assert!(line.contains("changed= "), "{line}");
    until_tools_changed(&client, list_changes_before).await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"shared__add".to_owned()), "{names:?}");
    assert!(names.contains(&"own__counter".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|name| name.ends_with("__echo")),
        "{names:?}"
    );
    let added = call(&client, "shared__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(ok_text(&added), "3");
    let refused = call_err(&client, "own__echo", json!({"text": "x"})).await;
    assert_eq!(
        refused.code,
        rmcp::model::ErrorCode::INVALID_PARAMS,
        "{refused:?}"
    );
    assert_eq!(call_pid(&client, "shared__pid").await, shared_pid);
    assert_eq!(call_pid(&client, "own__pid").await, own_pid);

    let status = status_json(&gateway).await;
    let shared = &status["mounts"][0];
    assert_eq!(shared["name"], "shared", "{status}");
    assert!(shared["tools_hidden"] == 1, "{status}");
    close(client).await;
}

/// SIGHUP takes the file as the poll does, once two reads agree: sent
/// while the file was being written, it once applied the cut-off file (here
/// without mount `c`), and the finished file, the same as polled before,
/// was never taken: `c` stayed gone.
///
/// The scenario is a write quicker than the 200 ms a file must stay as
/// read: a machine so loaded that the second half comes 150 ms or more
/// after the first makes it another (where taking the cut-off file is
/// right), so that attempt is not judged and another gateway tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_during_a_write_waits_for_the_file_to_settle() {
    let config = |mounts: &[&str]| {
        let mounts: String = mounts
            .iter()
            .map(|name| stdio_demo_mount(name, ""))
            .collect();
        format!("{SERVER_TOML}{mounts}")
    };
    let whole = config(&["a", "b", "c"]);
    for attempt in 0..3 {
        let gateway = Gateway::start(&whole).await;
        let client = gateway.connect().await;
        let c_pid = call_pid(&client, "c__pid").await;

        // Written in two steps, as `>` or an editor writing in place may,
        // the second half 100 ms on.
        std::fs::write(&gateway.config_path, config(&["a", "b"])).unwrap();
        let first_half = std::time::Instant::now();
        hang_up(&gateway);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let gap = first_half.elapsed();
        std::fs::write(&gateway.config_path, &whole).unwrap();
        if gap >= Duration::from_millis(150) {
            eprintln!("attempt {attempt}: the second half came {gap:?} after the first; again");
            close(client).await;
            continue;
        }

        let line = wait_for_log(&gateway, &["config reloaded", "trigger=SIGHUP"], 1).await;
        assert!(line.contains("removed= "), "{line}");
        assert!(line.contains("unchanged=3"), "{line}");
        assert_eq!(call_pid(&client, "c__pid").await, c_pid);
        close(client).await;
        return;
    }
    panic!("the file's second half never came within 150 ms of its first in 3 tries");
}

/// A call in flight on a mount a reload removes gets `server.shutdown_grace`
/// to be answered, no more: then it fails, saying so, at the grace, not
/// once the old server has exited (one that reads no input while it works
/// sees its end of input only when signalled, 3 s later, 6 s for one that
/// ignores SIGTERM too, and its call waited as long). It said the upstream
/// "went away … it is restarted on the next call", though the next call
/// finds no such tool. A per-session mount's, as a shared one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_a_reload_says_so_at_the_grace() {
    let server = "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n";
    let config = |mounts: &str| format!("{server}{}{mounts}", stdio_demo_mount("keep", ""));
    let gateway = Gateway::start(&config(&python_fixture_mount(
        "gone",
        "busy_past_eof.py",
        "isolation = \"per_session\"",
    )))
    .await;
    let client = gateway.connect().await;
    let (cut, reloaded_at) = tokio::join!(call(&client, "gone__busy", Value::Null), async {
        until_in_flight(&client).await;
        rewrite_config(&gateway.config_path, &config(""));
        wait_for_log(&gateway, &["config reloaded", "removed=gone"], 1).await;
        std::time::Instant::now()
    });
    assert_eq!(cut.is_error, Some(true), "{cut:?}");
    assert!(
        text(&cut).contains("a config reload removed or changed the mount"),
        "{cut:?}"
    );
    assert!(!text(&cut).contains("restarted"), "{cut:?}");
    // The grace is 1 s; the server would see its end of input 3 s later.
    let after_reload = reloaded_at.elapsed();
    assert!(
        after_reload < Duration::from_millis(2500),
        "the call failed {after_reload:?} after the reload, not at the 1 s grace"
    );
    wait_for_log(
        &gateway,
        &[
            "still in flight after server.shutdown_grace",
            "mount=gone",
            "requests=1",
        ],
        1,
    )
    .await;
    close(client).await;
}

/// SIGHUP while the file keeps changing applies nothing (the poll takes
/// the file once it settles): it read the file once more unchecked, and a
/// file caught as only a comment stopped every mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_while_the_file_keeps_changing_applies_nothing() {
    let whole = format!("{SERVER_TOML}{}", stdio_demo_mount("a", ""));
    let gateway = Gateway::start(&whole).await;
    let client = gateway.connect().await;
    let pid = call_pid(&client, "a__pid").await;
    let path = gateway.config_path.clone();
    let writer = tokio::spawn(async move {
        // About 2 s of a file that never stays the same for 200 ms.
        for n in 0..40 {
            std::fs::write(&path, format!("# config{}\n", " ".repeat(n))).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    eventually("the writer to start", RELOAD_TIMEOUT, || async {
        let now = std::fs::read_to_string(&gateway.config_path).unwrap_or_default();
        now.starts_with("# config").then_some(())
    })
    .await;
    hang_up(&gateway);
    wait_for_log(&gateway, &["SIGHUP: the config file is still changing"], 1).await;
    writer.await.unwrap();
    std::fs::write(&gateway.config_path, &whole).unwrap();
    // A SIGHUP on the settled file reloads it, touching nothing: the first
    // reload of the run, so none applied the file while it changed.
    hang_up(&gateway);
    let line = wait_for_log(&gateway, &["config reloaded"], 1).await;
    assert!(line.contains("trigger=SIGHUP"), "{line}");
    assert!(
        line.contains("removed= ") && line.contains("unchanged=1"),
        "{line}"
    );
    assert_eq!(
        log_lines(&gateway, &["config reload"]).len(),
        1,
        "{:?}",
        log_lines(&gateway, &["config reload"])
    );
    assert_eq!(call_pid(&client, "a__pid").await, pid);
    close(client).await;
}

/// A config file that can no longer be read (deleted) is said once, not
/// silently ignored, and counted as a failed reload (the gauge says 0,
/// as after a SIGHUP then: ops helper); the running config keeps
/// serving, and the file is taken again once it is back, even as it was,
/// setting the gauge back to 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_that_cannot_be_read_is_said() {
    let config = |max: u32| {
        format!(
            "{SERVER_TOML}[limits]\nmax_sessions = {max}\n\n{}",
            stdio_demo_mount("a", "")
        )
    };
    let gateway = Gateway::start(&config(50)).await;
    let metric = |metrics: &str, name: &str| metric_value(metrics, name);
    std::fs::remove_file(&gateway.config_path).unwrap();
    wait_for_log(&gateway, &["the config file cannot be read"], 1).await;
    let metrics = metrics_text(&gateway).await;
    assert_eq!(
        metric(&metrics, "junction_config_last_reload_successful"),
        Some(0.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "junction_config_reloads_total{result=\"rejected\"}"
        ),
        Some(1.0)
    );
    let client = gateway.connect().await;
    let echoed = call(&client, "a__echo", json!({"message": "on"})).await;
    assert_eq!(ok_text(&echoed), "on");
    rewrite_config(&gateway.config_path, &config(50));
    wait_for_log(&gateway, &["config reloaded"], 1).await;
    eventually("the gauge to say 1 again", RELOAD_TIMEOUT, || async {
        let metrics = metrics_text(&gateway).await;
        (metric(&metrics, "junction_config_last_reload_successful") == Some(1.0)).then_some(())
    })
    .await;
    std::fs::remove_file(&gateway.config_path).unwrap();
    wait_for_log(&gateway, &["the config file cannot be read"], 2).await;
    rewrite_config(&gateway.config_path, &config(40));
    wait_for_log(&gateway, &["config reloaded", "applied=limits"], 1).await;
    assert_eq!(log_lines(&gateway, &["cannot be read"]).len(), 2);
    close(client).await;
}

/// A reload that makes a `per_session` mount forward `Authorization`
/// applies to sessions already open: the client's next call opens its
/// upstream with the token it sends, not the mount's.
#[tokio::test]
async fn a_reload_that_starts_forwarding_takes_the_tokens_of_open_sessions() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let mount = |extra: &str| {
        format!(
            "{SERVER_TOML}{}",
            http_mount(
                "mine",
                &server.url(),
                &format!("isolation = \"per_session\"\nheaders = {{ Authorization = \"Bearer mount\" }}\n{extra}")
            )
        )
    };
    let gateway = Gateway::start(&mount("")).await;
    let url = gateway.mcp_url();
    let alice = raw::client_with_token("Bearer alice");
    let session = raw::open_session(&alice, &url).await;
    assert_eq!(
        raw::tool_text(&alice, &url, &session, "mine__authorization").await,
        "Bearer mount / Bearer mount",
        "not forwarded yet"
    );
    rewrite_config(
        &gateway.config_path,
        &mount("forward_headers = [\"Authorization\"]"),
    );
    hang_up(&gateway);
    wait_for_log(&gateway, &["config reloaded"], 1).await;
    // Until the restarted mount answers (meanwhile: unknown tool, or a
    // tool error naming the mount).
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "mine__authorization", "arguments": {}}});
    let seen = eventually(
        "alice's call on the reloaded mount",
        RELOAD_TIMEOUT,
        || async {
            let answer = raw::post(
                &alice,
                &url,
                Some(&session),
                raw::JSON_POST,
                call.to_string(),
            )
            .await;
            answer
                .tool_text()
                .filter(|seen| seen.starts_with("Bearer"))
                .map(str::to_owned)
        },
    )
    .await;
    assert_eq!(seen, "Bearer alice / Bearer alice");
}

/// A SIGHUP while the config file cannot be read is a failed reload (the
/// gauge says 0); once the file is back, as it was, the gauge says 1
/// again: it stayed 0, the restored file being what was last seen, until
/// someone sent another SIGHUP or edited the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_back_after_a_failed_sighup_is_taken_again() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let successful =
        |metrics: String| metric_value(&metrics, "junction_config_last_reload_successful");
    std::fs::remove_file(&gateway.config_path).expect("remove the config");
    hang_up(&gateway);
    eventually("the failed reload to show", RELOAD_TIMEOUT, || async {
        (successful(metrics_text(&gateway).await) == Some(0.0)).then_some(())
    })
    .await;
    // Counted once (review): the poll that finds the file unreadable for
    // 3 s does not count it again. Only a wait can show a count that
    // does not come: past those 3 s, and one poll more.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        metric_value(
            &metrics_text(&gateway).await,
            "junction_config_reloads_total{result=\"rejected\"}"
        ),
        Some(1.0)
    );
    rewrite_config(&gateway.config_path, &config);
    eventually("the file to be taken again", RELOAD_TIMEOUT, || async {
        (successful(metrics_text(&gateway).await) == Some(1.0)).then_some(())
    })
    .await;
}

/// Requests already sent on a mount that a reload replaces or removes are
/// answered by it (closing it at once failed calls whose work the upstream
/// then completed, and their clients would run the work again), and the
/// reload does not wait for them: it is logged, and another may follow,
/// while they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_on_a_replaced_or_removed_mount_are_answered() {
    let before = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("changed", ""),
        stdio_demo_mount("gone", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&before).await;
    let (on_changed, on_gone) = (gateway.connect().await, gateway.connect().await);
    let changed_pid = call_pid(&on_changed, "changed__pid").await;

    let done = AtomicBool::new(false);
    let calls = async {
        let answers = tokio::join!(
            call(&on_changed, "changed__slow", slow_args(30, 100)),
            call(&on_gone, "gone__slow", slow_args(30, 100)),
        );
        done.store(true, Ordering::SeqCst);
        answers
    };
    let edit = async {
        until_in_flight(&on_changed).await;
        until_in_flight(&on_gone).await;
        let after = format!(
            "{SERVER_TOML}{}",
            stdio_demo_mount("changed", "env = { RELOAD_TEST_MARK = \"2\" }"),
        );
        rewrite_config(&gateway.config_path, &after);
        wait_for_log(
            &gateway,
            &["config reloaded", "changed=changed", "removed=gone"],
            1,
        )
        .await;
        assert!(
            !done.load(Ordering::SeqCst),
            "the calls ended before the reload was logged: the reload waited for them, or they were cut short"
        );
    };
    let ((on_changed_answer, on_gone_answer), ()) = tokio::join!(calls, edit);
    assert_eq!(ok_text(&on_changed_answer), "done after 30 steps");
    assert_eq!(ok_text(&on_gone_answer), "done after 30 steps");
    wait_for_log(
        &gateway,
        &["requests in flight were answered", "mount=changed"],
        1,
    )
    .await;
    wait_for_log(
        &gateway,
        &["requests in flight were answered", "mount=gone"],
        1,
    )
    .await;

    // Then the old ones close, and the changed mount serves from its new
    // process.
    eventually("the replaced child to exit", CHILD_EXIT_TIMEOUT, || async {
        (!process_exists(changed_pid)).then_some(())
    })
    .await;
    assert_ne!(call_pid(&on_changed, "changed__pid").await, changed_pid);
    close(on_changed).await;
    close(on_gone).await;
}
