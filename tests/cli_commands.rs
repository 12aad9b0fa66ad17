//! The setup commands of the `junction` binary: `check` (with and without
//! `--connect`), `tools` and `import`, run as real processes against real
//! demo upstreams and the sample client configs in `tests/fixtures/import/`.
//!
//! Upstreams started by `--connect` and `tools` carry a unique marker in
//! their environment, so a test can prove that none outlives the command.

mod common;

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

/// Bound on one command run. The slowest command here waits out the
/// gateway's 30 s initialize timeout; every other ends within seconds.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a running command is checked on.
const POLL: Duration = Duration::from_millis(25);

/// Environment variable that marks the upstream processes a test started.
const MARKER_VAR: &str = "JUNCTION_CLI_TEST_MARKER";

/// Tools every demo server lists (it may list more).
const DEMO_TOOLS: [&str; 8] = [
    "add", "counter", "echo", "fail", "links", "pid", "recall", "remember",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with both streams unless the exit code is `code`.
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn stdout_line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in stdout:\n{}", self.stdout))
    }
}

/// Runs `junction ARGS` with `envs` to exit, killed (by pid) and reported
/// if it takes longer than [`EXIT_TIMEOUT`]. Both pipes are read to their
/// end, so no output is missed however busy the machine is.
async fn junction(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let name = format!("junction {}", args.join(" "));
    let mut command = junction_command();
    command
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
    let stdout = read_all(child.stdout.take().expect("stdout is piped"));
    let stderr = read_all(child.stderr.take().expect("stderr is piped"));
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for junction") {
            break status;
        }
        if Instant::now() >= deadline {
            // Its upstreams first (each leads its own process group),
            // which it will have no chance to stop.
            kill_child_groups(child.id());
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name} still running after {EXIT_TIMEOUT:?}; stderr:\n{}",
                stderr.join().unwrap_or_default()
            );
        }
        tokio::time::sleep(POLL).await;
    };
    Run {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// SIGKILLs the process group of each child of `parent` (the upstreams a
/// gateway started lead their own groups).
fn kill_child_groups(parent: u32) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        if ppid == Some(parent) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Reads a pipe to its end on a thread.
fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// A config file in a fresh directory (kept alive by the returned guard).
fn config_file(toml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("junction.toml");
    std::fs::write(&path, toml).expect("write config");
    (dir, path.display().to_string())
}

/// A value unique to this test run, for [`MARKER_VAR`].
fn unique_marker() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "cli-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// `env = { MARKER_VAR = marker }` for a mount table.
fn marker_env(marker: &str) -> String {
    format!("env = {{ {MARKER_VAR} = {marker:?} }}")
}

/// Live processes whose environment carries `marker`.
fn marked_processes(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|pair| pair == needle.as_bytes())
            }) && process_alive(*pid)
        })
        .collect()
}

/// The command has exited: every upstream it started must be gone. They
/// were sent SIGKILL, which a process acts on once it is next scheduled,
/// so on a loaded machine one may still be running for a moment: waited
/// for, up to 5 s (a process nobody killed would live on far longer).
/// Ones still running then are killed before the test fails, so a
/// regression does not leave them behind.
async fn assert_no_marked_processes(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            drop(left.iter().copied().map(KillOnDrop).collect::<Vec<_>>());
            panic!("upstreams still running after the command: {left:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn check_summarizes_a_valid_config_without_starting_anything() {
    let config = format!(
        "{SERVER_TOML}{}{}[mounts.broken]\ncommand = \"/nonexistent/junction-test-command\"\n",
        stdio_demo_mount("alpha", ""),
        http_mount(
            "web",
            "http://127.0.0.1:9/mcp",
            "namespace = \"web-api\"\nisolation = \"per_session\""
        ),
    );
    let (_dir, path) = config_file(&config);
    let run = junction(&["check", "--config", &path], &[]).await;
    // A command that does not exist is fine: nothing is started.
    run.expect_code(0);
    assert!(
        run.stdout.starts_with(&format!(
            "{path}: valid; 3 mounts served at http://127.0.0.1:0/mcp"
        )),
        "{}",
        run.stdout
    );
    let header: Vec<&str> = run.stdout_line("MOUNT").split_whitespace().collect();
    assert_eq!(
        header,
        ["MOUNT", "TRANSPORT", "ISOLATION", "NAMESPACE", "TARGET"]
    );
    let alpha: Vec<&str> = run.stdout_line("alpha ").split_whitespace().collect();
    assert_eq!(
        alpha,
        ["alpha", "stdio", "shared", "alpha", BIN, "demo-server"]
    );
    let web: Vec<&str> = run.stdout_line("web ").split_whitespace().collect();
    assert_eq!(
        web,
        [
            "web",
            "streamable_http",
            "per_session",
            "web-api",
            "http://127.0.0.1:9/mcp"
        ]
    );
    let broken: Vec<&str> = run.stdout_line("broken ").split_whitespace().collect();
    assert_eq!(
        broken,
        [
            "broken",
            "stdio",
            "shared",
            "broken",
            "/nonexistent/junction-test-command"
        ]
    );
}

/// What came from the environment (`${VAR}`, usually a secret) is shown
/// as the variable, not its value.
#[tokio::test]
async fn check_shows_substituted_values_as_written() {
    let config = format!(
        "{SERVER_TOML}[mounts.cli]\ncommand = \"tool\"\nargs = [\"--token=${{CHECK_TEST_TOKEN}}\", \"plain\"]\n\n{}",
        http_mount("web", "http://127.0.0.1:9/k/${CHECK_TEST_TOKEN}/mcp", ""),
    );
    let (_dir, path) = config_file(&config);
    let run = junction(
        &["check", "--config", &path],
        &[("CHECK_TEST_TOKEN", "s3cret-value")],
    )
    .await;
    run.expect_code(0);
    assert!(!run.stdout.contains("s3cret-value"), "{}", run.stdout);
    let cli = run.stdout_line("cli ");
    assert!(
        cli.contains("--token=${CHECK_TEST_TOKEN}") && cli.contains("plain"),
        "{cli}"
    );
    let web = run.stdout_line("web ");
    assert!(
        web.contains("http://127.0.0.1:9/k/${CHECK_TEST_TOKEN}/mcp"),
        "{web}"
    );
}

/// A stdio command that cannot start is named as written: a `${VAR}` in
/// it (a secret, maybe) is not shown expanded in the failure. It was,
/// and so in the log, `/readyz`, `/status.json` and clients' errors.
#[tokio::test]
async fn a_command_that_cannot_start_is_shown_as_written() {
    let config = format!(
        "{SERVER_TOML}[mounts.cli]\ncommand = \"/nonexistent/tool-${{CHECK_TEST_TOKEN}}\"\n"
    );
    let (_dir, path) = config_file(&config);
    let run = junction(
        &["check", "--config", &path, "--connect"],
        &[("CHECK_TEST_TOKEN", "s3cret-value")],
    )
    .await;
    let output = format!("{}{}", run.stdout, run.stderr);
    assert!(!output.contains("s3cret-value"), "{output}");
    assert!(
        output.contains("cannot start `/nonexistent/tool-${CHECK_TEST_TOKEN}`"),
        "{output}"
    );
}

/// A setting of the file an environment variable overrides is named,
/// with the variable: the file's value is not used, which nothing said
/// (the Docker image always overrides `server.allowed_hosts`). A setting
/// only the environment gives is no surprise, and not named.
#[tokio::test]
async fn check_names_the_settings_the_environment_overrides() {
    let config = "[server]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = [\"localhost\"]\n";
    let (_dir, path) = config_file(config);
    let run = junction(
        &["check", "--config", &path],
        &[
            ("JUNCTION_SERVER__ALLOWED_HOSTS", "[\"*\"]"),
            ("JUNCTION_LIMITS__MAX_SESSIONS", "50"),
        ],
    )
    .await;
    run.expect_code(0);
    assert!(
        run.stdout.contains(
            "server.allowed_hosts: set by environment variable JUNCTION_SERVER__ALLOWED_HOSTS; the file's value is not used"
        ),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("max_sessions"), "{}", run.stdout);
}

/// A problem with a setting an environment variable set names the
/// variable: the value is not in the file the error names. (Run as a
/// process of its own: invalid overrides in the test process would reach
/// every other test loading a config meanwhile.)
#[tokio::test]
async fn a_problem_an_override_made_names_its_variable() {
    let config = "[server]\nallowed_hosts = [\"localhost\"]\n[mounts.a]\ncommand = \"x\"\n";
    let (_dir, path) = config_file(config);
    let run = junction(
        &["check", "--config", &path],
        &[
            ("JUNCTION_SERVER__ALLOWED_HOSTS", "localhost"),
            ("JUNCTION_MOUNTS__A__ISOLATION", "sometimes"),
        ],
    )
    .await;
    run.expect_code(2);
    for (setting, variable) in [
        ("server.allowed_hosts", "JUNCTION_SERVER__ALLOWED_HOSTS"),
        ("mounts.a.isolation", "JUNCTION_MOUNTS__A__ISOLATION"),
    ] {
        assert!(
            run.stderr
                .lines()
                .any(|line| line.contains(&format!(": {setting}: "))
                    && line.ends_with(&format!("(set by environment variable {variable})"))),
            "{}",
            run.stderr
        );
    }
}

/// A mount the file no longer has, kept by an override of one of its
/// settings (the override outlives the file's edit), is reported naming
/// that variable: "missing command or url" alone sent the operator to a
/// file that has no such mount. So is a problem below an override's
/// setting's table (headers on a stdio mount).
#[tokio::test]
async fn a_mount_an_override_alone_keeps_names_the_variable() {
    let config = "[mounts.a]\ncommand = \"x\"\n";
    let (_dir, path) = config_file(config);
    let run = junction(
        &["check", "--config", &path],
        &[
            ("JUNCTION_MOUNTS__WEB__HEADERS__AUTHORIZATION", "Bearer t"),
            ("JUNCTION_MOUNTS__A__HEADERS__X", "1"),
        ],
    )
    .await;
    run.expect_code(2);
    for (setting, variable) in [
        ("mounts.web", "JUNCTION_MOUNTS__WEB__HEADERS__AUTHORIZATION"),
        ("mounts.a.headers", "JUNCTION_MOUNTS__A__HEADERS__X"),
    ] {
        assert!(
            run.stderr
                .lines()
                .any(|line| line.contains(&format!(": {setting}: ")) && line.contains(variable)),
            "{setting}: {}",
            run.stderr
        );
    }
    assert!(!run.stderr.contains("Bearer t"), "{}", run.stderr);
}

#[tokio::test]
async fn check_reports_every_problem_with_its_path() {
    let (_dir, path) = config_file(
        r#"
[server]
listen = "nowhere"

[mounts.Bad_Name]
command = "x"

[mounts.web]
url = "not a url"

[mounts.moody]
command = "x"
isolation = "sometimes"

[mounts.typo]
comand = "x"
"#,
    );
    let run = junction(&["check", "--config", &path], &[]).await;
    run.expect_code(2);
    assert_eq!(
        run.stdout, "",
        "nothing is summarized for an invalid config"
    );
    for (field, message) in [
        ("server.listen", "\"nowhere\" is not a socket address"),
        ("mounts.Bad_Name", "must match"),
        ("mounts.web.url", "relative URL without a base"),
        ("mounts.moody.isolation", "sometimes"),
        ("mounts.typo.comand", "unknown field"),
    ] {
        let prefix = format!("{path}: {field}: ");
        let line = run
            .stderr
            .lines()
            .find(|line| line.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in stderr:\n{}", run.stderr));
        assert!(
            line.contains(message),
            "{line:?} should mention {message:?}"
        );
    }
}

#[tokio::test]
async fn check_connect_lists_counts_and_names_then_stops_every_upstream() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("alpha", &marker_env(&marker)),
        stdio_demo_mount(
            "beta",
            &format!("{}\nisolation = \"per_session\"", marker_env(&marker))
        ),
    );
    let (_dir, path) = config_file(&config);
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(0);
    assert_no_marked_processes(&marker).await;

    for mount in ["alpha", "beta"] {
        let status = run.stdout_line(&format!("{mount}: "));
        let counts = status
            .strip_prefix(&format!("{mount}: ready: "))
            .unwrap_or_else(|| panic!("{mount} is not ready: {status:?}"));
        let tools: usize = counts
            .split(' ')
            .next()
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("no tool count in {status:?}"));
        assert!(tools >= DEMO_TOOLS.len(), "{status:?}");
        assert!(counts.contains(" tools, 1 prompt, "), "{status:?}");
        assert!(counts.contains(" resource"), "{status:?}");
        for tool in DEMO_TOOLS {
            let line = run.stdout_line(&format!("  tool    {mount}__{tool}"));
            assert!(!line.contains("warning"), "{line:?}");
        }
        run.stdout_line(&format!("  prompt  {mount}__greet"));
    }
    run.stdout_line("2 of 2 mounts ready");
}

/// `check --connect` counts the tools a mount's patterns hide apart and
/// marks them so, rather than as offered (or as names lost to another
/// mount: a pass-through mount's hidden `echo` goes to the next one).
#[tokio::test]
async fn check_connect_tells_hidden_tools_apart() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("first", "namespace = \"\"\ninclude_tools = [\"add\"]"),
        stdio_demo_mount("second", "namespace = \"\""),
    );
    let (_dir, path) = config_file(&config);
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(0);
    let status = run.stdout_line("first: ");
    assert!(status.contains("first: ready: 1 tool ("), "{status:?}");
    assert!(status.contains(" more hidden), "), "{status:?}");
    let lines: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| line.starts_with("  tool    echo"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(
        lines[0].contains("hidden by include_tools / exclude_tools"),
        "{lines:?}"
    );
    assert!(
        !lines[1].contains("not listed"),
        "second's echo is listed: {lines:?}"
    );
}

/// `check --connect` warns of tool names clients would refuse and says
/// how to have them fitted; with `fit_tool_names` it shows the names
/// served, which pass, and warns of none.
#[tokio::test]
async fn check_connect_warns_of_names_clients_refuse_unless_they_are_fitted() {
    let mount = python_fixture_mount("odd", "rule_breaking_tool_names.py", "");
    let (_dir, path) = config_file(&format!("{SERVER_TOML}{mount}"));
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(0);
    let line = run.stdout_line("  tool    odd__get.weather");
    assert!(line.contains("warning: contains '.'"), "{line:?}");
    let summary = run.stdout_line("1 of 1 mount ready");
    assert!(
        summary
            .contains("; 2 tool names many clients would reject ([server] fit_tool_names = true"),
        "{summary:?}"
    );

    let fitted = format!("[server]\nlisten = \"127.0.0.1:0\"\nfit_tool_names = true\n\n{mount}");
    let (_dir, path) = config_file(&fitted);
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(0);
    assert!(
        run.stdout.contains(", tool names fitted to 64 characters)"),
        "{}",
        run.stdout
    );
    let line = run.stdout_line("  tool    odd__get_weather_");
    assert!(line.contains("fitted from odd__get.weather"), "{line:?}");
    assert!(!line.contains("warning"), "{line:?}");
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);
    assert!(!run.stdout.contains("would reject"), "{}", run.stdout);

    // A tool of the mount already named as `get.weather` is fitted keeps
    // the name, and the fitted one says why it is not listed.
    let twin = python_fixture_mount_with_args(
        "odd",
        "rule_breaking_tool_names.py",
        &["--with-fitted-twin"],
        "",
    );
    let with_twin = format!("[server]\nlisten = \"127.0.0.1:0\"\nfit_tool_names = true\n\n{twin}");
    let (_dir, path) = config_file(&with_twin);
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(0);
    let lines: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| line.starts_with("  tool    odd__get_weather_9bd2ad39"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(
        lines.iter().any(|line| line.contains(
            "fitted from odd__get.weather; not listed: the mount's own \"get_weather_9bd2ad39\" has this name as it is"
        )),
        "{lines:?}"
    );
}

#[tokio::test]
async fn check_connect_names_a_mount_that_fails_and_exits_1() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}{}[mounts.broken]\ncommand = \"/nonexistent/junction-test-command\"\n",
        stdio_demo_mount("alpha", &marker_env(&marker)),
    );
    let (_dir, path) = config_file(&config);
    let run = junction(&["check", "--config", &path, "--connect"], &[]).await;
    run.expect_code(1);
    assert_no_marked_processes(&marker).await;
    assert!(run.stdout_line("alpha: ").starts_with("alpha: ready: "));
    let broken = run.stdout_line("broken: ");
    assert!(
        broken.starts_with("broken: failed: cannot start `/nonexistent/junction-test-command`"),
        "{broken:?}"
    );
    run.stdout_line("1 of 2 mounts ready, 1 failed");
}

/// A stdio upstream that answers `initialize` and then nothing, from a
/// shell whose own child (`sleep`) must be stopped with it.
const MUTE_UPSTREAM: &str = r#"read line; id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p'); printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"mute","version":"0"}}}\n' "$id"; sleep 60; true"#;

#[tokio::test]
async fn check_connect_gives_up_on_a_silent_upstream_and_stops_it() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}[mounts.mute]\ncommand = \"sh\"\nargs = [\"-c\", '''{MUTE_UPSTREAM}''']\n{}\n",
        marker_env(&marker)
    );
    let (_dir, path) = config_file(&config);
    let run = junction(
        &["check", "--config", &path, "--connect", "--timeout", "1s"],
        &[],
    )
    .await;
    run.expect_code(1);
    assert_no_marked_processes(&marker).await;
    let mute = run.stdout_line("mute: ");
    assert!(
        mute.starts_with("mute: failed: no answer within 1s"),
        "{mute:?}"
    );
}

/// An upstream that never answers `initialize` is abandoned when the wait
/// runs out: its whole process group (the shell and its `sleep`) is killed.
#[tokio::test]
async fn check_connect_stops_an_upstream_that_never_initializes() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}[mounts.hung]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 120; true\"]\n{}\n",
        marker_env(&marker)
    );
    let (_dir, path) = config_file(&config);
    let run = junction(
        &["check", "--config", &path, "--connect", "--timeout", "1s"],
        &[],
    )
    .await;
    run.expect_code(1);
    assert_no_marked_processes(&marker).await;
    let hung = run.stdout_line("hung: ");
    assert!(
        hung.starts_with("hung: failed: no answer within 1s"),
        "{hung:?}"
    );
}

/// Ctrl-C (SIGINT) while `check --connect` waits on an upstream stops the
/// command and the upstreams it started, and exits 130. The signal's
/// default action ended junction alone: the upstream (here a `sleep`,
/// which never reads the stdin that closed) ran on.
#[tokio::test]
async fn an_interrupted_check_stops_its_upstreams() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}[mounts.hung]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 120; true\"]\n{}\n",
        marker_env(&marker)
    );
    let (_dir, path) = config_file(&config);
    let mut command = junction_command();
    command
        .args(["check", "--config", &path, "--connect", "--timeout", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start junction check");
    let stderr = read_all(child.stderr.take().expect("stderr is piped"));
    let _reaper = KillOnDrop(child.id());
    eventually("the upstream to start", OP_TIMEOUT, || async {
        (!marked_processes(&marker).is_empty()).then_some(())
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
    let status = eventually("junction to exit", OP_TIMEOUT, || {
        let exited = child.try_wait().expect("wait for junction");
        async move { exited }
    })
    .await;
    // First: on failure it kills what is left, so a regression leaves
    // nothing running.
    assert_no_marked_processes(&marker).await;
    let stderr = stderr.join().unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{stderr}");
}

#[tokio::test]
async fn check_connect_timeout_requires_connect() {
    let run = junction(&["check", "--timeout", "5s"], &[]).await;
    run.expect_code(2);
    assert!(run.stderr.contains("--connect"), "{}", run.stderr);
}

/// A wait too long to add to a clock is refused as a usage error, not a
/// panic once the probe has started.
#[tokio::test]
async fn a_timeout_beyond_a_year_is_a_usage_error() {
    for command in ["check", "tools"] {
        let mut args = vec![command];
        if command == "check" {
            args.push("--connect");
        }
        args.extend(["--timeout", "500000000000years"]);
        let run = junction(&args, &[]).await;
        run.expect_code(2);
        assert!(run.stderr.contains("longer than 1year"), "{}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
}

#[tokio::test]
async fn tools_prints_the_merged_catalog_as_text_and_json() {
    let marker = unique_marker();
    let config = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("demo", &marker_env(&marker))
    );
    let (_dir, path) = config_file(&config);

    let text = junction(&["tools", "--config", &path], &[]).await;
    text.expect_code(0);
    assert_no_marked_processes(&marker).await;
    let echo = text.stdout_line("demo__echo ");
    assert!(echo.ends_with("Return the message unchanged."), "{echo:?}");
    let text_names: Vec<&str> = text
        .stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    for name in &text_names {
        assert!(name.starts_with("demo__"), "{name} in\n{}", text.stdout);
    }

    let json = junction(&["tools", "--config", &path, "--json"], &[]).await;
    json.expect_code(0);
    assert_no_marked_processes(&marker).await;
    let tools: Vec<Value> = serde_json::from_str(&json.stdout)
        .unwrap_or_else(|error| panic!("not a JSON array: {error}\n{}", json.stdout));
    let json_names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["name"].as_str().expect("tool name"))
        .collect();
    assert_eq!(
        json_names, text_names,
        "both forms list the same tools in order"
    );
    for tool in DEMO_TOOLS {
        assert!(json_names.contains(&format!("demo__{tool}").as_str()));
    }
    let echo = tools
        .iter()
        .find(|tool| tool["name"] == "demo__echo")
        .expect("demo__echo");
    assert_eq!(echo["description"], "Return the message unchanged.");
    assert_eq!(echo["inputSchema"]["type"], "object");
}

/// `tools --json` prints the tool objects a client's `tools/list`
/// receives: with a tool's `execution` (2025-11-25 tasks), which rmcp's
/// own tool type leaves out.
#[tokio::test]
async fn tools_json_keeps_a_tools_execution() {
    let config = format!(
        "{SERVER_TOML}{}",
        python_fixture_mount("jobs", "endless_task_pages.py", "")
    );
    let (_dir, path) = config_file(&config);
    let json = junction(&["tools", "--config", &path, "--json"], &[]).await;
    json.expect_code(0);
    let tools: Vec<Value> = serde_json::from_str(&json.stdout)
        .unwrap_or_else(|error| panic!("not a JSON array: {error}\n{}", json.stdout));
    let work = tools
        .iter()
        .find(|tool| tool["name"] == "jobs__work")
        .unwrap_or_else(|| panic!("jobs__work in {tools:?}"));
    assert_eq!(work["execution"]["taskSupport"], "optional", "{work}");
}

#[tokio::test]
async fn tools_lists_what_it_can_when_a_mount_fails() {
    let config = format!(
        "{SERVER_TOML}{}[mounts.broken]\ncommand = \"/nonexistent/junction-test-command\"\n",
        stdio_demo_mount("demo", "")
    );
    let (_dir, path) = config_file(&config);
    let run = junction(&["tools", "--config", &path], &[]).await;
    run.expect_code(1);
    run.stdout_line("demo__echo ");
    assert!(
        run.stderr
            .contains("junction: mount broken is missing from the list: cannot start"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn tools_with_an_invalid_config_exits_2() {
    let (_dir, path) = config_file("[mounts.x]\nurl = \"nope\"\n");
    let run = junction(&["tools", "--config", &path], &[]).await;
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!("{path}: mounts.x.url: ")),
        "{}",
        run.stderr
    );
}

/// A TOML syntax error is placed by line and column; the line itself,
/// which toml would print and which may hold a token (an unclosed quote
/// around one is the typical mistake), is not shown.
#[tokio::test]
async fn a_toml_syntax_error_does_not_show_its_line() {
    let (_dir, path) = config_file(
        "[mounts.a]\nurl = \"https://h.example/mcp\"\nheaders = { Authorization = \"Bearer sk-live-abc }\n",
    );
    let run = junction(&["check", "--config", &path], &[]).await;
    run.expect_code(2);
    assert!(
        run.stderr.contains("invalid TOML at line 3, column "),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("sk-live"), "{}", run.stderr);
}

/// Imports `file`, expecting `code`; checks the TOML loads with `junction
/// check` given `envs` and lists exactly `mounts`. Returns the import run.
async fn import_and_check(file: &str, code: i32, mounts: &[&str], envs: &[(&str, &str)]) -> Run {
    let source = fixture(file);
    let source = source.to_str().expect("utf-8 path");
    let import = junction(&["import", source], &[]).await;
    import.expect_code(code);
    let (_dir, path) = config_file(&import.stdout);
    let check = junction(&["check", "--config", &path], envs).await;
    assert_eq!(
        check.code(),
        Some(0),
        "imported TOML does not load:\n{}\nstderr:\n{}",
        import.stdout,
        check.stderr
    );
    let listed: Vec<&str> = check
        .stdout
        .lines()
        .skip_while(|line| !line.starts_with("MOUNT "))
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(listed, mounts, "check output:\n{}", check.stdout);
    for mount in mounts {
        let row: Vec<&str> = check
            .stdout_line(&format!("{mount} "))
            .split_whitespace()
            .collect();
        assert_eq!(row[2], "shared", "{row:?}");
    }
    import
}

fn assert_reported(run: &Run, file: &str, lines: &[&str]) {
    for line in lines {
        let expected = format!("{}: {line}", fixture(file).display());
        assert!(
            run.stderr.lines().any(|got| got.starts_with(&expected)),
            "no line starting {expected:?} in stderr:\n{}",
            run.stderr
        );
    }
}

/// A result that cannot be written (here: a full disk) must not exit as
/// if it had been: `import x.json > junction.toml` would leave an empty
/// file behind a success. A closed pipe (`| head`) stays a success.
#[test]
fn output_that_cannot_be_written_exits_3() {
    let claude = fixture("claude_desktop.json");
    let claude = claude.to_str().expect("a UTF-8 path");
    for args in [vec!["import", claude], vec!["check"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full");
        let run = junction_command()
            .args(&args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .expect("run junction");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write the output"), "{stderr}");
    }
}

/// `--listen` is checked as `server.listen` is: the admin listener may
/// not take the same address (it was refused as a port in use, exit 1,
/// by `serve`, and passed by `check`).
#[test]
fn a_listen_flag_on_the_admin_address_is_a_config_error() {
    let (_dir, config) = config_file("[admin]\nlisten = \"127.0.0.1:1\"\n");
    for command in [vec!["check"], vec!["serve"]] {
        let run = junction_command()
            .args(&command)
            .args(["--config", &config, "--listen", "127.0.0.1:1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run junction");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains("admin.listen: is server.listen too"),
            "{command:?}: {stderr}"
        );
    }
    // `--listen` replaces the file's `server.listen`: an admin listener on
    // the file's address (here the default's) is no clash.
    let (_dir, config) = config_file("[admin]\nlisten = \"127.0.0.1:8080\"\n");
    let run = junction_command()
        .args(["check", "--config", &config, "--listen", "127.0.0.1:9"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run junction");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
}

/// A stderr that cannot be written (a full disk, a pipe whose reader
/// left) loses what is said there, not the exit code: `check` of an
/// invalid config still exits 2 (it panicked, 101).
#[test]
fn a_stderr_that_cannot_be_written_keeps_the_exit_code() {
    let (_dir, config) = config_file("[mounts.Bad]\ncommand = \"x\"\n");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let run = junction_command()
        .args(["check", "--config", &config])
        .stdout(Stdio::null())
        .stderr(full)
        .output()
        .expect("run junction");
    assert_eq!(run.status.code(), Some(2), "{:?}", run.status);
}

#[tokio::test]
async fn import_claude_desktop() {
    // The tokens written as is in the file are not copied: they come from
    // the environment (set here for the check), as the report says.
    let run = import_and_check(
        "claude_desktop.json",
        1,
        &["filesystem", "github", "brave-search", "sqlite-db"],
        &[
            ("GITHUB_PERSONAL_ACCESS_TOKEN", "t"),
            ("BRAVE_API_KEY", "k"),
        ],
    )
    .await;
    assert!(run.stdout.contains(
        "[mounts.github]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-github\"]\nenv = { GITHUB_PERSONAL_ACCESS_TOKEN = \"${GITHUB_PERSONAL_ACCESS_TOKEN}\" }\nisolation = \"shared\"\n"
    ), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("# \"Brave Search\" in the source\n[mounts.brave-search]\n"));
    assert!(
        !run.stdout.contains("ghp_example") && !run.stderr.contains("ghp_example"),
        "a token copied: {}{}",
        run.stdout,
        run.stderr
    );
    assert!(!run.stdout.contains("BSA-example") && !run.stderr.contains("BSA-example"));
    assert_reported(
        &run,
        "claude_desktop.json",
        &[
            "mcpServers.Brave Search: note: renamed to mount \"brave-search\"",
            "mcpServers.sqlite_db: note: renamed to mount \"sqlite-db\"",
            "mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: not translated: a secret written as is was not copied into the config; it became ${GITHUB_PERSONAL_ACCESS_TOKEN}",
            "mcpServers.Brave Search.env.BRAVE_API_KEY: not translated: a secret written as is was not copied into the config; it became ${BRAVE_API_KEY}",
        ],
    );
    assert!(run
        .stderr
        .contains("junction import: 4 of 4 servers imported"));
}

#[tokio::test]
async fn import_claude_code() {
    let run = import_and_check(
        "claude_code.mcp.json",
        1,
        &["playwright", "sentry", "linear", "db"],
        &[
            ("SENTRY_TOKEN", "t"),
            ("HOME", "/home/test"),
            ("DATABASE_URL", "postgres://db/x"),
        ],
    )
    .await;
    assert!(run.stdout.contains(
        "[mounts.sentry]\nurl = \"https://mcp.sentry.dev/mcp\"\nheaders = { Authorization = \"Bearer ${SENTRY_TOKEN}\" }\n"
    ), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("args = [\"--url\", \"${DATABASE_URL}\"]"));
    assert!(run
        .stdout
        .contains("[mounts.linear]\nurl = \"https://mcp.linear.app/sse\"\ntransport = \"sse\"\n"));
    assert_reported(
        &run,
        "claude_code.mcp.json",
        &["mcpServers.db.args.1: not translated: ${DATABASE_URL:-…}: Junction has no defaults"],
    );
    assert!(run
        .stderr
        .contains("junction import: 4 of 4 servers imported; 1 thing not translated"));
}

#[tokio::test]
async fn import_cursor() {
    let run = import_and_check(
        "cursor.json",
        0,
        &["context7", "memory", "local-tools"],
        &[("CONTEXT7_API_KEY", "k"), ("HOME", "/home/test")],
    )
    .await;
    assert!(run.stdout.contains(
        "[mounts.context7]\nurl = \"https://mcp.context7.com/mcp\"\nheaders = { CONTEXT7_API_KEY = \"${CONTEXT7_API_KEY}\" }\n"
    ), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("env = { MEMORY_FILE_PATH = \"${HOME}/.cursor/memory.json\" }"));
    assert!(run
        .stdout
        .contains("[mounts.local-tools]\nurl = \"http://localhost:3000/mcp\"\n"));
    assert!(!run.stderr.contains("not translated"), "{}", run.stderr);
}

#[tokio::test]
async fn import_vscode() {
    let run = import_and_check(
        "vscode.mcp.json",
        1,
        &["github", "perplexity", "fetch", "events"],
        &[("GITHUB_TOKEN", "t"), ("PERPLEXITY_KEY", "k")],
    )
    .await;
    assert!(run.stdout.contains(
        "[mounts.github]\nurl = \"https://api.githubcopilot.com/mcp/\"\nheaders = { Authorization = \"Bearer ${GITHUB_TOKEN}\" }\n"
    ), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("env = { PERPLEXITY_API_KEY = \"${PERPLEXITY_KEY}\" }"));
    assert!(run.stdout.contains("cwd = \"/srv/fetch\""));
    assert!(!run.stdout.contains("envFile"), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("[mounts.events]\nurl = \"http://localhost:8931/sse\"\ntransport = \"sse\"\n"));
    assert_reported(
        &run,
        "vscode.mcp.json",
        &[
            "servers.github.headers.Authorization: not translated: ${input:github_token} (VS Code prompts for secret \"GitHub Personal Access Token\") became ${GITHUB_TOKEN}",
            "servers.Perplexity: note: renamed to mount \"perplexity\"",
            "servers.Perplexity.env.PERPLEXITY_API_KEY: not translated: ${input:perplexity-key} (VS Code prompts for secret \"Perplexity API Key\") became ${PERPLEXITY_KEY}",
            "servers.Perplexity.envFile: not translated: Junction does not read env files",
        ],
    );
    assert!(run
        .stderr
        .contains("junction import: 4 of 4 servers imported; 3 things not translated"));
}

#[tokio::test]
async fn import_rejects_unreadable_or_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let not_json = dir.path().join("broken.json");
    std::fs::write(&not_json, "{\"mcpServers\": {").unwrap();
    let no_servers = dir.path().join("settings.json");
    std::fs::write(&no_servers, "{\"editor.fontSize\": 14}").unwrap();
    for (path, message) in [
        (&missing, "cannot read file"),
        (&not_json, "not valid JSON"),
        (&no_servers, "no servers found"),
    ] {
        let path = path.display().to_string();
        let run = junction(&["import", &path], &[]).await;
        run.expect_code(2);
        assert_eq!(run.stdout, "", "no TOML for invalid input");
        assert!(
            run.stderr
                .contains(&format!("junction import: {path}: {message}")),
            "{}",
            run.stderr
        );
    }
}

#[tokio::test]
async fn every_command_has_help_with_examples() {
    for (command, example) in [
        ("check", "junction check --config"),
        ("tools", "junction tools --config"),
        ("import", "junction import ~/.cursor/mcp.json"),
    ] {
        let run = junction(&[command, "--help"], &[]).await;
        run.expect_code(0);
        assert!(run.stdout.contains("Examples:"), "{}", run.stdout);
        assert!(run.stdout.contains(example), "{}", run.stdout);
        assert!(run.stdout.contains("Exit codes:"), "{}", run.stdout);
    }
}

#[tokio::test]
async fn serving_flags_are_refused_where_they_do_not_apply() {
    let source = fixture("cursor.json");
    let source = source.to_str().expect("utf-8 path");
    let run = junction(&["import", source, "--config", "x.toml"], &[]).await;
    run.expect_code(2);
    assert!(
        run.stderr.contains("--config does not apply"),
        "{}",
        run.stderr
    );
    let run = junction(&["--listen", "127.0.0.1:0", "tools"], &[]).await;
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("--listen only applies to serve and check"),
        "{}",
        run.stderr
    );
}

/// `check` takes `--listen` as `serve` does, so a deployment's command
/// line can be checked as it runs (it was refused, though `--help` lists
/// it), and says where that config would serve.
#[tokio::test]
async fn check_takes_the_listen_address_serve_would() {
    let (_dir, path) = config_file("[mounts.a]\ncommand = \"x\"\n");
    let run = junction(
        &["check", "--config", &path, "--listen", "0.0.0.0:9090"],
        &[],
    )
    .await;
    run.expect_code(0);
    assert!(
        run.stdout.contains("served at http://0.0.0.0:9090/mcp"),
        "{}",
        run.stdout
    );
}

/// The configs the repository ships for deployment are valid: a renamed
/// key would otherwise put every deployment built from them into a crash
/// loop with nothing here noticing. Checked with the image's environment.
#[tokio::test]
async fn the_shipped_deployment_configs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let configmap: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("deploy/kubernetes/configmap.yaml"))
            .expect("the ConfigMap"),
    )
    .expect("the ConfigMap is YAML");
    let in_configmap = configmap["data"]["junction.toml"]
        .as_str()
        .expect("the ConfigMap holds junction.toml")
        .to_owned();
    let compose = std::fs::read_to_string(root.join("deploy/compose/junction.toml"))
        .expect("the Compose config");
    let image_env = [
        ("JUNCTION_SERVER__LISTEN", "0.0.0.0:8080"),
        ("JUNCTION_SERVER__ALLOWED_HOSTS", "[\"*\"]"),
        ("UPSTREAM_TOKEN", "test-token"),
    ];
    for (what, config) in [("configmap.yaml", in_configmap), ("compose", compose)] {
        let (_dir, path) = config_file(&config);
        let run = junction(&["check", "--config", &path], &image_env).await;
        assert_eq!(run.code(), Some(0), "{what}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains(": valid;"), "{what}: {}", run.stdout);
    }
}
