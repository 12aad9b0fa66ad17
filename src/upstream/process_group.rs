//! Makes sure a stdio upstream's whole process group dies with it, and what
//! it started outside the group too.
//!
//! The child runs as the leader of its own process group, so a wrapper such
//! as `npx` and the server it starts share one group. rmcp kills the leader
//! on drop from a spawned task (which never runs once the runtime is
//! shutting down), and tokio's `kill_on_drop` kills only the leader. This
//! guard sends SIGKILL to the whole group, synchronously, when dropped:
//! when an upstream is abandoned while starting, dropped without a graceful
//! close, or after a graceful close to reap stragglers. A group that no
//! longer exists is not an error. Then it kills the processes that left the
//! group but carry the child's tag ([`super::detached`]).

use nix::{
    sys::signal::{killpg, Signal},
    unistd::Pid,
};

#[derive(Default)]
pub struct ProcessGroupGuard {
    pgid: Option<Pid>,
    /// The child's [`super::detached`] tag.
    tag: Option<String>,
}

impl ProcessGroupGuard {
    /// Guards the group led by `pid` (the child spawned as group leader
    /// with `tag` in its environment).
    pub fn new(pid: Option<u32>, tag: Option<String>) -> Self {
        Self {
            pgid: pid
                .and_then(|pid| i32::try_from(pid).ok())
                .filter(|pid| *pid > 1)
                .map(Pid::from_raw),
            tag,
        }
    }

    /// Guards nothing (an HTTP upstream).
    pub fn none() -> Self {
        Self::default()
    }

    /// What this guard guards, leaving it guarding nothing: to be killed
    /// off the async workers (reading `/proc` blocks).
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    /// Kills whatever is left of the group now, then what left the group.
    /// Blocking (reads `/proc`).
    pub fn kill(&mut self) {
        let group = self.pgid.map(Pid::as_raw);
        if let Some(pgid) = self.pgid.take() {
            match killpg(pgid, Signal::SIGKILL) {
                Ok(()) => {
                    tracing::debug!(pgid = pgid.as_raw(), "killed an upstream's process group")
                }
                Err(nix::errno::Errno::ESRCH) => {}
                Err(error) => {
                    tracing::warn!(pgid = pgid.as_raw(), %error, "cannot kill an upstream's process group")
                }
            }
        }
        if let Some(tag) = self.tag.take() {
            super::detached::kill_tagged(&tag, group);
        }
    }
}

impl Drop for ProcessGroupGuard {
    /// The group at once; the search for what left it on a blocking thread
    /// when there is a runtime (a start abandoned on a lane must not stall
    /// the lane's connections), else here.
    fn drop(&mut self) {
        let tag = self.tag.take();
        let group = self.pgid.map(Pid::as_raw);
        self.kill();
        let Some(tag) = tag else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || super::detached::kill_tagged(&tag, group));
            }
            Err(_) => {
                super::detached::kill_tagged(&tag, group);
            }
        }
    }
}
