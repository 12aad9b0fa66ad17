//! Junction's soak test: many client sessions calling tools through a real
//! gateway while its upstreams are killed at random, bounded in time.
//!
//! ```sh
//! scripts/soak.sh 60                       # build (debug) and soak for 60 s
//! target/debug/examples/soak --help        # sessions, kill interval, seed, ...
//! ```
//!
//! It starts `junction demo-server --http 127.0.0.1:0` and a gateway on
//! 127.0.0.1:0 (a private copy of the binary, so a rebuild cannot swap it
//! mid-run) mounting the demo server three ways: `shared` (stdio, one
//! process), `private` (stdio, per session) and `remote` (the HTTP one,
//! shared); each stdio mount's processes carry `SOAK_MOUNT=<mount>` so they
//! can be told apart. After a warm-up with every session open it measures
//! the gateway's descendant processes and RSS ("before"), then for the
//! given duration runs the sessions (`soak/load.rs`: random calls, two in
//! flight per session, sessions closed and reopened) while `soak/chaos.rs`
//! SIGKILLs a random descendant of the gateway every 1–3 s (every 5th kill
//! takes the HTTP upstream down and starts it again). Then it closes every
//! session, waits (bounded) for the per-session upstreams to go, measures
//! again ("after"), SIGTERMs the gateway and checks that every descendant it
//! saw (`soak/procs.rs` scans `/proc` every 100 ms) is gone.
//!
//! It fails (exit 1; `soak/report.rs` decides) on a lost response (a
//! request with no answer within the call timeout), an answer that does not
//! match its request, a per-session upstream left after all sessions closed
//! (one whose pid the `private__pid` tool named, or more `private`/`shared`
//! processes than the mount-level sessions account for), a descendant alive
//! after the gateway exited, a "panicked" line in any log, the gateway
//! exiting with a failure, or no successful call at all. Tool and protocol
//! errors are expected while upstreams die; they are counted by kind, never
//! a failure by themselves. Exit 2: the soak could not set up.
//!
//! Everything binds 127.0.0.1; every process started is stopped by its pid
//! (also on error or Ctrl-C); every loop is bounded in count and time.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clap::Parser;

#[path = "soak/chaos.rs"]
mod chaos;
#[path = "soak/load.rs"]
mod load;
#[path = "soak/procs.rs"]
mod procs;
#[path = "soak/report.rs"]
mod report;
#[path = "shared/rss.rs"]
mod rss;

use chaos::{lock, Watcher};
use procs::{Log, Proc, ProcId};

/// Bound on the gateway becoming ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the gateway gets to exit after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(20);
/// How long descendants get to disappear once the gateway has exited.
const ORPHAN_GRACE: Duration = Duration::from_secs(5);
/// Extra time the workers get past the deadline (on top of a call timeout
/// and a close) before they count as stuck.
const WORKER_SLACK: Duration = Duration::from_secs(30);
/// A progress line this often.
const TICK: Duration = Duration::from_secs(10);
/// Mount-level stdio upstreams that may stay once no session is open: the
/// shared mount's one session; the per-session mount's discovery sessions,
/// one per client profile in use (the full profile at start-up and the
/// soak clients' own, which declares no capabilities).
const ALLOWED_IDLE: &[(&str, usize)] = &[("shared", 1), ("private", 2)];

#[derive(Parser)]
#[command(about = "Junction soak test: sessions calling tools while upstreams are killed")]
struct Cli {
    /// The junction binary (default: $SOAK_JUNCTION, else `junction` next to
    /// this example's directory, i.e. target/<profile>/junction).
    #[arg(long)]
    junction: Option<PathBuf>,
    /// Seconds of soak, at most 900 (set-up, warm-up, settling and shutdown
    /// typically add a few seconds; each of their waits is bounded).
    #[arg(long, default_value_t = 120.0)]
    duration: f64,
    /// Client sessions open at once (each with two calls in flight).
    #[arg(long, default_value_t = 24)]
    sessions: usize,
    /// Seconds a request may wait for its answer before it counts as lost.
    #[arg(long, default_value_t = 30.0)]
    call_timeout: f64,
    /// Shortest pause between kills, seconds.
    #[arg(long, default_value_t = 1.0)]
    kill_min: f64,
    /// Longest pause between kills, seconds.
    #[arg(long, default_value_t = 3.0)]
    kill_max: f64,
    /// Every how many kills the HTTP upstream is killed and restarted
    /// instead of a descendant of the gateway (0: never).
    #[arg(long, default_value_t = 5)]
    http_every: u64,
    /// Pick the mount to hit first, then one of its processes (the shared
    /// stdio upstream dies as often as all per-session ones together, and
    /// soon counts as crash-looping); default: any descendant at random.
    #[arg(long)]
    kill_by_mount: bool,
    /// Seconds to wait, once every session is closed, for per-session
    /// upstreams to go.
    #[arg(long, default_value_t = 15.0)]
    settle: f64,
    /// Random seed (printed; the timing of a run is not reproducible).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep the logs directory even if the run passes.
    #[arg(long)]
    keep_logs: bool,
}

/// splitmix64: small and seedable, enough to pick calls, pauses and victims.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// Uniform in `lo..hi` seconds.
    pub fn secs(&mut self, lo: f64, hi: f64) -> Duration {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_secs_f64((lo + (hi - lo).max(0.0) * unit).max(0.0))
    }
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let code = runtime.block_on(async {
        tokio::select! {
            code = run(cli) => code,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("soak: interrupted; stopping what it started");
                130
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

/// The run's directory (config, logs, the binary's copy). On drop (also
/// when the run is interrupted) the copy goes; the rest stays if `keep`.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path.join("junction"));
        let empty = std::fs::read_dir(&self.path).map_or(true, |mut d| d.next().is_none());
        if self.keep && !empty {
            println!("logs: {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

async fn run(cli: Cli) -> i32 {
    let mut dir = RunDir {
        path: std::env::temp_dir().join(format!("junction-soak-{}", std::process::id())),
        keep: true,
    };
    if let Err(e) = std::fs::create_dir_all(&dir.path) {
        eprintln!("soak: cannot create {}: {e}", dir.path.display());
        return 2;
    }
    let keep_logs = cli.keep_logs;
    let code = match soak(cli, &dir.path).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("soak: {e}");
            2
        }
    };
    dir.keep = code != 0 || keep_logs;
    code
}

fn junction_path(cli: &Cli) -> Result<PathBuf, String> {
    let path = match (&cli.junction, std::env::var_os("SOAK_JUNCTION")) {
        (Some(path), _) => path.clone(),
        (None, Some(path)) => PathBuf::from(path),
        (None, None) => std::env::current_exe()
            .map_err(|e| format!("current exe: {e}"))?
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("junction"))
            .ok_or("no directory above this example")?,
    };
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "no junction binary at {} (build it: cargo build --bin junction, or pass --junction)",
            path.display()
        ))
    }
}

fn config(http: std::net::SocketAddr) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
session_idle_timeout = "30m"

[mounts.shared]
command = "${{JUNCTION_EXE}}"
args = ["demo-server"]
isolation = "shared"
env = {{ SOAK_MOUNT = "shared" }}

[mounts.private]
command = "${{JUNCTION_EXE}}"
args = ["demo-server"]
isolation = "per_session"
env = {{ SOAK_MOUNT = "private" }}

[mounts.remote]
url = "http://{http}/mcp"
"#
    )
}

async fn get(url: &str) -> Result<(u16, String), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let response = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.map_err(|e| e.to_string())?))
}

async fn wait_ready(gateway: &Proc) -> Result<String, String> {
    let url = format!("http://{}/readyz", gateway.addr);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok((200, body)) = get(&url).await {
            return Ok(body);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "gateway not ready within {READY_TIMEOUT:?}; stderr:\n{}",
                gateway.log.tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The gateway's live descendants, with their tags.
fn children(gateway: u32, watcher: &Watcher) -> Vec<(ProcId, String)> {
    watcher.scan_now(gateway);
    let record = lock(&watcher.record);
    procs::descendants(gateway)
        .into_iter()
        .filter(|e| !e.zombie())
        .map(|e| {
            let tag = record.seen.get(&e.id).cloned();
            (e.id, tag.unwrap_or_else(|| chaos::UNTAGGED.to_owned()))
        })
        .collect()
}

/// What is left after all sessions closed that should not be: live
/// per-session upstreams the clients saw, and stdio upstreams beyond the
/// mount-level ones.
fn leftovers(children: &[(ProcId, String)], shared: &load::Shared) -> Vec<String> {
    let mut problems = Vec::new();
    let seen: Vec<ProcId> = lock(&shared.private_pids).iter().copied().collect();
    let alive: Vec<String> = seen
        .iter()
        .filter(|id| procs::live(**id).is_some())
        .map(|id| id.pid.to_string())
        .collect();
    if !alive.is_empty() {
        problems.push(format!(
            "per-session upstreams still running: pids {}",
            alive.join(" ")
        ));
    }
    for (tag, n) in report::by_tag(children) {
        let allowed = ALLOWED_IDLE
            .iter()
            .find(|(t, _)| *t == tag)
            .map_or(0, |(_, n)| *n);
        if n > allowed {
            problems.push(format!(
                "{n} {tag} upstream processes with no session open (at most {allowed} expected)"
            ));
        }
    }
    problems
}

async fn settled_rss(pid: u32) -> u64 {
    tokio::task::spawn_blocking(move || procs::settled_rss(pid))
        .await
        .unwrap_or(0)
}

async fn soak(cli: Cli, dir: &Path) -> Result<bool, String> {
    // A private copy: a rebuild during the run (cargo replaces the file)
    // cannot change or remove what the gateway starts as `${JUNCTION_EXE}`.
    let built = junction_path(&cli)?;
    let junction = dir.join("junction");
    std::fs::copy(&built, &junction)
        .map_err(|e| format!("copy {} to {}: {e}", built.display(), junction.display()))?;
    let duration = Duration::from_secs_f64(cli.duration.clamp(1.0, 900.0));
    let sessions = cli.sessions.clamp(1, 256);
    let call_timeout = Duration::from_secs_f64(cli.call_timeout.clamp(1.0, 120.0));
    let kill_min = cli.kill_min.clamp(0.1, 60.0);
    let kill_max = cli.kill_max.clamp(kill_min, 60.0);
    let settle = Duration::from_secs_f64(cli.settle.clamp(1.0, 120.0));
    let seed = cli.seed.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    });
    println!(
        "soak: {} (copied) for {duration:?}, {sessions} sessions, kills every {kill_min}-{kill_max}s (HTTP upstream every {}), call timeout {call_timeout:?}, seed {seed}",
        built.display(),
        match cli.http_every {
            0 => "never".to_owned(),
            n => format!("{n}th"),
        },
    );

    // ---- set-up ----
    let http_log = Log::new(&dir.join("demo-http.log"));
    let http = Proc::start(
        "demo-server --http",
        &junction,
        &["demo-server", "--http", "127.0.0.1:0"],
        &[],
        "junction demo-server listening on ",
        http_log.clone(),
    )?;
    let http_addr = http.addr;
    let http = Arc::new(Mutex::new(Some(http)));
    let config_path = dir.join("junction.toml");
    std::fs::write(&config_path, config(http_addr)).map_err(|e| format!("write config: {e}"))?;
    let gateway_log = Log::new(&dir.join("gateway.log"));
    let rust_log = std::env::var("SOAK_RUST_LOG").unwrap_or_else(|_| "info,rmcp=warn".to_owned());
    let config_arg = config_path.to_str().ok_or("non-UTF-8 temp path")?;
    let mut gateway = Proc::start(
        "gateway",
        &junction,
        &["--config", config_arg, "--listen", "127.0.0.1:0"],
        &[("RUST_LOG", &rust_log)],
        "junction listening on ",
        gateway_log.clone(),
    )?;
    let gw = gateway.pid();
    let readyz = wait_ready(&gateway).await?;
    println!("gateway pid {gw} on {}; /readyz {readyz}", gateway.addr);
    let mut watcher = Watcher::start(chaos::Plan {
        gateway: gw,
        http: http.clone(),
        http_addr,
        junction: junction.clone(),
        http_log: http_log.clone(),
        http_every: cli.http_every,
        interval: (kill_min, kill_max),
        by_mount: cli.kill_by_mount,
        seed: seed ^ 0x5eed,
    });
    let idle = children(gw, &watcher);
    let rss_idle = procs::rss_bytes(gw);

    // ---- warm-up: every session open, each with its per-session upstream ----
    let shared = Arc::new(load::Shared::new(
        format!("http://{}/mcp", gateway.addr),
        call_timeout,
    ));
    let warm_started = Instant::now();
    let clients =
        futures::future::join_all((0..sessions).map(|_| load::open(shared.as_ref()))).await;
    let open_now = clients.iter().filter(|c| c.is_some()).count();
    println!(
        "warm-up: {open_now} of {sessions} sessions open in {:.1?}",
        warm_started.elapsed()
    );
    let before = children(gw, &watcher);
    let rss_before = settled_rss(gw).await;
    println!("before: children {}", report::describe(&before));
    println!("before: gateway RSS {}", report::mib(rss_before));

    // ---- soak ----
    let started = Instant::now();
    let deadline = started + duration;
    watcher.kill_until(deadline);
    let mut rng = Rng::new(seed);
    let workers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(id, client)| {
            tokio::spawn(load::worker(
                shared.clone(),
                id,
                client,
                rng.next_u64(),
                deadline,
            ))
        })
        .collect();
    let aborts: Vec<_> = workers.iter().map(|w| w.abort_handle()).collect();
    let mut all = futures::future::join_all(workers);
    let limit = deadline + call_timeout + Duration::from_secs(10) + WORKER_SLACK;
    let mut stuck = false;
    let mut worker_panics = 0;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    loop {
        tokio::select! {
            results = &mut all => {
                worker_panics = results.iter().filter(|r| r.is_err()).count();
                break;
            }
            _ = tick.tick() => {
                if Instant::now() >= limit {
                    stuck = true;
                    break;
                }
                report::progress_line(started, &shared, &watcher, gw);
            }
        }
    }
    drop(all);
    if stuck {
        for abort in &aborts {
            abort.abort();
        }
    }
    let soaked = started.elapsed();

    // ---- after: all sessions closed; wait for per-session upstreams ----
    let settle_started = Instant::now();
    let mut after = children(gw, &watcher);
    while !leftovers(&after, &shared).is_empty() && settle_started.elapsed() < settle {
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = children(gw, &watcher);
    }
    let settled_in = settle_started.elapsed();
    // Exited but not reaped yet: shown, not a failure (tokio reaps orphaned
    // children lazily).
    let zombies = procs::descendants(gw).iter().filter(|e| e.zombie()).count();
    let left = leftovers(&after, &shared);
    let rss_after = settled_rss(gw).await;
    let status = match get(&format!("http://{}/status.json", gateway.addr)).await {
        Ok((200, body)) => report::mount_status(&body),
        Ok((code, _)) => format!("/status.json: HTTP {code}"),
        Err(e) => format!("/status.json: {e}"),
    };

    // ---- shutdown ----
    let exit = tokio::task::spawn_blocking(move || {
        let exit = gateway.terminate(EXIT_GRACE);
        gateway.wait_drained();
        exit
    })
    .await
    .map_err(|e| format!("stopping the gateway: {e}"))?;
    let orphans_started = Instant::now();
    let seen: Vec<(ProcId, String)> = {
        let record = lock(&watcher.record);
        record.seen.iter().map(|(k, v)| (*k, v.clone())).collect()
    };
    let mut leaked: Vec<(ProcId, String)> = seen.clone();
    // Bounded: ORPHAN_GRACE in 50 ms steps.
    while !leaked.is_empty() && orphans_started.elapsed() < ORPHAN_GRACE {
        leaked.retain(|(id, _)| procs::live(*id).is_some());
        if !leaked.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (id, _) in &leaked {
        procs::sigkill(*id);
    }
    watcher.stop();
    if let Some(mut http) = lock(&http).take() {
        let _ = http.terminate(Duration::from_secs(5));
        http.wait_drained();
    }

    // ---- report ----
    let findings = report::Findings {
        soaked,
        sessions,
        seed,
        tally: std::mem::take(&mut *lock(&shared.tally)),
        progress: shared.progress.load(std::sync::atomic::Ordering::Relaxed),
        record: std::mem::take(&mut *lock(&watcher.record)),
        idle,
        before,
        after,
        settled_in,
        zombies,
        left,
        rss: [rss_idle, rss_before, rss_after],
        status,
        exit,
        seen: seen.len(),
        leaked,
        stuck,
        worker_panics,
        gateway_panics: gateway_log.panics(),
        http_panics: http_log.panics(),
    };
    let failures = findings.failures();
    print!("{}", findings.render(&failures));
    Ok(failures.is_empty())
}
