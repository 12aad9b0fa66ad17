//! Finds what a stdio upstream started outside its process group, by a tag
//! in the environment.
//!
//! A stdio upstream's process group dies with it (`process_group.rs`), but a
//! descendant that left the group (`setsid`, as Node's `detached: true` does
//! and Playwright does for every browser it launches; `setpgid`; a
//! daemonizing helper) would outlive it: a per-session browser server
//! killed or crashed left its browser running for good. Without privileges
//! there is no cgroup to hold the tree, and a subreaper would make the
//! gateway reap zombies it never started. Environment variables are
//! inherited through `fork`, `exec` and `setsid` alike, so each child gets
//! a tag of its own in [`TAG_VARIABLE`], and when its group is killed every
//! process still carrying the tag is killed too: whatever the upstream
//! started, a daemon it launched for its own use and left behind on purpose
//! included (an agent, a build daemon), as its process group's members are.
//! A process that starts with an environment cleared of the tag escapes;
//! so do processes whose environment the gateway cannot read (another
//! user's, one made not dumpable).

use std::{
    collections::HashSet,
    sync::atomic::{AtomicU64, Ordering},
};

use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};

/// The environment variable a stdio upstream's tag is passed in. Not
/// `JUNCTION_*`: a gateway run as an upstream of another would read that as
/// a config override.
pub const TAG_VARIABLE: &str = "MCP_JUNCTION_TREE";

/// How many times the process table is read for one tag: a tagged process
/// forking while it is read can leave a child the pass did not see, found
/// by the next one. A pass that kills nothing new ends the search.
const MAX_PASSES: usize = 4;

/// A tag no other upstream of this process, or of another gateway process
/// on the machine, carries.
pub fn new_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{}{}", own_prefix(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// What every tag this gateway process gives starts with, and no other
/// process's: `<pid>.<start time, ns>.`.
fn own_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_nanos())
            .unwrap_or_default();
        format!("{}.{started}.", std::process::id())
    })
}

/// Kills every process still carrying a tag of this gateway: its last act
/// before exit. A session whose close was cut short at shutdown (a child
/// slow to stop, past the teardown limit) had its group killed as it was
/// dropped, but the search for its tagged processes goes to a blocking
/// thread, which a runtime shutting down never runs.
pub fn kill_every_tagged() -> usize {
    let prefix = format!("{TAG_VARIABLE}={}", own_prefix());
    kill_matching(|entry| entry.starts_with(prefix.as_bytes()), None)
}

/// Kills (SIGKILL) every process whose environment carries `tag`, but for
/// the members of `killed_group` (killed already, perhaps not gone yet);
/// returns how many. Blocking: reads `/proc` (nothing happens where there
/// is none). One read of every process's environment per pass; usually
/// one pass, a second only when the first killed something (what it
/// killed may have forked meanwhile).
pub fn kill_tagged(tag: &str, killed_group: Option<i32>) -> usize {
    let needle = format!("{TAG_VARIABLE}={tag}");
    kill_matching(|entry| entry == needle.as_bytes(), killed_group)
}

/// Kills every process with an environment entry that `matches`, but for
/// the members of `killed_group` (see [`kill_tagged`]).
fn kill_matching(matches: impl Fn(&[u8]) -> bool, killed_group: Option<i32>) -> usize {
    let own = std::process::id();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut killed = 0;
    for _ in 0..MAX_PASSES {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            break;
        };
        let mut new = 0;
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == own || seen.contains(&pid) || !carries(pid, &matches) {
                continue;
            }
            seen.insert(pid);
            if killed_group.is_some() && process_group_of(pid) == killed_group {
                continue;
            }
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            if kill(Pid::from_raw(raw), Signal::SIGKILL).is_ok() {
                new += 1;
            }
        }
        killed += new;
        if new == 0 {
            break;
        }
    }
    if killed > 0 {
        tracing::debug!(
            count = killed,
            "killed what an upstream left running outside its process group"
        );
    }
    killed
}

/// The process group of `pid`, from `/proc/<pid>/stat` ("pid (comm) state
/// ppid pgrp ...").
fn process_group_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Whether process `pid`'s environment (as it was at its `exec`) holds an
/// entry that `matches`. Unreadable (gone, another user's) counts as no.
fn carries(pid: u32, matches: impl Fn(&[u8]) -> bool) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(matches))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(pid: u32) -> bool {
        // A zombie has been killed; it waits for its parent to reap it.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn kills_the_tagged_only() {
        let tag = new_tag();
        let spawn = |tag: &str| {
            std::process::Command::new("sleep")
                .arg("30")
                .env(TAG_VARIABLE, tag)
                .spawn()
                .expect("spawn sleep")
        };
        let mut tagged = spawn(&tag);
        // A tag that merely starts with this one is another upstream's.
        let mut other = spawn(&format!("{tag}0"));
        // `spawn` returns once the exec has begun, before the kernel has set
        // the new environment up; until then it reads as empty.
        for (child, tag) in [(&tagged, tag.clone()), (&other, format!("{tag}0"))] {
            let needle = format!("{TAG_VARIABLE}={tag}");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !carries(child.id(), |entry| entry == needle.as_bytes()) {
                assert!(std::time::Instant::now() < deadline, "{tag} never showed");
                std::thread::yield_now();
            }
        }
        assert_eq!(kill_tagged(&tag, None), 1);
        tagged.wait().expect("reap the tagged");
        assert!(exists(other.id()), "another tag's process was killed");
        other.kill().expect("kill the other");
        other.wait().expect("reap the other");
        assert_eq!(kill_tagged(&tag, None), 0, "nothing left to kill");
    }

    #[test]
    fn tags_differ() {
        assert_ne!(new_tag(), new_tag());
    }
}
