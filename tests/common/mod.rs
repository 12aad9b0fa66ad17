//! Shared helpers for the integration tests: start the `junction` binary
//! (gateway or demo server) as a real process, wait for it with bounded
//! polling, connect rmcp clients over Streamable HTTP, and make sure every
//! process started here is stopped (by pid) when its guard is dropped.
//!
//! Nothing here sleeps for a fixed time: every wait polls with a deadline
//! and fails with the process's stderr attached.

// Each test crate (`gateway`, `cli`, `relay`) uses a different subset.
#![allow(dead_code)]
// Sampling, roots and logging are deprecated by SEP-2577 (2026-07-28) but
// are what handshake-era clients and servers use.
#![allow(deprecated)]

use std::{
    future::Future,
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        CreateMessageRequestParams, CreateMessageResult, Implementation, JsonObject,
        ListRootsResult, LoggingMessageNotificationParam, NotificationMetaObject,
        ProgressNotificationParam, ProgressToken, ProtocolVersion,
        ResourceUpdatedNotificationParam, Root, SamplingMessage,
    },
    service::{NotificationContext, RequestContext, RunningService},
    transport::StreamableHttpClientTransport,
    ClientCacheConfig, ClientHandler, RoleClient, ServiceExt,
};
use serde_json::Value;

pub mod flaky_stream;
pub mod forgetful_http;
pub mod legacy_sse;
pub mod pausable_proxy;
pub mod raw;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_junction");

/// Bound on start-up waits (listening, ready).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on one MCP or HTTP request.
pub const OP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopped process gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(25);

/// Polls `probe` until it yields `Some`, or panics after `timeout` naming
/// `what`. Each probe is itself bounded by the time left.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_until(timeout, probe).await {
        Some(value) => value,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Polls `probe` until it yields `Some`, for at most `timeout`; `None` if
/// it never did (for a condition that may rightly not come).
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok(Some(value)) = tokio::time::timeout(left.max(POLL), probe()).await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `future` for at most [`OP_TIMEOUT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(OP_TIMEOUT, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {OP_TIMEOUT:?}"),
    }
}

/// A `junction` command with a clean environment for the gateway: no
/// `JUNCTION_*` overrides from the developer's shell, a fixed log filter (the
/// "listening on" line is an info line), stdin and stdout unused.
pub fn junction_command() -> Command {
    let mut command = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("JUNCTION_") {
            command.env_remove(&key);
        }
    }
    // JUNCTION_TEST_RUST_LOG (e.g. `info,junction=debug`) turns up the log
    // of every process a test starts, for investigating a failure.
    command
        .env(
            "RUST_LOG",
            std::env::var("JUNCTION_TEST_RUST_LOG").unwrap_or_else(|_| "info,rmcp=warn".to_owned()),
        )
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Lines read from a pipe by a background thread, so the child never blocks
/// on a full pipe and the test can look at what it wrote so far.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<String>>>, Arc<AtomicBool>);

/// How long to wait for a pipe's last lines once its process has exited
/// (longer only if a grandchild still holds the pipe open).
const PIPE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Lines {
    fn pump(reader: impl Read + Send + 'static) -> Self {
        let lines = Lines::default();
        let sink = lines.clone();
        let closed = lines.1.clone();
        std::thread::spawn(move || {
            // Set on every way out of the loop: the pipe is drained.
            struct Closed(Arc<AtomicBool>);
            impl Drop for Closed {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _closed = Closed(closed);
            let mut reader = BufReader::new(reader);
            let mut buffer = Vec::new();
            loop {
                buffer.clear();
                match reader.read_until(b'\n', &mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buffer);
                        sink.lock()
                            .push(line.trim_end_matches(['\r', '\n']).to_owned());
                    }
                }
            }
        });
        lines
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits (bounded) until the writer closed the pipe and every line
    /// before that was read.
    pub async fn drained(&self) {
        let deadline = Instant::now() + PIPE_DRAIN_TIMEOUT;
        while !self.1.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn snapshot(&self) -> Vec<String> {
        self.lock().clone()
    }

    pub fn text(&self) -> String {
        self.snapshot().join("\n")
    }

    pub fn find(&self, needle: &str) -> Option<String> {
        self.lock()
            .iter()
            .find(|line| line.contains(needle))
            .cloned()
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL) and reaped when
/// the guard is dropped. Its stderr is collected and printed if the test
/// panics, so a failure shows what the process said.
pub struct Proc {
    name: String,
    child: Child,
    pub stderr: Lines,
    pub stdout: Option<Lines>,
}

impl Proc {
    /// Spawns `command`; stderr must be piped. A piped stdout is collected too.
    pub fn spawn(name: &str, mut command: Command) -> Proc {
        let mut child = command
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
        let stderr = Lines::pump(child.stderr.take().expect("stderr is piped"));
        let stdout = child.stdout.take().map(Lines::pump);
        Proc {
            name: name.to_owned(),
            child,
            stderr,
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for a stderr line containing `needle`; fails fast (with the
    /// stderr so far) if the process exits first.
    pub async fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.stderr.find(needle) {
                return line;
            }
            if let Some(status) = self.exited() {
                // The pump may still be reading the last lines.
                self.stderr.drained().await;
                if let Some(line) = self.stderr.find(needle) {
                    return line;
                }
                panic!(
                    "{} exited ({status}) before printing {needle:?}; stderr:\n{}",
                    self.name,
                    self.stderr.text()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} did not print {needle:?} within {timeout:?}; stderr:\n{}",
                    self.name,
                    self.stderr.text()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (bounded) for the process to exit on its own.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} still running after {timeout:?}; stderr:\n{}",
                    self.name,
                    self.stderr.text()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGTERM by pid, a bounded wait, then SIGKILL; always reaps.
    pub fn stop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "----- stderr of {} (pid {}) -----\n{}\n-----",
                self.name,
                self.child.id(),
                self.stderr.text()
            );
        }
    }
}

/// Runs a command that is expected to end by itself, within `timeout`
/// (killed and reported otherwise). Returns (status, stdout, stderr).
pub async fn run_to_exit(
    name: &str,
    mut command: Command,
    timeout: Duration,
) -> (ExitStatus, String, String) {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut proc = Proc::spawn(name, command);
    let status = proc.wait_exit(timeout).await;
    // Let the pumps drain what is left in the pipes after exit.
    let stdout = proc.stdout.clone().expect("stdout is piped");
    let stderr = proc.stderr.clone();
    stdout.drained().await;
    stderr.drained().await;
    (status, stdout.text(), stderr.text())
}

/// The address in a log line `... listening on ADDR ...`.
pub fn parse_listening(line: &str) -> SocketAddr {
    let (_, rest) = line
        .split_once("listening on ")
        .unwrap_or_else(|| panic!("no `listening on ` in {line:?}"));
    let addr = rest.split_whitespace().next().unwrap_or_default();
    addr.parse()
        .unwrap_or_else(|error| panic!("bad address {addr:?} in {line:?}: {error}"))
}

/// TOML for a `[server]` table on a free loopback port.
pub const SERVER_TOML: &str = "[server]\nlisten = \"127.0.0.1:0\"\n\n";

/// TOML for a mount running `junction demo-server` over stdio; `extra` is
/// appended inside the table (e.g. `isolation = "per_session"`).
pub fn stdio_demo_mount(name: &str, extra: &str) -> String {
    format!("[mounts.{name}]\ncommand = {BIN:?}\nargs = [\"demo-server\"]\n{extra}\n\n")
}

/// TOML for a mount running the demo server through `sh`, which first
/// leaves a process of its own behind (`sleep`, as `npx` leaves the real
/// server) and writes its pid to `marker`; every start of the mount's
/// upstream writes it again. The straggler's stdio is not the server's, so
/// the server's end shows on its pipe.
pub fn wrapped_demo_mount(name: &str, marker: &std::path::Path, extra: &str) -> String {
    straggler_mount(name, "", marker, extra)
}

/// As [`wrapped_demo_mount`], but the straggler leaves the process group
/// for a session of its own (`setsid`), as the browsers Playwright launches
/// do.
pub fn detached_straggler_mount(name: &str, marker: &std::path::Path, extra: &str) -> String {
    straggler_mount(name, "setsid ", marker, extra)
}

fn straggler_mount(name: &str, launcher: &str, marker: &std::path::Path, extra: &str) -> String {
    let script = format!(
        "{launcher}sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {}; exec {BIN} demo-server",
        marker.display()
    );
    format!("[mounts.{name}]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n{extra}\n\n")
}

/// TOML for a mount running the stdlib Python fixture `file` (under
/// `tests/fixtures/`) over stdio; `extra` is appended inside the table.
pub fn python_fixture_mount(name: &str, file: &str, extra: &str) -> String {
    python_fixture_mount_with_args(name, file, &[], extra)
}

/// Like [`python_fixture_mount`], the fixture given `args`.
pub fn python_fixture_mount_with_args(
    name: &str,
    file: &str,
    args: &[&str],
    extra: &str,
) -> String {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    let fixture = fixture.to_str().expect("a UTF-8 path");
    let args: Vec<String> = std::iter::once(fixture)
        .chain(args.iter().copied())
        .map(|arg| format!("{arg:?}"))
        .collect();
    let args = args.join(", ");
    format!("[mounts.{name}]\ncommand = \"python3\"\nargs = [{args}]\n{extra}\n\n")
}

/// TOML for a `per_session` mount of the demo server whose second start
/// fails (the first is the mount's own discovery; the second, the first
/// for a client profile other than the full one). `dir` keeps the count.
pub fn second_start_fails_mount(name: &str, dir: &std::path::Path) -> String {
    let count = dir.join("starts");
    let script = format!(
        "n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; [ $n -eq 2 ] && exit 1; exec {BIN} demo-server",
        count = count.display()
    );
    format!(
        "[mounts.{name}]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\nisolation = \"per_session\"\n\n"
    )
}

/// The pid `wrapped_demo_mount`'s last start wrote to `marker`.
pub async fn straggler_pid(marker: &std::path::Path) -> u32 {
    eventually("the straggler's pid", OP_TIMEOUT, || async {
        std::fs::read_to_string(marker).ok()?.trim().parse().ok()
    })
    .await
}

/// TOML for a mount of a Streamable HTTP upstream.
pub fn http_mount(name: &str, url: &str, extra: &str) -> String {
    format!("[mounts.{name}]\nurl = {url:?}\n{extra}\n\n")
}

/// A running gateway process on a free loopback port.
pub struct Gateway {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts a gateway from TOML and waits until `/readyz` says ready.
    pub async fn start(config_toml: &str) -> Gateway {
        let gateway = Gateway::launch(config_toml, "toml", &[]).await;
        gateway.wait_ready().await;
        gateway
    }

    /// Writes `config` to `junction.EXT` in a fresh directory, runs
    /// `junction --config PATH --listen 127.0.0.1:0` with `envs`, and waits
    /// for the "listening on" line (not for readiness).
    pub async fn launch(config: &str, ext: &str, envs: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join(format!("junction.{ext}"));
        std::fs::write(&config_path, config).expect("write config");
        let mut command = junction_command();
        command
            .arg("--config")
            .arg(&config_path)
            .args(["--listen", "127.0.0.1:0"])
            .current_dir(dir.path())
            .envs(envs.iter().copied());
        let mut proc = Proc::spawn("gateway", command);
        let line = proc.wait_for_line("listening on ", START_TIMEOUT).await;
        let addr = parse_listening(&line);
        assert!(addr.ip().is_loopback(), "gateway bound {addr}");
        Gateway {
            proc,
            addr,
            config_path,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn mcp_url(&self) -> String {
        self.url("/mcp")
    }

    /// Polls `/readyz` until 200 and returns its JSON body.
    pub async fn wait_ready(&self) -> Value {
        let url = self.url("/readyz");
        let http = reqwest::Client::new();
        eventually("/readyz to answer 200", START_TIMEOUT, || {
            let request = http.get(&url).send();
            async move {
                let response = request.await.ok()?;
                if response.status() != reqwest::StatusCode::OK {
                    return None;
                }
                response.json::<Value>().await.ok()
            }
        })
        .await
    }

    /// A new MCP client session on the gateway's endpoint.
    pub async fn connect(&self) -> Client {
        connect(&self.mcp_url()).await
    }
}

/// The test client's handler: declares the given capabilities, answers
/// sampling (`"echo: <prompt>"` from model `test-model`, after `N` ms for
/// a prompt `"sleep N"`, as a person approving it would) and roots
/// (`file:///junction-test-root`), and records what the server sends.
#[derive(Clone)]
pub struct TestClient {
    info: ClientConfig,
    tool_list_changes: Arc<AtomicUsize>,
    prompt_list_changes: Arc<AtomicUsize>,
    resource_list_changes: Arc<AtomicUsize>,
    sampling_requests: Arc<AtomicUsize>,
    /// `(progress token, progress)` of every progress notification.
    progress: Arc<Mutex<Vec<(ProgressToken, f64)>>>,
    /// `data` of every log message.
    logs: Arc<Mutex<Vec<Value>>>,
    /// The URI of every `notifications/resources/updated`.
    resource_updates: Arc<Mutex<Vec<String>>>,
    resource_updated_meta: Arc<Mutex<Vec<Option<Value>>>>,
}

impl TestClient {
    fn new(info: ClientConfig) -> Self {
        Self {
            info,
            tool_list_changes: Arc::default(),
            prompt_list_changes: Arc::default(),
            resource_list_changes: Arc::default(),
            sampling_requests: Arc::default(),
            progress: Arc::default(),
            logs: Arc::default(),
            resource_updates: Arc::default(),
            resource_updated_meta: Arc::default(),
        }
    }

    pub fn tool_list_changes(&self) -> usize {
        self.tool_list_changes.load(Ordering::SeqCst)
    }

    pub fn prompt_list_changes(&self) -> usize {
        self.prompt_list_changes.load(Ordering::SeqCst)
    }

    pub fn resource_list_changes(&self) -> usize {
        self.resource_list_changes.load(Ordering::SeqCst)
    }

    pub fn sampling_requests(&self) -> usize {
        self.sampling_requests.load(Ordering::SeqCst)
    }

    pub fn progress(&self) -> Vec<(ProgressToken, f64)> {
        self.progress.lock().unwrap().clone()
    }

    pub fn logs(&self) -> Vec<Value> {
        self.logs.lock().unwrap().clone()
    }

    pub fn resource_updates(&self) -> Vec<String> {
        self.resource_updates.lock().unwrap().clone()
    }

    /// The `_meta` of each `resources/updated`, in the order of
    /// [`TestClient::resource_updates`].
    pub fn resource_updated_meta(&self) -> Vec<Option<Value>> {
        self.resource_updated_meta.lock().unwrap().clone()
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        self.sampling_requests.fetch_add(1, Ordering::SeqCst);
        let prompt = params
            .messages
            .first()
            .and_then(|message| message.content.first())
            .and_then(|content| content.as_text())
            .map(|text| text.text.clone())
            .unwrap_or_default();
        if let Some(ms) = prompt.strip_prefix("sleep ").and_then(|ms| ms.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("echo: {prompt}")),
            "test-model".to_owned(),
        ))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, rmcp::ErrorData> {
        Ok(ListRootsResult::new(vec![Root::new(
            "file:///junction-test-root",
        )]))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tool_list_changes.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.prompt_list_changes.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.resource_list_changes.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push((params.progress_token, params.progress));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params.data);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        // The `_meta` first: a test that has seen the URI finds it too.
        // rmcp 3.11 puts a notification's `_meta` among its context's
        // extensions.
        let meta = params
            .meta
            .or_else(|| context.extensions.get::<NotificationMetaObject>().cloned())
            .and_then(|meta| serde_json::to_value(meta).ok());
        self.resource_updated_meta.lock().unwrap().push(meta);
        self.resource_updates.lock().unwrap().push(params.uri);
    }
}

pub type Client = RunningService<RoleClient, TestClient>;

/// Every client capability the gateway can relay (the full profile its
/// shared upstream sessions declare).
pub fn full_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "sampling": {},
        "roots": {"listChanged": true},
        "elicitation": {"form": {}, "url": {}},
    }))
    .expect("valid capabilities")
}

/// Connects an rmcp client over Streamable HTTP with no capabilities.
pub async fn connect(url: &str) -> Client {
    connect_with(url, ClientCapabilities::default()).await
}

/// Connects an rmcp client over Streamable HTTP, speaking the handshake-era
/// protocol (2025-11-25) as today's clients do, with rmcp's client-side
/// response cache off so every list and read reaches the server (a stale
/// cached answer must never hide an error or a change).
pub async fn connect_with(url: &str, capabilities: ClientCapabilities) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let info = ClientConfig::new(capabilities, Implementation::new("junction-tests", "0"))
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let handler = TestClient::new(info);
    let client = within(&format!("connecting to {url}"), handler.serve(transport))
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
    client
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    client
}

/// Ends a client session; rmcp's Streamable HTTP client sends the DELETE
/// for its session as part of closing.
pub async fn close(client: Client) {
    within("closing the client", client.cancel())
        .await
        .expect("client task panicked");
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    match args {
        Value::Object(map) => params = params.with_arguments(JsonObject::from_iter(map)),
        Value::Null => {}
        other => panic!("tool arguments must be an object, got {other}"),
    }
    params
}

/// Calls a tool; panics on a protocol error (a tool error is a result).
pub async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    within(
        &format!("tools/call {name}"),
        client.call_tool(params(name, args)),
    )
    .await
    .unwrap_or_else(|error| panic!("tools/call {name} failed: {error}"))
}

/// Calls a tool expecting a JSON-RPC error; returns it.
pub async fn call_err(client: &Client, name: &str, args: Value) -> rmcp::ErrorData {
    match within(
        &format!("tools/call {name}"),
        client.call_tool(params(name, args)),
    )
    .await
    {
        Err(rmcp::service::ServiceError::McpError(error)) => error,
        Err(other) => panic!("tools/call {name}: expected a JSON-RPC error, got {other}"),
        Ok(result) => panic!("tools/call {name}: expected a JSON-RPC error, got {result:?}"),
    }
}

/// The text of a result's first content block.
pub fn text(result: &CallToolResult) -> &str {
    &result
        .content
        .first()
        .unwrap_or_else(|| panic!("empty result {result:?}"))
        .as_text()
        .unwrap_or_else(|| panic!("first content is not text: {result:?}"))
        .text
}

/// Asserts a tool result is a success and returns its text.
pub fn ok_text(result: &CallToolResult) -> &str {
    assert_ne!(result.is_error, Some(true), "tool failed: {result:?}");
    text(result)
}

/// The pid a demo server's `pid` tool returned.
pub async fn call_pid(client: &Client, tool: &str) -> u32 {
    let result = call(client, tool, Value::Null).await;
    ok_text(&result)
        .parse()
        .unwrap_or_else(|error| panic!("{tool} returned {result:?}: {error}"))
}

/// Whether a process exists and has not exited (a zombie counts as exited).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Whether `/proc/<pid>` still exists at all (zombies included).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A `junction demo-server --http 127.0.0.1:0` process.
pub struct DemoHttp {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl DemoHttp {
    pub async fn start() -> DemoHttp {
        let mut command = junction_command();
        command.args(["demo-server", "--http", "127.0.0.1:0"]);
        let mut proc = Proc::spawn("demo-server --http", command);
        let line = proc
            .wait_for_line("junction demo-server listening on ", START_TIMEOUT)
            .await;
        let addr = parse_listening(&line);
        assert!(addr.ip().is_loopback(), "demo server bound {addr}");
        DemoHttp { proc, addr }
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// SIGKILLs process `pid` (an upstream, to make it crash).
pub fn kill(pid: u32) {
    let pid = i32::try_from(pid).expect("pid fits in i32");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap_or_else(|error| panic!("kill -KILL {pid}: {error}"));
}

/// The gateway's `/status.json`.
pub async fn status_json(gateway: &Gateway) -> Value {
    let response = within(
        "GET /status.json",
        reqwest::get(gateway.url("/status.json")),
    )
    .await
    .expect("GET /status.json");
    within("the status body", response.json())
        .await
        .expect("a JSON status")
}

/// The gateway's `/metrics` text.
pub async fn metrics_text(gateway: &Gateway) -> String {
    let response = within("GET /metrics", reqwest::get(gateway.url("/metrics")))
        .await
        .expect("GET /metrics");
    within("the metrics", response.text())
        .await
        .expect("the metrics text")
}

/// The value of `series` (its name and labels, exactly as rendered) in
/// `metrics`, if it is there.
pub fn metric_value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The `/readyz` body, as JSON.
pub async fn readyz(gateway: &Gateway) -> Value {
    let response = within("GET /readyz", reqwest::get(gateway.url("/readyz")))
        .await
        .expect("readyz answers");
    within("readyz body", response.json())
        .await
        .expect("readyz JSON")
}

/// Waits until `/readyz` shows mount `name` in `state`; returns the mount.
pub async fn wait_state(gateway: &Gateway, name: &str, state: &str) -> Value {
    eventually(
        &format!("mount {name} to be {state}"),
        OP_TIMEOUT,
        || async {
            let body = readyz(gateway).await;
            let mount = readyz_mount(&body, name).clone();
            (mount["state"] == state).then_some(mount)
        },
    )
    .await
}

/// The mount entry named `name` in a `/readyz` body.
pub fn readyz_mount<'a>(readyz: &'a Value, name: &str) -> &'a Value {
    readyz["mounts"]
        .as_array()
        .unwrap_or_else(|| panic!("no mounts array in {readyz}"))
        .iter()
        .find(|mount| mount["name"] == name)
        .unwrap_or_else(|| panic!("no mount {name} in {readyz}"))
}

/// Every tool name the server lists to `client`, sorted.
/// The tool `name` as `client` is shown it; panics if it is not listed.
pub async fn listed_tool(client: &Client, name: &str) -> rmcp::model::Tool {
    let tools = within("tools/list", client.list_all_tools())
        .await
        .unwrap_or_else(|error| panic!("tools/list failed: {error}"));
    let names: Vec<String> = tools.iter().map(|tool| tool.name.to_string()).collect();
    tools
        .into_iter()
        .find(|tool| tool.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {names:?}"))
}

pub async fn tool_names(client: &Client) -> Vec<String> {
    let tools = within("tools/list", client.list_all_tools())
        .await
        .unwrap_or_else(|error| panic!("tools/list failed: {error}"));
    let mut names: Vec<String> = tools
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    names.sort();
    names
}

/// Connects like [`connect`], but returns a refused or failed handshake as
/// an error instead of panicking (for polling until a place is free).
pub async fn try_connect(url: &str) -> Result<Client, String> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("junction-tests", "0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let handler = TestClient::new(info);
    let client = match tokio::time::timeout(OP_TIMEOUT, handler.serve(transport)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => return Err(error.to_string()),
        Err(_) => return Err(format!("no handshake within {OP_TIMEOUT:?}")),
    };
    client
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(client)
}

/// Replaces the config file atomically (write beside it, then rename), as
/// editors and ConfigMap updates do, so the gateway never reads half a file.
pub fn rewrite_config(path: &std::path::Path, toml: &str) {
    let staged = path.with_extension("toml.staged");
    std::fs::write(&staged, toml).expect("write staged config");
    std::fs::rename(&staged, path).expect("replace config");
}

/// Sends SIGHUP to the gateway, by pid.
pub fn hang_up(gateway: &Gateway) {
    let pid = i32::try_from(gateway.proc.pid()).expect("pid fits in i32");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("send SIGHUP to the gateway");
}

/// SIGKILLs a process a test started or stopped, by pid, should the test
/// end (or fail) before something else has.
pub struct KillOnDrop(pub u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if process_exists(self.0) {
            if let Ok(pid) = i32::try_from(self.0) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// A Streamable HTTP server written by hand, on a free loopback port
/// (returned, with the task serving it: abort it when done): answers
/// `initialize` declaring `capabilities` (and `initialized`, and refuses
/// `GET`), then each request with `answer(request)` as its result, or,
/// for `None`, closes the connection without a word (reqwest then fails
/// the request naming its URL whole). `answer` sees each notification
/// too (its answer is not used: a notification gets 202).
pub async fn scripted_http_upstream(
    capabilities: Value,
    answer: fn(&Value) -> Option<Value>,
) -> (u16, tokio::task::JoinHandle<()>) {
    scripted_http_upstream_with_stream(capabilities, answer, |_| {
        "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n"
    })
    .await
}

/// [`scripted_http_upstream`] answering the `n`th `GET` of its message
/// stream (from 0, counted across its sessions) with the raw HTTP reply
/// `stream(n)`.
pub async fn scripted_http_upstream_with_stream(
    capabilities: Value,
    answer: fn(&Value) -> Option<Value>,
    stream: fn(usize) -> &'static str,
) -> (u16, tokio::task::JoinHandle<()>) {
    let answer = Arc::new(move |request: &Value| match answer(request) {
        Some(result) => ScriptedReply::Result(result),
        None => ScriptedReply::HangUp,
    });
    serve_scripted_on_a_free_port(capabilities, answer, stream).await
}

/// How [`scripted_sse_upstream`] answers a request.
pub enum ScriptedReply {
    /// This result, as JSON.
    Result(Value),
    /// Nothing: the connection is closed.
    HangUp,
    /// An SSE stream of these messages, each written after its pause
    /// (several with no pause between them go out in one write); the
    /// stream then ends. A message whose `id` is `"$request"` gets the
    /// request's id (the answer). A message that is an object with only
    /// `eventId` and `data` is written as that event: `data` a message, or
    /// `null` for an event with an id and no data.
    Stream(Vec<(Duration, Value)>),
}

/// [`scripted_http_upstream`] whose answers may be SSE streams. A `GET`
/// that resumes a stream (`Last-Event-ID`) is answered as the script
/// answers `{"method": "GET", "lastEventId": …}`, if with a stream.
pub async fn scripted_sse_upstream(
    capabilities: Value,
    answer: fn(&Value) -> ScriptedReply,
) -> (u16, tokio::task::JoinHandle<()>) {
    serve_scripted_on_a_free_port(capabilities, Arc::new(answer), |_| {
        "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n"
    })
    .await
}

type ScriptedAnswer = Arc<dyn Fn(&Value) -> ScriptedReply + Send + Sync>;

async fn serve_scripted_on_a_free_port(
    capabilities: Value,
    answer: ScriptedAnswer,
    stream: fn(usize) -> &'static str,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    let serving = tokio::spawn(serve_scripted(listener, capabilities, answer, stream));
    (port, serving)
}

/// The SSE reply of [`ScriptedReply::Stream`]: written piece by piece,
/// the messages after no pause together with the one before them.
async fn write_scripted_stream(
    socket: &mut (impl tokio::io::AsyncWrite + Unpin),
    request_id: &Value,
    steps: Vec<(Duration, Value)>,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut pending = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\nconnection: close\r\n\r\n",
    );
    for (pause, mut message) in steps {
        if !pause.is_zero() {
            socket.write_all(pending.as_bytes()).await?;
            pending.clear();
            tokio::time::sleep(pause).await;
        }
        let is_the_answer =
            |message: &Value| message.get("id") == Some(&Value::String("$request".to_owned()));
        if is_the_answer(&message) {
            message["id"] = request_id.clone();
        }
        if is_the_answer(&message["data"]) {
            message["data"]["id"] = request_id.clone();
        }
        match message.get("eventId").and_then(Value::as_str) {
            Some(id) if message["data"].is_null() => {
                pending.push_str(&format!("id: {id}\ndata:\n\n"))
            }
            Some(id) => pending.push_str(&format!(
                "id: {id}\nevent: message\ndata: {}\n\n",
                message["data"]
            )),
            None => pending.push_str(&format!("event: message\ndata: {message}\n\n")),
        }
    }
    socket.write_all(pending.as_bytes()).await?;
    socket.shutdown().await
}

async fn serve_scripted(
    listener: tokio::net::TcpListener,
    capabilities: Value,
    answer: ScriptedAnswer,
    stream: fn(usize) -> &'static str,
) {
    let gets = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            return;
        };
        let capabilities = capabilities.clone();
        let gets = gets.clone();
        let answer = answer.clone();
        tokio::spawn(async move {
            let mut socket = BufReader::new(socket);
            loop {
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    match socket.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) => head.push(line.to_ascii_lowercase()),
                    }
                }
                let length = head
                    .iter()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|value| value.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0; length];
                if socket.read_exact(&mut body).await.is_err() {
                    return;
                }
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let json_answer = |result: Value| {
                    let message =
                        serde_json::json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
                            .to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\ncontent-length: {}\r\n\r\n{message}",
                        message.len()
                    )
                };
                let resumed_after = head
                    .iter()
                    .find_map(|line| line.strip_prefix("last-event-id:"))
                    .map(str::trim);
                let reply = if let (true, Some(after)) =
                    (head[0].starts_with("get "), resumed_after)
                {
                    // A resume: the script's, if it has one.
                    let resume = serde_json::json!({"method": "GET", "lastEventId": after});
                    if let ScriptedReply::Stream(steps) = answer(&resume) {
                        let _ = write_scripted_stream(&mut socket, &Value::Null, steps).await;
                        return;
                    }
                    stream(gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst)).to_owned()
                } else if head[0].starts_with("get ") {
                    stream(gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst)).to_owned()
                } else if head[0].starts_with("delete ") {
                    "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else if request["method"] == "initialize" {
                    json_answer(serde_json::json!({
                        "protocolVersion": "2025-06-18",
                        "capabilities": capabilities,
                        "serverInfo": {"name": "scripted", "version": "1"}
                    }))
                } else if request.get("id").is_none() {
                    let _ = answer(&request);
                    "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else {
                    match answer(&request) {
                        ScriptedReply::Result(result) => json_answer(result),
                        ScriptedReply::HangUp => return,
                        ScriptedReply::Stream(steps) => {
                            let _ = write_scripted_stream(&mut socket, &request["id"], steps).await;
                            return;
                        }
                    }
                };
                if socket.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}
