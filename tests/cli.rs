//! The `junction` command line: version, config errors and exit codes,
//! config formats, and environment overrides.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Bound on commands that are expected to exit by themselves.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn version_is_printed() {
    let mut command = junction_command();
    command.arg("--version");
    let (status, stdout, stderr) = run_to_exit("junction --version", command, EXIT_TIMEOUT).await;
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(
        stdout.trim(),
        format!("junction {}", env!("CARGO_PKG_VERSION")),
        "stderr: {stderr}"
    );
}

/// Every problem in the file is reported at once, each as
/// `SOURCE: field.path: message`, and the exit code is 2.
#[tokio::test]
async fn invalid_config_lists_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
[server]
listen = "127.0.0.1:0"

[mounts.Bad_Name]
command = "x"

[mounts.web]
url = "not a url"

[mounts.moody]
command = "x"
isolation = "sometimes"

[mounts.secret]
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer ${UNSET_VAR_FOR_TEST}" }

[mounts.typo]
comand = "x"
"#,
    )
    .unwrap();
    let mut command = junction_command();
    command
        .env_remove("UNSET_VAR_FOR_TEST")
        .arg("--config")
        .arg(&path)
        .args(["--listen", "127.0.0.1:0"]);
    let (status, _, stderr) = run_to_exit("junction (bad config)", command, EXIT_TIMEOUT).await;
    assert_eq!(status.code(), Some(2), "stderr:\n{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");

    let source = path.display().to_string();
    let expected = [
        ("mounts.Bad_Name", "Bad_Name"),
        ("mounts.web.url", "relative URL without a base"),
        ("mounts.moody.isolation", "sometimes"),
        (
            "mounts.secret.headers.Authorization",
            "UNSET_VAR_FOR_TEST is not set",
        ),
        ("mounts.typo.comand", "unknown field"),
        // What the typo leaves the mount without, reported with it.
        ("mounts.typo", "missing `command`"),
    ];
    for (field, message) in expected {
        let prefix = format!("{source}: {field}: ");
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with(&prefix) && line.contains(message)),
            "no line `{prefix}...{message}...` in stderr:\n{stderr}"
        );
    }
    let problem_lines = stderr
        .lines()
        .filter(|line| line.starts_with(&format!("{source}: ")))
        .count();
    assert_eq!(problem_lines, expected.len(), "stderr:\n{stderr}");
}

/// A config that asks for JSON logs (or `--log-format json`, or the
/// environment) gets its problems reported as JSON lines, one per problem,
/// like the log it asked for: a pipeline reading JSON lines got plain text
/// for the one thing it most needed, why the gateway did not start. So
/// does an unusable `TOKIO_WORKER_THREADS` with `--log-format json`.
#[tokio::test]
async fn a_config_asking_for_json_logs_has_its_problems_said_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let problems = "[mounts.web]\nurl = \"not a url\"\n\n[mounts.moody]\ncommand = \"x\"\nisolation = \"sometimes\"\n";
    let asks_for_json = format!("{SERVER_TOML}[telemetry]\nlog_format = \"json\"\n\n{problems}");
    /// What asks for JSON, the config, the arguments and the environment.
    type Case<'a> = (&'a str, String, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: [Case; 4] = [
        ("in the file", asks_for_json, &[], &[]),
        (
            "by the flag",
            format!("{SERVER_TOML}{problems}"),
            &["--log-format", "json"],
            &[],
        ),
        (
            "by the environment",
            format!("{SERVER_TOML}{problems}"),
            &[],
            &[("JUNCTION_TELEMETRY__LOG_FORMAT", "json")],
        ),
        (
            "TOKIO_WORKER_THREADS",
            SERVER_TOML.to_owned(),
            &["--log-format", "json"],
            &[("TOKIO_WORKER_THREADS", "none")],
        ),
    ];
    for (asked, config, args, env) in cases {
        std::fs::write(&path, config).unwrap();
        let mut command = junction_command();
        command.arg("--config").arg(&path).args(args);
        command.envs(env.iter().copied());
        let (status, _, stderr) = run_to_exit("junction (bad config)", command, EXIT_TIMEOUT).await;
        assert_eq!(status.code(), Some(2), "{asked}: {stderr}");
        let lines: Vec<Value> = stderr
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("{asked}: not JSON ({error}): {line:?}"))
            })
            .collect();
        assert!(
            lines.iter().all(|line| line["level"] == "ERROR"),
            "{asked}: {stderr}"
        );
        let messages: Vec<&str> = lines
            .iter()
            .filter_map(|line| line["fields"]["message"].as_str())
            .collect();
        let expected: &[&str] = if asked == "TOKIO_WORKER_THREADS" {
            &["TOKIO_WORKER_THREADS"]
        } else {
            &["mounts.web.url: ", "mounts.moody.isolation: "]
        };
        assert_eq!(messages.len(), expected.len(), "{asked}: {stderr}");
        for (message, part) in messages.iter().zip(expected) {
            assert!(
                message.contains(part),
                "{asked}: {message:?} lacks {part:?}"
            );
        }
    }
}

/// A problem that comes from an environment override is reported like one
/// from the file.
#[tokio::test]
async fn invalid_env_override_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.toml");
    std::fs::write(&path, SERVER_TOML).unwrap();
    let mut command = junction_command();
    command
        .env("JUNCTION_SERVER__PATH", "no-slash")
        .arg("--config")
        .arg(&path)
        .args(["--listen", "127.0.0.1:0"]);
    let (status, _, stderr) = run_to_exit("junction (bad env)", command, EXIT_TIMEOUT).await;
    assert_eq!(status.code(), Some(2), "stderr:\n{stderr}");
    assert!(
        stderr.contains(&format!("{}: server.path: ", path.display())),
        "{stderr}"
    );
}

/// A `TOKIO_WORKER_THREADS` that is no number of threads (which the README
/// documents for sizing the gateway) is a config error, not tokio's panic.
#[tokio::test]
async fn an_unusable_worker_thread_count_is_a_config_error() {
    for threads in ["0", "abc"] {
        let mut command = junction_command();
        command
            .env("TOKIO_WORKER_THREADS", threads)
            .args(["--listen", "127.0.0.1:0"]);
        let (status, _, stderr) =
            run_to_exit("junction (bad threads)", command, EXIT_TIMEOUT).await;
        assert_eq!(status.code(), Some(2), "{threads}: {stderr}");
        assert!(stderr.contains("TOKIO_WORKER_THREADS"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A count with a line end (an env file's) is a count: tokio's own read
    // would have panicked on it.
    let mut command = junction_command();
    command.env("TOKIO_WORKER_THREADS", "2\n").arg("check");
    let (status, _, stderr) =
        run_to_exit("junction (threads with a newline)", command, EXIT_TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// A file that does not exist is a config error too, not a crash.
#[tokio::test]
async fn missing_config_file_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let mut command = junction_command();
    command.arg("--config").arg(&path);
    let (status, _, stderr) = run_to_exit("junction (no file)", command, EXIT_TIMEOUT).await;
    assert_eq!(status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
}

/// Loads a config in another format, checks the mount it names is served
/// and `--listen` overrode the file's address.
async fn serves_config(ext: &str, config: &str) {
    let gateway = Gateway::launch(config, ext, &[]).await;
    // The file says port 1; `--listen 127.0.0.1:0` must win.
    assert_ne!(gateway.addr.port(), 1, "--listen did not override the file");
    let readyz = gateway.wait_ready().await;
    let mount = readyz_mount(&readyz, "fromfile");
    assert_eq!(mount["state"], "ready", "{readyz}");
    assert_eq!(mount["isolation"], "per_session", "{readyz}");
    let client = gateway.connect().await;
    let echo = call(
        &client,
        "fromfile__echo",
        serde_json::json!({"message": ext}),
    )
    .await;
    assert_eq!(ok_text(&echo), ext);
    close(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_config_loads() {
    // ${JUNCTION_EXE} is the gateway binary itself.
    serves_config(
        "yaml",
        r#"
server:
  listen: "127.0.0.1:1"
mounts:
  fromfile:
    command: "${JUNCTION_EXE}"
    args: ["demo-server"]
    isolation: per_session
"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_config_loads() {
    let config = serde_json::json!({
        "server": {"listen": "127.0.0.1:1"},
        "mounts": {
            "fromfile": {
                "command": BIN,
                "args": ["demo-server"],
                "isolation": "per_session",
            }
        }
    });
    serves_config("json", &config.to_string()).await;
}

/// `JUNCTION_SERVER__PATH=/other` moves the MCP endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_override_moves_the_endpoint() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::launch(&config, "toml", &[("JUNCTION_SERVER__PATH", "/other")]).await;
    gateway.wait_ready().await;
    assert!(
        gateway.proc.stderr.find("/other").is_some(),
        "{}",
        gateway.proc.stderr.text()
    );

    let client = connect(&gateway.url("/other")).await;
    let echo = call(
        &client,
        "demo__echo",
        serde_json::json!({"message": "moved"}),
    )
    .await;
    assert_eq!(ok_text(&echo), "moved");
    close(client).await;

    // Nothing answers MCP at the default path any more.
    let response = within(
        "POST /mcp",
        reqwest::Client::new()
            .post(gateway.mcp_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 404);
    let readyz: Value = gateway.wait_ready().await;
    assert_eq!(readyz["ready"], true);
}

/// A `RUST_LOG` that is no filter to use (a misspelt level, which
/// `tracing` reads as a module name and so silences everything) is said
/// to be ignored, and the config's filter logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_rust_log_is_ignored_and_said() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "warning")]).await;
    gateway.wait_ready().await;
    let stderr = gateway.proc.stderr.text();
    assert!(stderr.contains("RUST_LOG ignored"), "{stderr}");
    assert!(stderr.contains("mount ready"), "{stderr}");
}

/// `--listen` and `--config` may follow `serve` as they may precede it:
/// the file's path is served, on the address given rather than the file's.
#[tokio::test]
async fn serve_takes_listen_and_config_after_the_subcommand() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("after.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:1\"\npath = \"/after\"\n",
    )
    .expect("write config");
    let mut command = junction_command();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config);
    let mut proc = Proc::spawn("junction serve", command);
    let line = proc.wait_for_line("listening on ", START_TIMEOUT).await;
    let addr = parse_listening(&line);
    assert!(addr.ip().is_loopback(), "{line}");
    assert_ne!(addr.port(), 1, "--listen after serve was ignored: {line}");
    assert!(
        line.contains("/after"),
        "--config after serve was ignored: {line}"
    );
}

/// A flag the demo server does not use is refused, not silently ignored.
#[tokio::test]
async fn demo_server_refuses_gateway_flags() {
    for (args, says) in [
        (vec!["demo-server", "--listen", "127.0.0.1:0"], "--http"),
        (vec!["--config", "junction.toml", "demo-server"], "--config"),
    ] {
        let mut command = junction_command();
        command.args(&args);
        let (status, _, stderr) = run_to_exit("junction demo-server", command, EXIT_TIMEOUT).await;
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// An `[admin] listen` address already taken fails the start before
/// anything runs: no "listening" announced (scripts wait for that line),
/// no upstream started, exit 1 naming the address. It was bound last,
/// after the children had started and the line was printed.
#[tokio::test]
async fn an_admin_address_in_use_fails_the_start_cleanly() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("its address");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junction.toml");
    std::fs::write(
        &path,
        format!("[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"{address}\"\n"),
    )
    .unwrap();
    let mut command = junction_command();
    command.arg("--config").arg(&path);
    let (status, _, stderr) =
        run_to_exit("junction (admin port taken)", command, EXIT_TIMEOUT).await;
    assert_eq!(status.code(), Some(1), "stderr:\n{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    assert!(stderr.contains("admin.listen"), "{stderr}");
}
