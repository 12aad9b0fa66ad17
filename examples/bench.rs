//! Junction's load benchmark: one command, one process tree, one run.
//!
//! ```sh
//! scripts/bench.sh                      # build (release) and run everything
//! target/release/examples/bench --help  # durations, scenario selection
//! ```
//!
//! For every scenario it drives the upstream fixture directly and then the
//! same load through a Junction process mounting it, and prints both and
//! their ratio, plus the CPU time each process spent per operation (from
//! `/proc/<pid>/stat`). See BENCHMARKS.md for what each scenario measures
//! and the latest figures.
//!
//! The load generator is a lean HTTP/1.1 client (`bench/client.rs`) on a
//! single-threaded runtime; `client-cost` compares it with rmcp's own client.
//! The fixture (`bench/fixture.rs`) is an rmcp server with trivial echo
//! tools, started as a child process (`bench fixture --http …|--stdio`).
//!
//! Every child process is stopped by its pid when its scenario ends (and on
//! panic); every loop is bounded in time and count; everything binds
//! 127.0.0.1 only.

#![allow(deprecated)]

use std::{
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};

#[path = "bench/client.rs"]
mod client;
#[path = "bench/fixture.rs"]
mod fixture;
#[path = "bench/load.rs"]
mod load;
#[path = "bench/procs.rs"]
mod procs;
#[path = "shared/rss.rs"]
mod rss;

use client::{Conn, Session, StdioSession};
use load::{Op, Stats, Worker};
use procs::Proc;

const ALL: &[&str] = &[
    "nagle",
    "call-http",
    "call-stdio",
    "list",
    "setup",
    "memory",
    "client-cost",
    "fixture-cost",
];

#[derive(Parser)]
#[command(about = "Junction load benchmark (see BENCHMARKS.md)")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// The junction binary (default: `junction` next to this example's
    /// directory, i.e. target/release/junction).
    #[arg(long)]
    junction: Option<PathBuf>,
    /// Measured seconds per repetition per side.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Repetitions per side, alternating direct and through-gateway (the
    /// table shows the median rate, its range, and pooled latencies).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Warm-up seconds before each measurement (not counted).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Idle sessions for the memory scenario (also measured at 1,000).
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Comma-separated scenarios (default: all): nagle, call-http,
    /// call-stdio, list, setup, memory, client-cost, fixture-cost.
    #[arg(long)]
    only: Option<String>,
    /// Client ACK mode for every scenario but `nagle`: `quick`
    /// (TCP_QUICKACK after every read, which hides a server's Nagle stall
    /// so the rest of its cost shows) or `delayed` (the kernel default, what
    /// ordinary clients do). `nagle` always uses delayed ACKs; see
    /// BENCHMARKS.md.
    #[arg(long, default_value = "quick")]
    ack: String,
    /// Load generator worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The gateway's tokio worker threads (`TOKIO_WORKER_THREADS` for the
    /// junction process only); default: the gateway's own (one per CPU).
    #[arg(long)]
    gateway_threads: Option<usize>,
}

#[derive(Subcommand)]
enum Cmd {
    /// The upstream fixture server (used by the benchmark itself).
    Fixture {
        /// Serve Streamable HTTP at /mcp on this address.
        #[arg(long)]
        http: Option<String>,
        /// Serve stdio.
        #[arg(long)]
        stdio: bool,
        /// How many tools to list (tool 0 is `echo`).
        #[arg(long, default_value_t = 50)]
        tools: usize,
    },
    /// Drive an already running server (for profiling it with perf):
    /// `tools/call` of TOOL, or full `tools/list` with --list.
    Load {
        /// host:port of the server (MCP endpoint at /mcp).
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value = "echo")]
        tool: String,
        /// List all tools (expecting this many) instead of calling.
        #[arg(long)]
        list: Option<usize>,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
    },
    /// Open idle sessions on an already running server and leave them
    /// (for memory profiling).
    Open {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        sessions: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Some(Cmd::Fixture { http, stdio, tools }) = &cli.command {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let result = match (http, stdio) {
            (Some(addr), false) => runtime.block_on(fixture::run_http(addr, *tools)),
            (None, true) => runtime.block_on(fixture::run_stdio(*tools)),
            _ => {
                eprintln!("bench fixture: give exactly one of --http ADDR, --stdio");
                std::process::exit(2);
            }
        };
        if let Err(e) = result {
            eprintln!("bench fixture: {e}");
            std::process::exit(1);
        }
        return;
    }
    match cli.ack.as_str() {
        "delayed" => {}
        "quick" => client::set_quickack_mode(true),
        other => {
            eprintln!("bench: --ack must be `delayed` or `quick`, not {other:?}");
            std::process::exit(2);
        }
    }
    let runtime = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()
    }
    .expect("runtime");
    let code = match &cli.command {
        Some(Cmd::Load {
            addr,
            tool,
            list,
            concurrency,
            duration,
        }) => runtime.block_on(load_only(
            *addr,
            match list {
                Some(n) => Op::List(*n),
                None => Op::Call(tool.clone()),
            },
            (*concurrency).clamp(1, 1024),
            Duration::from_secs_f64(duration.clamp(0.1, 600.0)),
        )),
        Some(Cmd::Open { addr, sessions }) => runtime.block_on(async {
            let mut ids = Vec::new();
            let t0 = Instant::now();
            let (errors, first) = hold_sessions(*addr, &mut ids, (*sessions).min(100_000)).await;
            println!(
                "opened {} sessions in {:.1?}, {errors} errors {}",
                ids.len(),
                t0.elapsed(),
                first.unwrap_or_default()
            );
            i32::from(errors > 0)
        }),
        _ => runtime.block_on(bench(cli)),
    };
    runtime.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

async fn load_only(addr: SocketAddr, op: Op, c: usize, duration: Duration) -> i32 {
    let workers = match load::open_sessions(addr, "/mcp", c).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!("bench load: {e}");
            return 1;
        }
    };
    let (workers, stats) = load::run(workers, &op, duration).await;
    load::close_sessions(workers).await;
    println!(
        "{} ops, {:.0} ops/s, p50 {}, p99 {}, {} errors {}",
        stats.ops,
        stats.throughput(),
        fmt_d(stats.pct(0.5)),
        fmt_d(stats.pct(0.99)),
        stats.errors,
        stats.first_error.unwrap_or_default()
    );
    0
}

/// What the run found, for the summary.
struct Ctx {
    junction: PathBuf,
    /// `TOKIO_WORKER_THREADS` for the gateway, when set.
    gateway_threads: Option<String>,
    me: PathBuf,
    dir: PathBuf,
    duration: Duration,
    warmup: Duration,
    reps: usize,
    sessions: usize,
    table: String,
    results: Results,
}

#[derive(Default)]
struct Results {
    /// (concurrency, direct, through) for call-http.
    call_http: Vec<(usize, Series, Series)>,
    list: Vec<(usize, Series, Series)>,
    memory: Option<MemoryResult>,
}

async fn bench(cli: Cli) -> i32 {
    let me = std::env::current_exe().expect("current exe");
    let junction = cli.junction.clone().unwrap_or_else(|| {
        me.parent()
            .and_then(Path::parent)
            .map(|d| d.join("junction"))
            .unwrap_or_else(|| PathBuf::from("junction"))
    });
    if !junction.exists() {
        eprintln!(
            "bench: no junction binary at {} (build it: cargo build --release --bin junction, or pass --junction)",
            junction.display()
        );
        return 2;
    }
    let dir = std::env::temp_dir().join(format!("junction-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let selected: Vec<String> = match &cli.only {
        Some(list) => list.split(',').map(|s| s.trim().to_owned()).collect(),
        None => ALL.iter().map(|s| s.to_string()).collect(),
    };
    for s in &selected {
        if !ALL.contains(&s.as_str()) {
            eprintln!("bench: unknown scenario {s:?} (known: {})", ALL.join(", "));
            return 2;
        }
    }
    let mut ctx = Ctx {
        junction,
        gateway_threads: cli.gateway_threads.map(|n| n.clamp(1, 64).to_string()),
        me,
        dir: dir.clone(),
        duration: Duration::from_secs_f64(cli.duration.clamp(0.2, 120.0)),
        warmup: Duration::from_secs_f64(cli.warmup.clamp(0.0, 30.0)),
        reps: cli.reps.clamp(1, 20),
        sessions: cli.sessions.clamp(1_000, 50_000),
        table: String::new(),
        results: Results::default(),
    };
    print_machine();
    println!(
        "{} x {:?} per side (alternating), warm-up {:?}, load generator threads {}, gateway worker threads {}, client ACKs {} (nagle: delayed)\n",
        ctx.reps,
        ctx.duration,
        ctx.warmup,
        cli.threads,
        ctx.gateway_threads.as_deref().unwrap_or("default"),
        cli.ack
    );
    header(&mut ctx);
    let started = Instant::now();
    let mut failed = false;
    for scenario in &selected {
        let result = match scenario.as_str() {
            "nagle" => nagle(&mut ctx, cli.ack == "quick").await,
            "call-http" => call_http(&mut ctx).await,
            "call-stdio" => call_stdio(&mut ctx).await,
            "list" => list(&mut ctx).await,
            "setup" => setup(&mut ctx).await,
            "memory" => memory(&mut ctx).await,
            "client-cost" => client_cost(&mut ctx).await,
            "fixture-cost" => fixture_cost(&mut ctx).await,
            _ => unreachable!(),
        };
        if let Err(e) = result {
            failed = true;
            line(&mut ctx, &format!("!! {scenario} failed: {e}"));
        }
    }
    println!("\n==== summary (run took {:.0?}) ====\n", started.elapsed());
    print!("{}", ctx.table);
    println!();
    targets(&ctx);
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        1
    } else {
        0
    }
}

fn print_machine() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "machine: {} CPUs ({}), kernel {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        model,
        kernel.trim()
    );
}

fn line(ctx: &mut Ctx, text: &str) {
    println!("{text}");
    ctx.table.push_str(text);
    ctx.table.push('\n');
}

fn header(ctx: &mut Ctx) {
    let h = format!(
        "{:<23} {:<8} {:>3} {:>7} {:>7} {:>13} {:>7} {:>7} {:>7} {:>7} {:>3}  {:>7} {:>7} {:>7} {:>5}",
        "scenario",
        "side",
        "c",
        "ops",
        "ops/s",
        "(min-max)",
        "p50",
        "p90",
        "p99",
        "max",
        "err",
        "gw/op",
        "up/op",
        "lg/op",
        "other"
    );
    line(ctx, &h);
}

fn fmt_d(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

fn fmt_us(us: f64) -> String {
    format!("{us:.1}µs")
}

fn fmt_rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

/// CPU seconds of a set of processes (and of this one).
struct Snap {
    at: Instant,
    gw: Option<Duration>,
    up: Duration,
    me: Duration,
    machine: Duration,
}

fn snap(gw: Option<u32>, up: &[u32]) -> Snap {
    Snap {
        at: Instant::now(),
        gw: gw.map(procs::cpu_time),
        up: up.iter().map(|&p| procs::cpu_time(p)).sum(),
        me: procs::self_cpu(),
        machine: procs::machine_busy(),
    }
}

/// One side's repeated measurements, pooled.
#[derive(Default)]
struct Series {
    /// ops/s of each repetition.
    rates: Vec<f64>,
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    /// All latencies (ns), sorted once complete.
    latencies: Vec<u64>,
    gw_cpu: Option<Duration>,
    up_cpu: Duration,
    me_cpu: Duration,
    /// The largest CPU load (in cores) of processes other than the
    /// measured ones during any repetition.
    others: f64,
}

impl Series {
    fn add(&mut self, stats: Stats, before: &Snap, after: &Snap) {
        self.rates.push(stats.throughput());
        self.ops += stats.ops;
        self.errors += stats.errors;
        if self.first_error.is_none() {
            self.first_error = stats.first_error;
        }
        self.latencies.extend(stats.latencies);
        if let (Some(b), Some(a)) = (before.gw, after.gw) {
            self.gw_cpu = Some(self.gw_cpu.unwrap_or_default() + a.saturating_sub(b));
        }
        let up = after.up.saturating_sub(before.up);
        let me = after.me.saturating_sub(before.me);
        self.up_cpu += up;
        self.me_cpu += me;
        let ours = after
            .gw
            .unwrap_or_default()
            .saturating_sub(before.gw.unwrap_or_default())
            + up
            + me;
        let busy = after.machine.saturating_sub(before.machine);
        let others = busy.saturating_sub(ours).as_secs_f64()
            / after.at.duration_since(before.at).as_secs_f64().max(1e-9);
        self.others = self.others.max(others);
    }

    fn finish(&mut self) {
        self.latencies.sort_unstable();
    }

    /// Median ops/s over the repetitions.
    fn rate(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(|a, b| a.total_cmp(b));
        match r.len() {
            0 => 0.0,
            n if n % 2 == 1 => r[n / 2],
            n => (r[n / 2 - 1] + r[n / 2]) / 2.0,
        }
    }

    fn pct(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let n = self.latencies.len();
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        Duration::from_nanos(self.latencies[rank - 1])
    }

    fn per_op(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }

    fn gw_per_op(&self) -> Option<f64> {
        self.gw_cpu.map(|d| self.per_op(d))
    }

    fn up_per_op(&self) -> f64 {
        self.per_op(self.up_cpu)
    }
}

/// One side of a comparison: sessions (workers), the operation, and which
/// processes' CPU to count as gateway and as upstream. `upstream` is asked
/// after the warm-up (per-session children exist by then).
struct SideSpec<'a> {
    label: &'a str,
    workers: Vec<Worker>,
    op: Op,
    gw: Option<u32>,
    upstream: Box<dyn Fn() -> Vec<u32> + 'a>,
}

/// Warms both sides up, then measures them alternately `ctx.reps` times
/// each, prints both (and their ratio if `ratio`), and closes the sessions.
async fn compare(
    ctx: &mut Ctx,
    name: &str,
    c: usize,
    mut a: SideSpec<'_>,
    mut b: SideSpec<'_>,
    ratio: bool,
) -> Result<(Series, Series), String> {
    let mut series = [Series::default(), Series::default()];
    let mut warm_failure = None;
    for side in [&mut a, &mut b] {
        let (workers, warm) =
            load::run(std::mem::take(&mut side.workers), &side.op, ctx.warmup).await;
        side.workers = workers;
        if warm.ops == 0 && warm.errors > 0 && warm_failure.is_none() {
            let error = warm.first_error.unwrap_or_default();
            warm_failure = Some(format!("{name} {}: warm-up failed: {error}", side.label));
        }
    }
    if let Some(failure) = warm_failure {
        load::close_sessions(std::mem::take(&mut a.workers)).await;
        load::close_sessions(std::mem::take(&mut b.workers)).await;
        return Err(failure);
    }
    for _ in 0..ctx.reps {
        for (i, side) in [&mut a, &mut b].into_iter().enumerate() {
            let up = (side.upstream)();
            let before = snap(side.gw, &up);
            let (workers, stats) =
                load::run(std::mem::take(&mut side.workers), &side.op, ctx.duration).await;
            let after = snap(side.gw, &up);
            side.workers = workers;
            series[i].add(stats, &before, &after);
        }
    }
    load::close_sessions(std::mem::take(&mut a.workers)).await;
    load::close_sessions(std::mem::take(&mut b.workers)).await;
    let [mut sa, mut sb] = series;
    sa.finish();
    sb.finish();
    row(ctx, name, a.label, c, &sa);
    row(ctx, name, b.label, c, &sb);
    if ratio {
        ratio_row(ctx, name, &sa, &sb);
    }
    for (label, s) in [(a.label, &sa), (b.label, &sb)] {
        if s.ops == 0 {
            return Err(format!(
                "{name} {label}: no successful operation ({})",
                s.first_error.clone().unwrap_or_default()
            ));
        }
    }
    Ok((sa, sb))
}

fn row(ctx: &mut Ctx, scenario: &str, side: &str, c: usize, s: &Series) {
    let (min, max) = s
        .rates
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let text = format!(
        "{:<23} {:<8} {:>3} {:>7} {:>7} {:>13} {:>7} {:>7} {:>7} {:>7} {:>3}  {:>7} {:>7} {:>7} {:>5.2}",
        scenario,
        side,
        c,
        s.ops,
        fmt_rate(s.rate()),
        format!("({}-{})", fmt_rate(min), fmt_rate(max)),
        fmt_d(s.pct(0.5)),
        fmt_d(s.pct(0.9)),
        fmt_d(s.pct(0.99)),
        fmt_d(s.pct(1.0)),
        s.errors,
        s.gw_per_op().map_or("-".to_owned(), fmt_us),
        fmt_us(s.up_per_op()),
        fmt_us(s.per_op(s.me_cpu)),
        s.others,
    );
    line(ctx, &text);
    if let Some(e) = &s.first_error {
        line(ctx, &format!("    first error: {e}"));
    }
}

fn ratio_row(ctx: &mut Ctx, scenario: &str, direct: &Series, through: &Series) {
    let added = |p: f64| {
        let t = through.pct(p).as_secs_f64() * 1e6;
        let d = direct.pct(p).as_secs_f64() * 1e6;
        format!("{:+.0}µs", t - d)
    };
    let text = format!(
        "{:<23} {:<8} {:>3} {:>7} {:>6.2}x {:>13} {:>7} {:>7} {:>7}",
        scenario,
        "ratio",
        "",
        "",
        through.rate() / direct.rate().max(1e-9),
        "",
        added(0.5),
        added(0.9),
        added(0.99),
    );
    line(ctx, &text);
}

fn write_config(ctx: &Ctx, name: &str, mounts: &str) -> PathBuf {
    write_config_with(ctx, name, "", mounts)
}

/// [`write_config`] with more `[server]` settings.
fn write_config_with(ctx: &Ctx, name: &str, server: &str, mounts: &str) -> PathBuf {
    let path = ctx.dir.join(format!("{name}.toml"));
    // The memory scenario holds 10,000 idle sessions (plus a few for its
    // sample calls): above the default session limit.
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_idle_timeout = \"30m\"\n{server}\n\
         [limits]\nmax_sessions = 100000\n\n{mounts}"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn start_fixture(ctx: &Ctx, tools: usize) -> Result<Proc, String> {
    let tools = tools.to_string();
    Proc::start(
        "fixture",
        &ctx.me,
        &["fixture", "--http", "127.0.0.1:0", "--tools", &tools],
        "bench fixture listening on ",
    )
}

async fn start_junction(ctx: &Ctx, config: &Path) -> Result<Proc, String> {
    let config = config.to_str().ok_or("non-UTF-8 temp path")?;
    let env: Vec<(&str, &str)> = ctx
        .gateway_threads
        .iter()
        .map(|threads| ("TOKIO_WORKER_THREADS", threads.as_str()))
        .collect();
    let proc = Proc::start_with_env(
        "junction",
        &ctx.junction,
        &["--config", config, "--listen", "127.0.0.1:0"],
        "junction listening on ",
        &env,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if client::get_status(proc.addr, "/readyz").await == Ok(200) {
            return Ok(proc);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "junction not ready within 30s; stderr:\n{}",
                proc.stderr_tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn shared_mount(addr: SocketAddr) -> String {
    format!("[mounts.bench]\nurl = \"http://{addr}/mcp\"\n")
}

/// Direct-to-fixture vs through-gateway sides calling `echo` over HTTP.
async fn http_sides<'a>(
    fixture: &'a Proc,
    gateway: &'a Proc,
    c: usize,
) -> Result<(SideSpec<'a>, SideSpec<'a>), String> {
    let up = fixture.pid();
    Ok((
        SideSpec {
            label: "direct",
            workers: load::open_sessions(fixture.addr, "/mcp", c).await?,
            op: Op::Call("echo".into()),
            gw: None,
            upstream: Box::new(move || vec![up]),
        },
        SideSpec {
            label: "junction",
            workers: load::open_sessions(gateway.addr, "/mcp", c).await?,
            op: Op::Call("bench__echo".into()),
            gw: Some(gateway.pid()),
            upstream: Box::new(move || vec![up]),
        },
    ))
}

// ---- scenarios ----------------------------------------------------------

/// tools/call at c1 with ordinary (delayed) client ACKs: shows whether a
/// server answers without waiting on Nagle's algorithm.
async fn nagle(ctx: &mut Ctx, restore_quick: bool) -> Result<(), String> {
    client::set_quickack_mode(false);
    let result = async {
        let fixture = start_fixture(ctx, 50)?;
        let config = write_config(ctx, "nagle", &shared_mount(fixture.addr));
        let gateway = start_junction(ctx, &config).await?;
        let (a, b) = http_sides(&fixture, &gateway, 1).await?;
        compare(ctx, "call c1 delayed-ACK", 1, a, b, true).await?;
        Ok(())
    }
    .await;
    client::set_quickack_mode(restore_quick);
    result
}

/// tools/call on a shared Streamable HTTP mount at c = 1, 16, 64.
async fn call_http(ctx: &mut Ctx) -> Result<(), String> {
    let fixture = start_fixture(ctx, 50)?;
    let config = write_config(ctx, "call-http", &shared_mount(fixture.addr));
    let gateway = start_junction(ctx, &config).await?;
    for c in [1usize, 16, 64] {
        let (a, b) = http_sides(&fixture, &gateway, c).await?;
        let (d, t) = compare(ctx, "call http shared", c, a, b, true).await?;
        ctx.results.call_http.push((c, d, t));
    }
    Ok(())
}

/// tools/call on a per-session stdio mount (one child per client session),
/// against the same stdio server driven directly (one child per worker).
async fn call_stdio(ctx: &mut Ctx) -> Result<(), String> {
    let me = ctx.me.to_str().ok_or("non-UTF-8 exe path")?.to_owned();
    let config = write_config(
        ctx,
        "call-stdio",
        &format!(
            "[mounts.bench]\ncommand = {me:?}\nargs = [\"fixture\", \"--stdio\", \"--tools\", \"50\"]\nisolation = \"per_session\"\n"
        ),
    );
    let gateway = start_junction(ctx, &config).await?;
    let gw_pid = gateway.pid();
    for c in [1usize, 16] {
        let mut workers = Vec::new();
        for _ in 0..c {
            let s = StdioSession::spawn(&ctx.me, &["fixture", "--stdio", "--tools", "50"]).await?;
            workers.push(Worker::Stdio(s));
        }
        let pids: Vec<u32> = workers
            .iter()
            .filter_map(|w| match w {
                Worker::Stdio(s) => s.child.id(),
                _ => None,
            })
            .collect();
        let direct = SideSpec {
            label: "direct",
            workers,
            op: Op::Call("echo".into()),
            gw: None,
            upstream: Box::new(move || pids.clone()),
        };
        let through = SideSpec {
            label: "junction",
            workers: load::open_sessions(gateway.addr, "/mcp", c).await?,
            op: Op::Call("bench__echo".into()),
            gw: Some(gw_pid),
            // The per-session children (and the idle discovery child).
            upstream: Box::new(move || procs::children_of(gw_pid)),
        };
        compare(ctx, "call stdio per-session", c, direct, through, true).await?;
    }
    Ok(())
}

/// tools/list of 20 mounts × 50 tools from the discovery cache, against
/// listing one 50-tool upstream directly.
async fn list(ctx: &mut Ctx) -> Result<(), String> {
    let fixture = start_fixture(ctx, 50)?;
    let mut mounts = String::new();
    for i in 1..=20 {
        let _ = writeln!(
            mounts,
            "[mounts.m{i:02}]\nurl = \"http://{}/mcp\"\n",
            fixture.addr
        );
    }
    let config = write_config(ctx, "list", &mounts);
    let gateway = start_junction(ctx, &config).await?;
    let up = fixture.pid();
    {
        let Worker::Http(mut s) = load::open_sessions(gateway.addr, "/mcp", 1)
            .await?
            .pop()
            .unwrap()
        else {
            unreachable!()
        };
        let (tools, pages) = s.list_all_tools().await?;
        line(
            ctx,
            &format!(
                "    (junction lists {tools} tools in {pages} pages; direct: 50 tools in 1 page)"
            ),
        );
        let _ = s.close().await;
    }
    for c in [1usize, 16] {
        let direct = SideSpec {
            label: "direct",
            workers: load::open_sessions(fixture.addr, "/mcp", c).await?,
            op: Op::List(50),
            gw: None,
            upstream: Box::new(move || vec![up]),
        };
        let through = SideSpec {
            label: "junction",
            workers: load::open_sessions(gateway.addr, "/mcp", c).await?,
            op: Op::List(1000),
            gw: Some(gateway.pid()),
            upstream: Box::new(move || vec![up]),
        };
        let (d, t) = compare(ctx, "tools/list 20x50 cache", c, direct, through, true).await?;
        ctx.results.list.push((c, d, t));
    }
    Ok(())
}

/// Session set-up: initialize → initialized → first tools/call (timed),
/// then DELETE (not timed), on a shared HTTP mount.
async fn setup(ctx: &mut Ctx) -> Result<(), String> {
    let fixture = start_fixture(ctx, 50)?;
    let config = write_config(ctx, "setup", &shared_mount(fixture.addr));
    let gateway = start_junction(ctx, &config).await?;
    let up = fixture.pid();
    for c in [1usize, 16] {
        let fresh = |addr: SocketAddr| -> Vec<Worker> {
            (0..c)
                .map(|_| Worker::Fresh(addr, "/mcp".into(), None))
                .collect()
        };
        let direct = SideSpec {
            label: "direct",
            workers: fresh(fixture.addr),
            op: Op::Setup("echo".into()),
            gw: None,
            upstream: Box::new(move || vec![up]),
        };
        let through = SideSpec {
            label: "junction",
            workers: fresh(gateway.addr),
            op: Op::Setup("bench__echo".into()),
            gw: Some(gateway.pid()),
            upstream: Box::new(move || vec![up]),
        };
        compare(ctx, "session setup shared", c, direct, through, true).await?;
    }
    Ok(())
}

/// Opens idle sessions until `ids` holds `total`, 16 at a time over pooled
/// keep-alive connections. Returns (errors, first error).
async fn hold_sessions(
    addr: SocketAddr,
    ids: &mut Vec<String>,
    total: usize,
) -> (u64, Option<String>) {
    const PARALLEL: usize = 16;
    let need = total.saturating_sub(ids.len());
    let tasks: Vec<_> = (0..PARALLEL)
        .map(|i| {
            let n = need / PARALLEL + usize::from(i < need % PARALLEL);
            tokio::spawn(async move {
                let mut conn = Conn::new(addr);
                let mut got = Vec::with_capacity(n);
                let mut errors = 0u64;
                let mut first = None;
                // Bounded: n sessions plus at most n failed attempts.
                for _ in 0..2 * n {
                    if got.len() == n {
                        break;
                    }
                    match Session::open(conn, "/mcp").await {
                        Ok(session) => {
                            let (c, id) = session.into_parts();
                            conn = c;
                            got.push(id);
                        }
                        Err(e) => {
                            errors += 1;
                            first.get_or_insert(e);
                            conn = Conn::new(addr);
                        }
                    }
                }
                (got, errors, first)
            })
        })
        .collect();
    let mut errors = 0;
    let mut first = None;
    for t in tasks {
        let (got, e, f) = t.await.expect("session opener panicked");
        ids.extend(got);
        errors += e;
        if first.is_none() {
            first = f;
        }
    }
    (errors, first)
}

/// Calls `tool` on a sample of the held sessions; returns failures.
async fn verify_sessions(addr: SocketAddr, ids: &[String], tool: &str) -> (u64, Option<String>) {
    let mut conn = Conn::new(addr);
    let mut failures = 0;
    let mut first = None;
    let step = (ids.len() / 100).max(1);
    for id in ids.iter().step_by(step).chain(ids.last()) {
        let mut session = Session::attach(conn, "/mcp", id.clone());
        if let Err(e) = session.call(tool).await {
            failures += 1;
            first.get_or_insert(e);
        }
        conn = session.into_parts().0;
    }
    (failures, first)
}

/// The process's RSS once it stops moving (readings 100 ms apart, at most
/// 3 s), on a blocking thread.
async fn settle_rss(pid: u32) -> u64 {
    tokio::task::spawn_blocking(move || {
        rss::settled_rss(pid, Duration::from_millis(100), Duration::from_secs(3))
    })
    .await
    .unwrap_or(0)
}

/// The memory scenario's `session_hibernate_after`.
const HIBERNATE_AFTER: Duration = Duration::from_secs(2);

/// Waits (bounded) until `count` sessions are asleep in the gateway at
/// `addr` (`/metrics`); how many are.
async fn wait_asleep(addr: SocketAddr, count: usize) -> usize {
    let deadline = Instant::now() + HIBERNATE_AFTER + Duration::from_secs(30);
    let mut asleep = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Ok(metrics) = client::get_text(addr, "/metrics").await else {
            continue;
        };
        asleep = metrics
            .lines()
            .find_map(|line| line.strip_prefix("junction_downstream_sessions_asleep "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if asleep >= count {
            break;
        }
    }
    asleep
}

/// The gateway's figures of the memory scenario.
#[derive(Debug, Clone, Copy)]
struct MemoryResult {
    /// Bytes per session at N, awake.
    awake_n: f64,
    /// Bytes per session once the N sessions fell asleep, and how many did.
    asleep_n: f64,
    asleep: usize,
    errors: u64,
    failures: u64,
    held: usize,
}

/// RSS with 0, 1,000 and N idle downstream sessions, gateway and (for
/// comparison) the fixture itself.
async fn memory(ctx: &mut Ctx) -> Result<(), String> {
    let fixture = start_fixture(ctx, 50)?;
    // Idle sessions fall asleep after this (the default is 60 s).
    let config = write_config_with(
        ctx,
        "memory",
        &format!(
            "session_hibernate_after = \"{}ms\"",
            HIBERNATE_AFTER.as_millis()
        ),
        &format!("[mounts.bench]\nurl = \"http://{}/mcp\"\n", fixture.addr),
    );
    let gateway = start_junction(ctx, &config).await?;
    let n = ctx.sessions;
    let mut gw_result = None;
    for (who, proc, tool) in [
        ("junction", &gateway, "bench__echo"),
        ("direct", &fixture, "echo"),
    ] {
        // One session through its first call, so lazy start-up work is
        // done before the baseline.
        let Worker::Http(mut s) = load::open_sessions(proc.addr, "/mcp", 1)
            .await?
            .pop()
            .unwrap()
        else {
            unreachable!()
        };
        s.call(tool).await?;
        let rss0 = settle_rss(proc.pid()).await;
        let mut ids = Vec::new();
        let t0 = Instant::now();
        let (mut errors, mut first) = hold_sessions(proc.addr, &mut ids, 1_000).await;
        let rss1 = settle_rss(proc.pid()).await;
        let (e, f) = hold_sessions(proc.addr, &mut ids, n).await;
        let open_time = t0.elapsed();
        errors += e;
        first = first.or(f);
        let rss_n = settle_rss(proc.pid()).await;
        // The gateway's sessions then fall asleep (the fixture's stay).
        let asleep = if who == "junction" {
            let asleep = wait_asleep(proc.addr, ids.len()).await;
            Some((asleep, settle_rss(proc.pid()).await))
        } else {
            None
        };
        let (failures, vfirst) = verify_sessions(proc.addr, &ids, tool).await;
        let per = |rss: u64, k: usize| (rss.saturating_sub(rss0)) as f64 / k as f64;
        let text = format!(
            "{:<23} {:<8} rss {:.1} MiB @0, {:.1} MiB @1k ({:.0} B/session), {:.1} MiB @{} ({:.0} B/session); opened {} in {:.1?} ({:.0}/s), {} open errors, {} of {} sampled calls failed",
            "memory idle sessions",
            who,
            rss0 as f64 / 1048576.0,
            rss1 as f64 / 1048576.0,
            per(rss1, 1000),
            rss_n as f64 / 1048576.0,
            n,
            per(rss_n, n),
            ids.len(),
            open_time,
            ids.len() as f64 / open_time.as_secs_f64(),
            errors,
            failures,
            ids.len() / (ids.len() / 100).max(1) + 1,
        );
        line(ctx, &text);
        if let Some((count, rss_asleep)) = asleep {
            line(
                ctx,
                &format!(
                    "{:<23} {:<8} rss {:.1} MiB with {count} of them asleep after {:?} idle ({:.0} B/session); the sampled calls woke them",
                    "memory idle sessions",
                    who,
                    rss_asleep as f64 / 1048576.0,
                    HIBERNATE_AFTER,
                    per(rss_asleep, n),
                ),
            );
        }
        if let Some(e) = first.or(vfirst) {
            line(ctx, &format!("    first error: {e}"));
        }
        if who == "junction" {
            let (count, rss_asleep) = asleep.unwrap_or_default();
            gw_result = Some(MemoryResult {
                awake_n: per(rss_n, n),
                asleep_n: per(rss_asleep, n),
                asleep: count,
                errors,
                failures,
                held: ids.len(),
            });
        }
        let _ = s.close().await;
    }
    ctx.results.memory = gw_result;
    Ok(())
}

/// The load generator's own cost: this raw client against rmcp's client,
/// both direct to the fixture at c16.
async fn client_cost(ctx: &mut Ctx) -> Result<(), String> {
    let fixture = start_fixture(ctx, 50)?;
    let up = fixture.pid();
    let c = 16;
    let url = format!("http://{}/mcp", fixture.addr);
    let mut rmcp_workers = Vec::new();
    for _ in 0..c {
        use rmcp::ServiceExt;
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone());
        let client = tokio::time::timeout(Duration::from_secs(20), ().serve(transport))
            .await
            .map_err(|_| "rmcp client: initialize timed out".to_owned())?
            .map_err(|e| format!("rmcp client: {e}"))?;
        client
            .peer()
            .set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        rmcp_workers.push(Worker::Rmcp(Box::new(client)));
    }
    let raw = SideSpec {
        label: "raw",
        workers: load::open_sessions(fixture.addr, "/mcp", c).await?,
        op: Op::Call("echo".into()),
        gw: None,
        upstream: Box::new(move || vec![up]),
    };
    let rmcp_side = SideSpec {
        label: "rmcp",
        workers: rmcp_workers,
        op: Op::Call("echo".into()),
        gw: None,
        upstream: Box::new(move || vec![up]),
    };
    compare(ctx, "client cost (direct)", c, raw, rmcp_side, false).await?;
    Ok(())
}

/// The fixture's own cost: this lean fixture against `junction demo-server
/// --http`'s echo, both direct at c16.
async fn fixture_cost(ctx: &mut Ctx) -> Result<(), String> {
    let c = 16;
    let fixture = start_fixture(ctx, 50)?;
    let demo = Proc::start(
        "demo-server",
        &ctx.junction,
        &["demo-server", "--http", "127.0.0.1:0"],
        "junction demo-server listening on ",
    )?;
    let (f, d) = (fixture.pid(), demo.pid());
    let bench_side = SideSpec {
        label: "bench",
        workers: load::open_sessions(fixture.addr, "/mcp", c).await?,
        op: Op::Call("echo".into()),
        gw: None,
        upstream: Box::new(move || vec![f]),
    };
    let demo_side = SideSpec {
        label: "demo",
        workers: load::open_sessions(demo.addr, "/mcp", c).await?,
        op: Op::Call("echo".into()),
        gw: None,
        upstream: Box::new(move || vec![d]),
    };
    compare(
        ctx,
        "fixture cost (direct)",
        c,
        bench_side,
        demo_side,
        false,
    )
    .await?;
    Ok(())
}

// ---- targets ------------------------------------------------------------

fn targets(ctx: &Ctx) {
    println!("targets (throughput: median of repetitions; latency: pooled):");
    let verdict = |ok: bool| if ok { "MET   " } else { "MISSED" };
    let r = &ctx.results;
    for want in [16usize, 64] {
        match r.call_http.iter().find(|(c, ..)| *c == want) {
            Some((_, d, t)) => {
                let ratio = t.rate() / d.rate().max(1e-9);
                println!(
                    "  {} throughput through gateway >= 0.65x direct at c{want}: {ratio:.2}x ({:.0} vs {:.0} calls/s)",
                    verdict(ratio >= 0.65 && t.errors == 0),
                    t.rate(),
                    d.rate()
                );
            }
            None => println!("  n/a    throughput at c{want}: not measured"),
        }
    }
    match r.call_http.iter().find(|(c, ..)| *c == 1) {
        Some((_, d, t)) => {
            let added = (t.pct(0.5).as_secs_f64() - d.pct(0.5).as_secs_f64()) * 1e6;
            println!(
                "  {} p50 added latency <= 100µs at c1: {added:+.0}µs ({} vs {})",
                verdict(added <= 100.0),
                fmt_d(t.pct(0.5)),
                fmt_d(d.pct(0.5))
            );
        }
        None => println!("  n/a    p50 added latency at c1: not measured"),
    }
    for (c, _, t) in &r.call_http {
        let gw = t.gw_per_op().unwrap_or(f64::INFINITY);
        println!(
            "  {} gateway CPU per proxied call <= upstream CPU per call (c{c}): {gw:.1}µs vs {:.1}µs",
            verdict(gw <= t.up_per_op()),
            t.up_per_op()
        );
    }
    for (c, d, t) in &r.list {
        println!(
            "  {} tools/list 20x50 from cache no slower than one upstream (c{c}): p50 {} vs {}, {:.0} vs {:.0} lists/s",
            verdict(t.pct(0.5) <= d.pct(0.5) && t.rate() >= d.rate()),
            fmt_d(t.pct(0.5)),
            fmt_d(d.pct(0.5)),
            t.rate(),
            d.rate()
        );
    }
    match r.memory {
        Some(MemoryResult {
            awake_n,
            asleep_n,
            asleep,
            errors,
            failures,
            held,
        }) => {
            println!(
                "  {} <= 16 KiB RSS per idle downstream session: {:.1} KiB at {held} once asleep ({asleep} asleep after {:?} idle; {:.1} KiB each while awake)",
                verdict(asleep >= held && asleep_n <= 16.0 * 1024.0),
                asleep_n / 1024.0,
                HIBERNATE_AFTER,
                awake_n / 1024.0,
            );
            println!(
                "  {} {} idle sessions held without error: {held} held, {errors} open errors, {failures} sampled calls failed",
                verdict(held >= ctx.sessions && errors == 0 && failures == 0),
                ctx.sessions
            );
        }
        None => println!("  n/a    memory: not measured"),
    }
}
