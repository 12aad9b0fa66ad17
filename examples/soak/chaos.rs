//! The watcher and killer: one thread that records every descendant of the
//! gateway it sees (so the end of the run can check that each one is gone)
//! and, inside the kill window, SIGKILLs one of them at random every 1–3 s.
//! Every Nth kill takes down the Streamable HTTP upstream instead (it is not
//! the gateway's child) and starts it again on the same address.
//!
//! Bounded: the thread polls every [`POLL`] and stops when told or after
//! [`MAX_POLLS`]; a restart of the HTTP upstream waits at most the start
//! timeout of [`Proc::start`].

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{
    procs::{self, Proc, ProcId},
    Rng,
};

const POLL: Duration = Duration::from_millis(100);
/// Hard bound on the thread's life: two hours of polls.
const MAX_POLLS: u64 = 2 * 3600 * 10;
/// Restart attempts of the HTTP upstream after a kill (its port may take a
/// moment to be free again).
const RESTART_ATTEMPTS: usize = 5;
/// A tag for processes without `SOAK_MOUNT` (e.g. a wrapper's child).
pub const UNTAGGED: &str = "untagged";
pub const HTTP_TARGET: &str = "remote (HTTP upstream, restarted)";

/// What the watcher saw and did.
#[derive(Default)]
pub struct Record {
    /// Every descendant of the gateway seen, with its `SOAK_MOUNT` tag.
    pub seen: HashMap<ProcId, String>,
    /// Kills by target (mount tag, or [`HTTP_TARGET`]).
    pub kills: BTreeMap<String, u64>,
    /// Picked targets that were gone before the signal.
    pub missed: u64,
    /// Failures to start the HTTP upstream again.
    pub restart_failures: Vec<String>,
}

pub struct Plan {
    pub gateway: u32,
    /// The HTTP upstream, and how to start it again.
    pub http: Arc<Mutex<Option<Proc>>>,
    pub http_addr: SocketAddr,
    pub junction: PathBuf,
    pub http_log: Arc<procs::Log>,
    /// Every how many kills the HTTP upstream is the target (0: never).
    pub http_every: u64,
    /// Pause between kills, seconds (uniform in the range).
    pub interval: (f64, f64),
    /// Pick a mount (tag) first, then one of its processes; otherwise any
    /// descendant, so per-session upstreams (the most numerous) die most.
    pub by_mount: bool,
    pub seed: u64,
}

/// The running watcher; stopped (and joined) on drop.
pub struct Watcher {
    pub record: Arc<Mutex<Record>>,
    /// The kill window's end, once the soak has started.
    window: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    pub fn start(plan: Plan) -> Watcher {
        let record = Arc::new(Mutex::new(Record::default()));
        let window = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (record, window, stop) = (record.clone(), window.clone(), stop.clone());
            std::thread::spawn(move || run(plan, &record, &window, &stop))
        };
        Watcher {
            record,
            window,
            stop,
            thread: Some(thread),
        }
    }

    /// Kills from now until `until`.
    pub fn kill_until(&self, until: Instant) {
        *lock(&self.window) = Some(until);
    }

    /// Records what exists now (between polls).
    pub fn scan_now(&self, gateway: u32) {
        scan(gateway, &self.record);
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records the gateway's descendants; returns the live ones with tags.
fn scan(gateway: u32, record: &Mutex<Record>) -> Vec<(ProcId, String)> {
    let mut live = Vec::new();
    for entry in procs::descendants(gateway) {
        let mut record = lock(record);
        let tag = record
            .seen
            .entry(entry.id)
            .or_insert_with(|| UNTAGGED.to_owned());
        // A child seen between fork and exec still has the gateway's
        // environment: look again until it has its own.
        if tag == UNTAGGED {
            if let Some(found) = procs::env_var(entry.id.pid, "SOAK_MOUNT") {
                *tag = found;
            }
        }
        if !entry.zombie() {
            live.push((entry.id, tag.clone()));
        }
    }
    live
}

fn run(plan: Plan, record: &Mutex<Record>, window: &Mutex<Option<Instant>>, stop: &AtomicBool) {
    let mut rng = Rng::new(plan.seed);
    let mut next_kill: Option<Instant> = None;
    let mut kills = 0u64;
    for _ in 0..MAX_POLLS {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let live = scan(plan.gateway, record);
        let now = Instant::now();
        let open = lock(window).is_some_and(|until| now < until);
        if !open {
            next_kill = None;
        } else {
            let due = *next_kill.get_or_insert_with(|| now + pause(&mut rng, &plan));
            if now >= due {
                kills += 1;
                if plan.http_every > 0 && kills.is_multiple_of(plan.http_every) {
                    restart_http(&plan, record, &mut rng);
                } else {
                    kill_one(&live, plan.by_mount, record, &mut rng);
                }
                next_kill = Some(Instant::now() + pause(&mut rng, &plan));
            }
        }
        std::thread::sleep(POLL);
    }
}

fn pause(rng: &mut Rng, plan: &Plan) -> Duration {
    rng.secs(plan.interval.0, plan.interval.1)
}

fn kill_one(live: &[(ProcId, String)], by_mount: bool, record: &Mutex<Record>, rng: &mut Rng) {
    let candidates: Vec<&(ProcId, String)> = if by_mount {
        let mut tags: Vec<&String> = live.iter().map(|(_, tag)| tag).collect();
        tags.sort();
        tags.dedup();
        match tags.get(rng.below(tags.len() as u64) as usize) {
            Some(tag) => live.iter().filter(|(_, t)| t == *tag).collect(),
            None => Vec::new(),
        }
    } else {
        live.iter().collect()
    };
    let Some((id, tag)) = candidates
        .get(rng.below(candidates.len() as u64) as usize)
        .copied()
    else {
        lock(record).missed += 1;
        return;
    };
    let mut record = lock(record);
    if procs::sigkill(*id) {
        *record.kills.entry(tag.clone()).or_default() += 1;
    } else {
        record.missed += 1;
    }
}

/// SIGKILL the HTTP upstream (if a start after the last kill failed, there
/// is none), then start it again on its address.
fn restart_http(plan: &Plan, record: &Mutex<Record>, rng: &mut Rng) {
    let mut http = lock(&plan.http);
    if let Some(mut old) = http.take() {
        old.kill_now();
        *lock(record)
            .kills
            .entry(HTTP_TARGET.to_owned())
            .or_default() += 1;
    }
    // Down for a moment, so calls in flight and new ones see it gone.
    std::thread::sleep(rng.secs(0.2, 1.0));
    let addr = plan.http_addr.to_string();
    let mut last_error = String::new();
    for _ in 0..RESTART_ATTEMPTS {
        match Proc::start(
            "demo-server --http",
            &plan.junction,
            &["demo-server", "--http", &addr],
            &[],
            "junction demo-server listening on ",
            plan.http_log.clone(),
        ) {
            Ok(proc) => {
                *http = Some(proc);
                return;
            }
            Err(error) => last_error = error,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    lock(record).restart_failures.push(last_error);
}
