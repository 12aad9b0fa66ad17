//! The load loop: `c` workers, each with its own session, issue one
//! operation after another for a bounded time (and a bounded count), and
//! record each operation's latency.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::client::{Conn, Error, Session, StdioSession};

/// Hard bound on operations per worker per run, whatever the duration.
const MAX_OPS_PER_WORKER: usize = 2_000_000;

#[derive(Clone, Debug)]
pub enum Op {
    /// `tools/call` of this tool.
    Call(String),
    /// List every tool, following cursors; expects this many tools.
    List(usize),
    /// Open a new session, call this tool, DELETE the session. Only the
    /// initialize → first answer part is timed.
    Setup(String),
}

pub enum Worker {
    Http(Session),
    Stdio(StdioSession),
    Rmcp(Box<RmcpClient>),
    /// A connection used to open fresh sessions (the `Setup` op).
    Fresh(SocketAddr, String, Option<Conn>),
}

pub type RmcpClient = rmcp::service::RunningService<rmcp::RoleClient, ()>;

impl Worker {
    /// Runs one op; returns the latency to record.
    async fn op(&mut self, op: &Op) -> Result<Duration, Error> {
        let start = Instant::now();
        match (self, op) {
            (Worker::Http(s), Op::Call(tool)) => s.call(tool).await?,
            (Worker::Http(s), Op::List(expected)) => {
                let (tools, _) = s.list_all_tools().await?;
                if tools != *expected {
                    return Err(format!("listed {tools} tools, expected {expected}"));
                }
            }
            (Worker::Stdio(s), Op::Call(tool)) => s.call(tool).await?,
            (Worker::Rmcp(client), Op::Call(tool)) => {
                let mut args = rmcp::model::JsonObject::new();
                args.insert("message".into(), "hello".into());
                let result = client
                    .peer()
                    .call_tool(
                        rmcp::model::CallToolRequestParams::new(tool.clone()).with_arguments(args),
                    )
                    .await
                    .map_err(|e| format!("rmcp call_tool: {e}"))?;
                if result.is_error == Some(true) {
                    return Err("tools/call: isError".into());
                }
            }
            (Worker::Fresh(addr, path, conn), Op::Setup(tool)) => {
                let c = conn.take().unwrap_or_else(|| Conn::new(*addr));
                let mut session = Session::open(c, path).await?;
                let result = session.call(tool).await;
                let elapsed = start.elapsed();
                result?;
                // Untimed: end the session so they do not pile up.
                *conn = Some(session.close().await?);
                return Ok(elapsed);
            }
            _ => return Err("op not supported by this worker".into()),
        }
        Ok(start.elapsed())
    }
}

#[derive(Default)]
pub struct Stats {
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub wall: Duration,
    /// Sorted latencies, nanoseconds.
    pub latencies: Vec<u64>,
}

impl Stats {
    pub fn throughput(&self) -> f64 {
        if self.wall.is_zero() {
            0.0
        } else {
            self.ops as f64 / self.wall.as_secs_f64()
        }
    }

    /// The `p`-quantile (0..=1) latency.
    pub fn pct(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank =
            ((p * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        Duration::from_nanos(self.latencies[rank - 1])
    }
}

/// Runs `op` on every worker for `duration`; gives the workers back.
pub async fn run(workers: Vec<Worker>, op: &Op, duration: Duration) -> (Vec<Worker>, Stats) {
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(4096);
                let mut errors = 0u64;
                let mut first_error = None;
                for _ in 0..MAX_OPS_PER_WORKER {
                    if Instant::now() >= deadline {
                        break;
                    }
                    match worker.op(&op).await {
                        Ok(latency) => latencies.push(latency.as_nanos() as u64),
                        Err(error) => {
                            errors += 1;
                            first_error.get_or_insert(error);
                            // Do not spin on a fast-failing server.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
                (worker, latencies, errors, first_error)
            })
        })
        .collect();
    let mut stats = Stats::default();
    let mut back = Vec::new();
    for task in tasks {
        let (worker, latencies, errors, first_error) = task.await.expect("worker panicked");
        back.push(worker);
        stats.errors += errors;
        if stats.first_error.is_none() {
            stats.first_error = first_error;
        }
        stats.latencies.extend(latencies);
    }
    stats.wall = start.elapsed();
    stats.ops = stats.latencies.len() as u64;
    stats.latencies.sort_unstable();
    (back, stats)
}

/// Opens `n` HTTP sessions, `parallel` at a time.
pub async fn open_sessions(addr: SocketAddr, path: &str, n: usize) -> Result<Vec<Worker>, Error> {
    let mut out = Vec::with_capacity(n);
    let mut pending = Vec::new();
    for _ in 0..n {
        let path = path.to_owned();
        pending.push(tokio::spawn(async move {
            Session::open(Conn::new(addr), &path).await
        }));
    }
    for p in pending {
        out.push(Worker::Http(p.await.map_err(|e| e.to_string())??));
    }
    Ok(out)
}

/// DELETEs every HTTP session among `workers` (best effort).
pub async fn close_sessions(workers: Vec<Worker>) {
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|w| {
            tokio::spawn(async move {
                match w {
                    Worker::Http(s) => {
                        let _ = s.close().await;
                    }
                    Worker::Rmcp(client) => {
                        let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
                    }
                    Worker::Stdio(mut s) => {
                        let _ = s.child.start_kill();
                        let _ = tokio::time::timeout(Duration::from_secs(5), s.child.wait()).await;
                    }
                    Worker::Fresh(..) => {}
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}
