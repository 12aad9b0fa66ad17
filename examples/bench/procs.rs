//! Child processes (the gateway, fixtures) and what `/proc` says about them.
//!
//! Every process started here is a [`Proc`]: it is stopped by its own pid
//! (SIGTERM, then SIGKILL after a grace period) when dropped, and its stderr
//! is drained on a thread so it can never block on a full pipe.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const TERM_GRACE: Duration = Duration::from_secs(5);

pub struct Proc {
    pub name: String,
    pub child: Child,
    pub addr: SocketAddr,
    /// The last stderr lines (for error reports).
    tail: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts `program args`, waits for a stderr line containing `marker`
    /// followed by an address, and returns it with that address.
    pub fn start(name: &str, program: &Path, args: &[&str], marker: &str) -> Result<Proc, String> {
        Self::start_with_env(name, program, args, marker, &[])
    }

    /// [`Proc::start`] with `env` added to the child's environment.
    pub fn start_with_env(
        name: &str,
        program: &Path,
        args: &[&str],
        marker: &str,
        env: &[(&str, &str)],
    ) -> Result<Proc, String> {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
        let stderr = child.stderr.take().unwrap();
        let tail = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let thread_marker = marker.to_owned();
        let thread_tail = tail.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(rest) = line.split(thread_marker.as_str()).nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                        let _ = tx.send(addr);
                        sent = true;
                    }
                }
                let mut tail = thread_tail.lock().unwrap();
                if tail.len() >= 50 {
                    tail.remove(0);
                }
                tail.push(line);
            }
        });
        let mut proc = Proc {
            name: name.to_owned(),
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            tail,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => {
                proc.addr = addr
                    .parse()
                    .map_err(|_| format!("{name}: bad address {addr:?}"))?;
                Ok(proc)
            }
            Err(_) => Err(format!(
                "{name}: no `{marker}` line within {START_TIMEOUT:?}; stderr:\n{}",
                proc.stderr_tail()
            )),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr_tail(&self) -> String {
        format!(
            "[{} stderr]\n{}",
            self.name,
            self.tail.lock().unwrap().join("\n")
        )
    }

    /// SIGTERM, wait up to the grace period, then SIGKILL.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

static CLK_TCK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn clk_tck() -> u64 {
    *CLK_TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// utime + stime of `pid` (0 if it is gone).
pub fn cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    Duration::from_nanos(ticks * 1_000_000_000 / clk_tck())
}

pub fn self_cpu() -> Duration {
    cpu_time(std::process::id())
}

/// The parent pid of `pid`.
fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Pids whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| ppid(pid) == Some(parent))
        .collect()
}

/// CPU time the whole machine spent busy (all CPUs, from /proc/stat).
pub fn machine_busy() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Duration::ZERO;
    };
    let Some(cpu) = stat.lines().next() else {
        return Duration::ZERO;
    };
    // user nice system idle iowait irq softirq steal ...
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    if fields.len() < 5 {
        return Duration::ZERO;
    }
    let busy: u64 = fields.iter().sum::<u64>() - fields[3] - fields[4];
    Duration::from_nanos(busy * 1_000_000_000 / clk_tck())
}
