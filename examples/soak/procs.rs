//! Processes: the ones the soak starts (the gateway, the Streamable HTTP
//! demo upstream) and what `/proc` says about the gateway's descendants.
//!
//! Every process started here is a [`Proc`]: it is stopped by its own pid
//! (SIGTERM, a bounded wait, then SIGKILL) when dropped, so an early error or
//! a panic never leaves one behind. Its stderr is read on a thread into a
//! [`Log`], which keeps a file copy, a tail for error reports, and every line
//! that says "panicked".
//!
//! A process is named by [`ProcId`] (pid and start time), never by pid
//! alone, so a pid the kernel reused for something else is never mistaken
//! for (or killed as) one the soak saw.

use std::{
    collections::{HashMap, VecDeque},
    io::{BufRead, BufReader, Read, Write},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};

/// Bound on waiting for a started process's "listening on" line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a process gets after SIGTERM before SIGKILL when a guard drops.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// How long to wait for a pipe's last lines once its process has exited
/// (longer only if a leaked grandchild still holds the pipe open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Lines kept for error reports.
const TAIL_LINES: usize = 60;
/// "panicked" lines kept (all are counted).
const PANIC_LINES: usize = 20;
const POLL: Duration = Duration::from_millis(20);

/// What one or more processes wrote to stderr.
pub struct Log {
    inner: Mutex<LogInner>,
}

struct LogInner {
    file: Option<std::fs::File>,
    tail: VecDeque<String>,
    panics: Vec<String>,
    panic_count: u64,
}

impl Log {
    /// A log copied to `path` (appended: restarts of one process share it).
    pub fn new(path: &Path) -> Arc<Log> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok();
        Arc::new(Log {
            inner: Mutex::new(LogInner {
                file,
                tail: VecDeque::new(),
                panics: Vec::new(),
                panic_count: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, line: &str) {
        let mut inner = self.lock();
        if let Some(file) = &mut inner.file {
            let _ = writeln!(file, "{line}");
        }
        if line.contains("panicked") {
            inner.panic_count += 1;
            if inner.panics.len() < PANIC_LINES {
                inner.panics.push(line.to_owned());
            }
        }
        if inner.tail.len() >= TAIL_LINES {
            inner.tail.pop_front();
        }
        inner.tail.push_back(line.to_owned());
    }

    /// (how many lines said "panicked", the first of them).
    pub fn panics(&self) -> (u64, Vec<String>) {
        let inner = self.lock();
        (inner.panic_count, inner.panics.clone())
    }

    pub fn tail(&self) -> String {
        let inner = self.lock();
        inner.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// A started process, stopped by pid when dropped.
pub struct Proc {
    name: String,
    child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Log>,
    /// Set once the stderr pipe reached its end.
    drained: Arc<AtomicBool>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `program args` (with `envs`, without any `JUNCTION_*` variable
    /// of ours), and waits for a stderr line containing `marker` followed by
    /// the address it listens on.
    pub fn start(
        name: &str,
        program: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        marker: &str,
        log: Arc<Log>,
    ) -> Result<Proc, String> {
        let mut command = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("JUNCTION_") {
                command.env_remove(&key);
            }
        }
        command
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
        let Some(stderr) = child.stderr.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{name}: no stderr pipe"));
        };
        let (tx, rx) = mpsc::channel();
        let drained = Arc::new(AtomicBool::new(false));
        pump(stderr, log.clone(), marker.to_owned(), tx, drained.clone());
        let mut proc = Proc {
            name: name.to_owned(),
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            log,
            drained,
            status: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(addr) => {
                    proc.addr = addr
                        .parse()
                        .map_err(|_| format!("{name}: bad address {addr:?} after {marker:?}"))?;
                    return Ok(proc);
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if let Some(status) = proc.exited() {
                        proc.wait_drained();
                        return Err(format!(
                            "{name} exited ({status}) before printing {marker:?}; stderr:\n{}",
                            proc.log.tail()
                        ));
                    }
                }
                Err(_) => {
                    return Err(format!(
                        "{name}: no {marker:?} line within {START_TIMEOUT:?}; stderr:\n{}",
                        proc.log.tail()
                    ))
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended (and is reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits (bounded) until every line the process wrote has been read.
    pub fn wait_drained(&self) {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while !self.drained.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM, then waits up to `grace` for the exit. Returns the status
    /// and how long it took; if the process is still running after `grace`
    /// it gets SIGKILL and this is an error.
    pub fn terminate(&mut self, grace: Duration) -> Result<(ExitStatus, Duration), String> {
        let started = Instant::now();
        if let Some(status) = self.exited() {
            return Ok((status, Duration::ZERO));
        }
        signal(self.pid(), Signal::SIGTERM);
        let deadline = started + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Ok((status, started.elapsed()));
            }
            std::thread::sleep(POLL);
        }
        self.kill_now();
        Err(format!(
            "{} (pid {}) still running {grace:?} after SIGTERM; killed",
            self.name,
            self.pid()
        ))
    }

    /// SIGKILL and reap.
    pub fn kill_now(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.terminate(TERM_GRACE);
    }
}

/// Reads `stderr` line by line on a thread into `log`, sending the address
/// after the first `marker` to `tx`.
fn pump(
    stderr: impl Read + Send + 'static,
    log: Arc<Log>,
    marker: String,
    tx: mpsc::Sender<String>,
    drained: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut buffer = Vec::new();
        let mut sent = false;
        loop {
            buffer.clear();
            match reader.read_until(b'\n', &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buffer);
                    let line = line.trim_end_matches(['\r', '\n']);
                    if !sent {
                        if let Some((_, rest)) = line.split_once(marker.as_str()) {
                            let addr = rest.split_whitespace().next().unwrap_or("");
                            let _ = tx.send(addr.to_owned());
                            sent = true;
                        }
                    }
                    log.push(line);
                }
            }
        }
        drained.store(true, Ordering::SeqCst);
    });
}

fn signal(pid: u32, signal: Signal) -> bool {
    match i32::try_from(pid) {
        Ok(pid) if pid > 1 => kill(Pid::from_raw(pid), signal).is_ok(),
        _ => false,
    }
}

// ---- /proc ---------------------------------------------------------------

/// One process, across pid reuse: its pid and its start time (clock ticks
/// after boot, `/proc/PID/stat` field 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    pub pid: u32,
    pub start: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub id: ProcId,
    pub ppid: u32,
    pub pgrp: u32,
    /// `R`, `S`, `Z` (zombie: exited, not reaped yet), ...
    pub state: char,
}

impl Entry {
    pub fn zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// What `/proc/PID/stat` says, if the process exists.
pub fn stat(pid: u32) -> Option<Entry> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ..."; comm may hold spaces and ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(Entry {
        id: ProcId {
            pid,
            start: fields.get(19)?.parse().ok()?,
        },
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        state: fields.first()?.chars().next()?,
    })
}

/// Every process on the machine (that this user can see).
fn table() -> Vec<Entry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// The descendants of `root` (not `root` itself): every process whose
/// parent chain reaches it, plus every member of a descendant's process
/// group (a stdio upstream leads its own group; a wrapper's children stay
/// in it even once re-parented). Zombies included; see [`Entry::zombie`].
pub fn descendants(root: u32) -> Vec<Entry> {
    let all = table();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, entry) in all.iter().enumerate() {
        children.entry(entry.ppid).or_default().push(i);
    }
    let mut found = vec![false; all.len()];
    let mut stack = vec![root];
    // Bounded: every process is pushed at most once.
    while let Some(pid) = stack.pop() {
        for &i in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if !found[i] {
                found[i] = true;
                stack.push(all[i].id.pid);
            }
        }
    }
    let leaders: Vec<u32> = all
        .iter()
        .zip(&found)
        .filter(|(_, &f)| f)
        .map(|(e, _)| e.id.pid)
        .collect();
    for (i, entry) in all.iter().enumerate() {
        if !found[i] && entry.id.pid != root && leaders.contains(&entry.pgrp) {
            found[i] = true;
        }
    }
    all.into_iter()
        .zip(found)
        .filter(|(_, f)| *f)
        .map(|(e, _)| e)
        .collect()
}

/// The live (not zombie) process `id`, if it still exists.
pub fn live(id: ProcId) -> Option<Entry> {
    stat(id.pid).filter(|e| e.id == id && !e.zombie())
}

/// The value of `name` in the process's environment (the soak tags each
/// stdio mount's processes with `SOAK_MOUNT`).
pub fn env_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// SIGKILL to `id` if it is still that process (and alive).
pub fn sigkill(id: ProcId) -> bool {
    live(id).is_some() && signal(id.pid, Signal::SIGKILL)
}

pub use crate::rss::rss_bytes;

/// [`crate::rss::settled_rss`], readings 200 ms apart, at most 5 s.
pub fn settled_rss(pid: u32) -> u64 {
    crate::rss::settled_rss(pid, Duration::from_millis(200), Duration::from_secs(5))
}
