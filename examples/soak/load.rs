//! The clients: rmcp Streamable HTTP sessions calling random demo tools on
//! the three mounts through the gateway. Every request is bounded by the
//! call timeout; one that gets no answer within it is a *lost response*.
//! Every answer is checked against its request (an `echo` must come back
//! with its own message, `add` with its own sum) and classified.
//!
//! A session makes a random number of calls, two at a time, and is then
//! closed (rmcp's client sends the DELETE) and a new one opened, so
//! per-session upstreams keep being started and stopped.

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        JsonObject, ProgressNotificationParam, ProtocolVersion,
    },
    service::{NotificationContext, RunningService, ServiceError},
    transport::StreamableHttpClientTransport,
    ClientCacheConfig, ClientHandler, RoleClient, ServiceExt,
};
use serde_json::{json, Value};

use crate::{
    chaos::lock,
    procs::{self, ProcId},
    Rng,
};

pub const MOUNTS: [&str; 3] = ["shared", "private", "remote"];
/// Bound on closing a session (its DELETE).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Calls per session before it is closed and another opened.
const CALLS_PER_SESSION: (u64, u64) = (20, 80);
/// Calls in flight at once per session.
const IN_FLIGHT: u64 = 2;
/// Sessions one worker may open (a bound; the deadline ends it first).
const MAX_SESSIONS_PER_WORKER: usize = 100_000;
/// Pause after a failed open, so a down gateway is not hammered.
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Characters of an error text that name its kind.
const KIND_CHARS: usize = 90;
/// Examples kept of each failure list (all are counted).
const EXAMPLES: usize = 10;

#[derive(Default)]
pub struct Count {
    pub n: u64,
    pub example: String,
}

#[derive(Default)]
pub struct MountTally {
    pub calls: u64,
    pub ok: u64,
    pub errors: u64,
}

/// Everything the clients saw.
#[derive(Default)]
pub struct Tally {
    pub calls: u64,
    pub ok: u64,
    /// `fail` answered with its own tool error, as it should.
    pub expected: u64,
    pub errors: BTreeMap<String, Count>,
    pub per_mount: BTreeMap<&'static str, MountTally>,
    /// Requests with no answer within the call timeout.
    pub lost: Count,
    /// Answers that do not match their request.
    pub mismatched: Count,
    pub opened: u64,
    pub closed: u64,
    /// Sessions given up after their client's transport closed or a lost
    /// response.
    pub abandoned: u64,
}

impl Tally {
    fn error(&mut self, kind: String, full: &str) {
        let count = self.errors.entry(kind).or_default();
        if count.n == 0 {
            count.example = collapse(full).chars().take(300).collect();
        }
        count.n += 1;
    }
}

fn note(count: &mut Count, text: String) {
    count.n += 1;
    if count.n as usize <= EXAMPLES {
        if !count.example.is_empty() {
            count.example.push('\n');
        }
        count.example.push_str(&text);
    }
}

pub struct Shared {
    pub url: String,
    pub call_timeout: Duration,
    pub tally: Mutex<Tally>,
    /// Every process the per-session mount's `pid` tool named: each is a
    /// per-session upstream, which must be gone once its session is.
    pub private_pids: Mutex<HashSet<ProcId>>,
    /// Progress notifications received (from `slow`).
    pub progress: Arc<AtomicU64>,
}

impl Shared {
    pub fn new(url: String, call_timeout: Duration) -> Shared {
        Shared {
            url,
            call_timeout,
            tally: Mutex::default(),
            private_pids: Mutex::default(),
            progress: Arc::default(),
        }
    }
}

/// The client handler: no capabilities (like most clients); counts
/// progress.
#[derive(Clone)]
pub struct SoakClient {
    info: ClientConfig,
    progress: Arc<AtomicU64>,
}

impl ClientHandler for SoakClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
}

pub type Client = RunningService<RoleClient, SoakClient>;

/// An error text made into a kind: first line, bracketed parts (rmcp
/// puts transport type names there) as `[…]`, digits as `N`, cut short.
fn kind(prefix: &str, text: &str) -> String {
    let mut out = String::from(prefix);
    let mut digits = false;
    let line = collapse(text.lines().next().unwrap_or(""));
    for (i, c) in line.chars().enumerate() {
        if i >= KIND_CHARS {
            out.push('…');
            break;
        }
        if c.is_ascii_digit() {
            if !digits {
                out.push('N');
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}

/// `text` with every `[...]` (nested included) shown as `[…]`.
fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[…]");
                }
                depth += 1;
            }
            ']' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out
}

fn service_error_kind(what: &str, error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(e) => kind(&format!("jsonrpc {} ({what}): ", e.code.0), &e.message),
        other => kind(&format!("transport ({what}): "), &other.to_string()),
    }
}

/// Opens a session: initialize, list the tools, and call the per-session
/// mount's `pid` (which starts this session's upstream). `None` if the
/// session could not be opened (counted).
pub async fn open(shared: &Shared) -> Option<Client> {
    let transport = StreamableHttpClientTransport::from_uri(shared.url.clone());
    let handler = SoakClient {
        info: ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("junction-soak", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25),
        progress: shared.progress.clone(),
    };
    let client = match tokio::time::timeout(shared.call_timeout, handler.serve(transport)).await {
        Err(_) => {
            note(&mut lock(&shared.tally).lost, "initialize".to_owned());
            return None;
        }
        Ok(Err(error)) => {
            let text = error.to_string();
            lock(&shared.tally).error(kind("initialize: ", &text), &text);
            return None;
        }
        Ok(Ok(client)) => client,
    };
    client
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    lock(&shared.tally).opened += 1;
    match tokio::time::timeout(shared.call_timeout, client.list_all_tools()).await {
        Err(_) => {
            note(&mut lock(&shared.tally).lost, "tools/list".to_owned());
            close(shared, client).await;
            return None;
        }
        Ok(Err(error)) => {
            let text = error.to_string();
            lock(&shared.tally).error(service_error_kind("tools/list", &error), &text);
        }
        Ok(Ok(_)) => {}
    }
    let pid = Spec {
        mount: "private",
        tool: "pid",
        args: Value::Null,
        expect: Expect::Pid,
    };
    if call(shared, &client, &pid).await == Flow::Abandon {
        close(shared, client).await;
        lock(&shared.tally).abandoned += 1;
        return None;
    }
    Some(client)
}

/// Closes a session (bounded); counts a close that did not finish.
pub async fn close(shared: &Shared, mut client: Client) {
    match client.close_with_timeout(CLOSE_TIMEOUT).await {
        Ok(Some(_)) => lock(&shared.tally).closed += 1,
        Ok(None) => lock(&shared.tally).error(
            "close: did not finish".to_owned(),
            &format!("closing a session took over {CLOSE_TIMEOUT:?}"),
        ),
        Err(error) => {
            lock(&shared.tally).error("close: client task failed".to_owned(), &error.to_string())
        }
    }
}

/// One worker: runs sessions (the first given, then new ones) until
/// `deadline`, then closes its last session.
pub async fn worker(
    shared: Arc<Shared>,
    id: usize,
    mut first: Option<Client>,
    seed: u64,
    deadline: Instant,
) {
    let mut rng = Rng::new(seed);
    for _ in 0..MAX_SESSIONS_PER_WORKER {
        if Instant::now() >= deadline {
            break;
        }
        let client = match first.take() {
            Some(client) => client,
            None => match open(&shared).await {
                Some(client) => client,
                None => {
                    tokio::time::sleep(OPEN_RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let calls = rng.range(CALLS_PER_SESSION.0, CALLS_PER_SESSION.1);
        let abandon = AtomicBool::new(false);
        let loops = (0..IN_FLIGHT).map(|lane| {
            let mut rng = Rng::new(rng.next_u64());
            let (shared, client, abandon) = (&shared, &client, &abandon);
            async move {
                for n in 0..calls / IN_FLIGHT {
                    if Instant::now() >= deadline || abandon.load(Ordering::SeqCst) {
                        return;
                    }
                    let spec = pick(&mut rng, format!("soak {id}.{lane}.{n}"));
                    if call(shared, client, &spec).await == Flow::Abandon {
                        abandon.store(true, Ordering::SeqCst);
                    }
                }
            }
        });
        futures::future::join_all(loops).await;
        if abandon.load(Ordering::SeqCst) {
            lock(&shared.tally).abandoned += 1;
        }
        // Also for an abandoned session: its DELETE may still get through.
        close(&shared, client).await;
    }
    if let Some(client) = first {
        close(&shared, client).await;
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Go,
    /// The session is unusable (transport closed, or a request lost).
    Abandon,
}

enum Expect {
    Text(String),
    Pid,
    Number,
    /// `fail`: its own tool error.
    Fail,
}

struct Spec {
    mount: &'static str,
    tool: &'static str,
    args: Value,
    expect: Expect,
}

/// A random call: mount uniform, tools weighted towards the cheap ones,
/// `slow` long enough that kills land while it runs.
fn pick(rng: &mut Rng, message: String) -> Spec {
    let mount = MOUNTS[rng.below(MOUNTS.len() as u64) as usize];
    let (tool, args, expect) = match rng.below(100) {
        0..=29 => ("echo", json!({ "message": message }), Expect::Text(message)),
        30..=49 => {
            let (a, b) = (rng.below(1_000_000), rng.below(1_000_000));
            (
                "add",
                json!({ "a": a, "b": b }),
                Expect::Text((a + b).to_string()),
            )
        }
        50..=64 => ("pid", Value::Null, Expect::Pid),
        65..=79 => {
            let steps = rng.range(1, 4);
            (
                "slow",
                json!({ "steps": steps, "delay_ms": rng.range(50, 400) }),
                Expect::Text(format!("done after {steps} steps")),
            )
        }
        80..=94 => ("counter", Value::Null, Expect::Number),
        _ => ("fail", Value::Null, Expect::Fail),
    };
    Spec {
        mount,
        tool,
        args,
        expect,
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|block| block.as_text().map(|t| t.text.clone()))
        .unwrap_or_else(|| "(no text)".to_owned())
}

enum Verdict {
    Ok,
    /// `fail` answered with its own tool error.
    Expected,
    Mismatch(String),
    Error {
        kind: String,
        full: String,
    },
}

/// Checks an answer against its request.
fn check(shared: &Shared, spec: &Spec, result: &CallToolResult) -> Verdict {
    let text = text(result);
    if result.is_error == Some(true) {
        if matches!(spec.expect, Expect::Fail) && text.contains("failed on purpose") {
            return Verdict::Expected;
        }
        return Verdict::Error {
            kind: kind("tool error: ", &text),
            full: text,
        };
    }
    match &spec.expect {
        Expect::Text(want) if text == *want => Verdict::Ok,
        Expect::Number if text.parse::<u64>().is_ok() => Verdict::Ok,
        Expect::Pid => match text.parse::<u32>() {
            Ok(pid) => {
                if spec.mount == "private" {
                    if let Some(entry) = procs::stat(pid) {
                        lock(&shared.private_pids).insert(entry.id);
                    }
                }
                Verdict::Ok
            }
            Err(_) => Verdict::Mismatch(format!("answered {text:?}")),
        },
        _ => Verdict::Mismatch(format!("answered {text:?}")),
    }
}

/// One call, bounded, checked, counted.
async fn call(shared: &Shared, client: &Client, spec: &Spec) -> Flow {
    let name = format!("{}__{}", spec.mount, spec.tool);
    let mut params = CallToolRequestParams::new(name.clone());
    if let Value::Object(map) = &spec.args {
        params = params.with_arguments(JsonObject::from_iter(map.clone()));
    }
    {
        let mut tally = lock(&shared.tally);
        tally.calls += 1;
        tally.per_mount.entry(spec.mount).or_default().calls += 1;
    }
    let started = Instant::now();
    let answer = tokio::time::timeout(shared.call_timeout, client.call_tool(params)).await;
    let (verdict, flow) = match answer {
        Err(_) => {
            let mut tally = lock(&shared.tally);
            let waited = started.elapsed();
            note(
                &mut tally.lost,
                format!("{name} {} (no answer in {waited:.1?})", spec.args),
            );
            tally.per_mount.entry(spec.mount).or_default().errors += 1;
            return Flow::Abandon;
        }
        Ok(Err(error)) => {
            let dead = matches!(error, ServiceError::TransportClosed) || client.is_closed();
            let verdict = Verdict::Error {
                kind: service_error_kind("tools/call", &error),
                full: error.to_string(),
            };
            (verdict, if dead { Flow::Abandon } else { Flow::Go })
        }
        Ok(Ok(result)) => (check(shared, spec, &result), Flow::Go),
    };
    let mut tally = lock(&shared.tally);
    match verdict {
        Verdict::Ok => {
            tally.ok += 1;
            tally.per_mount.entry(spec.mount).or_default().ok += 1;
        }
        Verdict::Expected => {
            tally.expected += 1;
            tally.per_mount.entry(spec.mount).or_default().ok += 1;
        }
        Verdict::Mismatch(what) => {
            note(
                &mut tally.mismatched,
                format!("{name} {}: {what}", spec.args),
            );
            tally.per_mount.entry(spec.mount).or_default().errors += 1;
        }
        Verdict::Error { kind, full } => {
            tally.error(kind, &full);
            tally.per_mount.entry(spec.mount).or_default().errors += 1;
        }
    }
    flow
}
