//! What the soak found, and the one place that decides which of it is a
//! failure: lost responses, mismatched answers, leftover or leaked
//! processes, panics, a failed gateway exit, no successful call. Errors by
//! kind are reported, never a failure by themselves.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    process::ExitStatus,
    time::{Duration, Instant},
};

use crate::{
    chaos::{self, lock, Watcher},
    load,
    procs::{self, ProcId},
};

/// Pids shown per list.
const PIDS_SHOWN: usize = 40;

pub struct Findings {
    pub soaked: Duration,
    pub sessions: usize,
    pub seed: u64,
    pub tally: load::Tally,
    pub progress: u64,
    pub record: chaos::Record,
    /// The gateway's live descendants: once ready, once every session was
    /// open (before the soak), once every session was closed (after).
    pub idle: Vec<(ProcId, String)>,
    pub before: Vec<(ProcId, String)>,
    pub after: Vec<(ProcId, String)>,
    pub settled_in: Duration,
    pub zombies: usize,
    /// Per-session upstreams (or more mount-level ones than allowed) left
    /// once every session was closed.
    pub left: Vec<String>,
    /// Gateway RSS idle, before, after.
    pub rss: [u64; 3],
    pub status: String,
    pub exit: Result<(ExitStatus, Duration), String>,
    /// Descendants seen during the run.
    pub seen: usize,
    /// Of those, alive after the gateway exited.
    pub leaked: Vec<(ProcId, String)>,
    pub stuck: bool,
    pub worker_panics: usize,
    /// (count, first lines) of "panicked" lines.
    pub gateway_panics: (u64, Vec<String>),
    pub http_panics: (u64, Vec<String>),
}

impl Findings {
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let tally = &self.tally;
        if tally.lost.n > 0 {
            failures.push(format!("{} lost responses", tally.lost.n));
        }
        if tally.mismatched.n > 0 {
            failures.push(format!(
                "{} answers not matching their request",
                tally.mismatched.n
            ));
        }
        if self.stuck {
            failures.push("workers still running long after the deadline (lost responses)".into());
        }
        if self.worker_panics > 0 {
            failures.push(format!("{} soak workers panicked", self.worker_panics));
        }
        failures.extend(self.left.iter().cloned());
        if !self.leaked.is_empty() {
            failures.push(format!(
                "{} descendants alive after the gateway exited",
                self.leaked.len()
            ));
        }
        let panics = self.gateway_panics.0 + self.http_panics.0;
        if panics > 0 {
            failures.push(format!("{panics} \"panicked\" lines in the logs"));
        }
        match &self.exit {
            Ok((status, _)) if status.success() => {}
            Ok((status, _)) => failures.push(format!("gateway exited with {status}")),
            Err(e) => failures.push(e.clone()),
        }
        if tally.ok == 0 {
            failures.push("no call succeeded".into());
        }
        failures
    }

    pub fn render(&self, failures: &[String]) -> String {
        let mut out = String::new();
        let tally = &self.tally;
        let errors: u64 = tally.errors.values().map(|c| c.n).sum();
        let _ = writeln!(out, "\n==== junction soak report ====");
        let _ = writeln!(
            out,
            "duration:        {:.1?} of soak, closing included ({} sessions, seed {})",
            self.soaked, self.sessions, self.seed
        );
        let _ = writeln!(
            out,
            "calls:           {} made, {} ok, {} expected tool errors (`fail`), {errors} errors, {} lost, {} mismatched",
            tally.calls, tally.ok, tally.expected, tally.lost.n, tally.mismatched.n
        );
        for (mount, m) in &tally.per_mount {
            let _ = writeln!(
                out,
                "  {mount:<8}       {} calls, {} ok, {} errors",
                m.calls, m.ok, m.errors
            );
        }
        let _ = writeln!(
            out,
            "progress:        {} notifications received",
            self.progress
        );
        let _ = writeln!(
            out,
            "sessions:        {} opened, {} closed, {} abandoned (transport closed or a lost response)",
            tally.opened, tally.closed, tally.abandoned
        );
        self.render_kills(&mut out);
        self.render_errors(&mut out);
        let _ = writeln!(out, "children idle:   {}", describe(&self.idle));
        let _ = writeln!(out, "children before: {}", describe(&self.before));
        let _ = writeln!(
            out,
            "children after:  {} (settled in {:.1?}; {} zombies)",
            describe(&self.after),
            self.settled_in,
            self.zombies
        );
        let [idle, before, after] = self.rss;
        let _ = writeln!(
            out,
            "gateway RSS:     idle {}, before {}, after {} ({:+.1} MiB)",
            mib(idle),
            mib(before),
            mib(after),
            (after as f64 - before as f64) / 1048576.0
        );
        let _ = writeln!(out, "mount status:    {}", self.status);
        let _ = writeln!(
            out,
            "gateway exit:    {}",
            match &self.exit {
                Ok((status, took)) => format!("{status} {took:.1?} after SIGTERM"),
                Err(e) => e.clone(),
            }
        );
        let leaked: Vec<String> = self
            .leaked
            .iter()
            .map(|(id, tag)| format!("{} {tag}", id.pid))
            .collect();
        let _ = writeln!(
            out,
            "descendants:     {} seen during the run, {} alive after the gateway exited{}",
            self.seen,
            leaked.len(),
            if leaked.is_empty() {
                String::new()
            } else {
                format!(" ({}; killed now)", leaked.join(", "))
            }
        );
        let _ = writeln!(
            out,
            "panics:          {} in the gateway's log (its stdio upstreams' stderr included), {} in the HTTP upstream's",
            self.gateway_panics.0, self.http_panics.0
        );
        for line in self.gateway_panics.1.iter().chain(&self.http_panics.1) {
            let _ = writeln!(out, "  {line}");
        }
        if failures.is_empty() {
            let _ = writeln!(out, "result:          PASS");
        } else {
            let _ = writeln!(out, "result:          FAIL");
            for failure in failures {
                let _ = writeln!(out, "  - {failure}");
            }
        }
        out
    }

    fn render_kills(&self, out: &mut String) {
        let record = &self.record;
        let kills: u64 = record.kills.values().sum();
        let by_target: Vec<String> = record
            .kills
            .iter()
            .map(|(target, n)| format!("{target} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "kills:           {kills} ({}); {} picks found no live target",
            by_target.join(", "),
            record.missed
        );
        for failure in &record.restart_failures {
            let _ = writeln!(out, "  HTTP upstream restart failed: {failure}");
        }
    }

    fn render_errors(&self, out: &mut String) {
        let tally = &self.tally;
        let _ = writeln!(out, "errors by kind:");
        let mut kinds: Vec<_> = tally.errors.iter().collect();
        kinds.sort_by(|a, b| b.1.n.cmp(&a.1.n).then(a.0.cmp(b.0)));
        if kinds.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for (kind, count) in kinds {
            let _ = writeln!(out, "  {:>6}  {kind}", count.n);
            if !kind.ends_with(count.example.as_str()) {
                let _ = writeln!(out, "          e.g. {}", count.example);
            }
        }
        for (what, count) in [("lost", &tally.lost), ("mismatched", &tally.mismatched)] {
            for line in count.example.lines() {
                let _ = writeln!(out, "  {what}: {line}");
            }
        }
    }
}

pub fn by_tag(children: &[(ProcId, String)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, tag) in children {
        *counts.entry(tag.clone()).or_default() += 1;
    }
    counts
}

/// "27 (private 26, shared 1) pids [...]".
pub fn describe(children: &[(ProcId, String)]) -> String {
    let counts: Vec<String> = by_tag(children)
        .iter()
        .map(|(tag, n)| format!("{tag} {n}"))
        .collect();
    let mut pids: Vec<u32> = children.iter().map(|(id, _)| id.pid).collect();
    pids.sort_unstable();
    let shown: Vec<String> = pids.iter().take(PIDS_SHOWN).map(u32::to_string).collect();
    let more = if pids.len() > PIDS_SHOWN { " …" } else { "" };
    format!(
        "{} ({}) pids [{}{more}]",
        children.len(),
        counts.join(", "),
        shown.join(" ")
    )
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// One line while the soak runs.
pub fn progress_line(started: Instant, shared: &load::Shared, watcher: &Watcher, gw: u32) {
    let (calls, ok, errors, lost) = {
        let t = lock(&shared.tally);
        (
            t.calls,
            t.ok + t.expected,
            t.errors.values().map(|c| c.n).sum::<u64>(),
            t.lost.n,
        )
    };
    let kills: u64 = lock(&watcher.record).kills.values().sum();
    let live = procs::descendants(gw)
        .iter()
        .filter(|e| !e.zombie())
        .count();
    println!(
        "[{:>4.0}s] calls {calls}, ok {ok}, errors {errors}, lost {lost}, kills {kills}, children {live}, RSS {}",
        started.elapsed().as_secs_f64(),
        mib(procs::rss_bytes(gw))
    );
}

/// One line per mount from `/status.json` (whatever fields it has).
pub fn mount_status(body: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return "unreadable /status.json".to_owned();
    };
    let Some(mounts) = value["mounts"].as_array() else {
        return "no mounts in /status.json".to_owned();
    };
    let mut out = String::new();
    for mount in mounts {
        let _ = write!(
            out,
            "\n  {:<8} health {}, restarts {}, upstream sessions {}",
            mount["name"].as_str().unwrap_or("?"),
            mount["health"],
            mount["restarts"],
            mount["upstream_sessions"]
        );
        if let Some(error) = mount["last_error"].as_str() {
            let _ = write!(out, ", last error: {error}");
        }
    }
    out
}
