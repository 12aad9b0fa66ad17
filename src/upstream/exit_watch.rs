//! Noticing that a stdio upstream's process has exited.
//!
//! A stdio session otherwise ends when the child's stdout closes. A process
//! the server started can inherit that stdout (`sh -c "helper & exec
//! server"`, a daemon, a browser) and keep it open after the server died:
//! no end of file, and requests then fail with a broken pipe, which is no
//! session end. The mount was never restarted (a per-session one never
//! reopened), `/readyz` said ready, and the dead server stayed a zombie.
//! So the child's exit itself is watched, through a pidfd, which becomes
//! readable when the process exits, without reaping it (the session's
//! close does, and kills its group, the helper with it).
//!
//! An exit is not the end by itself: what the server wrote just before it
//! is still on its way (so the session is given [`EXIT_GRACE`], in which
//! stdout's end of file usually ends it first), and a launcher may exit
//! with the server it started still serving on the pipes (`setsid`
//! forks). So the pipes are asked (a ping, as after a request times out)
//! and only a session that does not answer is ended.

use std::time::Duration;

use rmcp::{Peer, RoleClient};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use tokio::io::{unix::AsyncFd, Interest};
use tokio_util::sync::CancellationToken;

/// How long after the child's exit its pipes may still deliver what it
/// wrote, before they are asked whether anyone still serves on them.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// Ends the session (`ended`) when process `pid` (a child of this process,
/// not yet reaped) has exited and `peer`'s pipes no longer answer a ping
/// ([`super::answers_ping`]); the watch stops when `ended` is cancelled
/// otherwise. Without pidfds (Linux before 5.3, a seccomp profile that
/// refuses them) nothing is watched: stdout's end of file still ends the
/// session.
pub fn watch(pid: u32, mount: &str, peer: Peer<RoleClient>, ended: CancellationToken) {
    let Some(pidfd) = open(pid, mount) else {
        return;
    };
    let mount = mount.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            exited = pidfd.readable() => if exited.is_err() { return },
            _ = ended.cancelled() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(EXIT_GRACE) => {}
            _ = ended.cancelled() => return,
        }
        if super::answers_ping(&peer).await {
            tracing::info!(
                mount,
                pid,
                "the upstream's process exited, but something still answers on its pipes (a launcher); the session goes on"
            );
        } else if !ended.is_cancelled() {
            tracing::warn!(
                mount,
                pid,
                "the upstream's process exited; ending its session"
            );
            ended.cancel();
        }
    });
}

/// A pidfd for `pid`, registered with the runtime.
fn open(pid: u32, mount: &str) -> Option<AsyncFd<std::os::fd::OwnedFd>> {
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
    let opened = pidfd_open(raw, PidfdFlags::empty())
        .map_err(std::io::Error::from)
        .and_then(|pidfd| AsyncFd::with_interest(pidfd, Interest::READABLE));
    match opened {
        Ok(pidfd) => Some(pidfd),
        Err(error) => {
            tracing::debug!(mount, %error, "cannot watch the upstream process's exit");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client peer whose pipes answer nothing (the other end is gone).
    fn unanswered_peer() -> rmcp::service::RunningService<RoleClient, ()> {
        let (transport, other_end) = tokio::io::duplex(64);
        drop(other_end);
        rmcp::service::serve_directly((), transport, None)
    }

    /// The child's exit ends the session though its stdout is still open
    /// (held here by the test, as a helper process would hold it), once its
    /// pipes answer nothing.
    #[tokio::test]
    async fn an_exit_is_noticed_while_stdout_stays_open() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "read line"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let _stdout_held = child.stdout.take();
        let ended = CancellationToken::new();
        let service = unanswered_peer();
        let pid = child.id().expect("a pid");
        watch(pid, "m", service.peer().clone(), ended.clone());
        assert!(!ended.is_cancelled());
        // Ends the child: `read` gets its line.
        drop(child.stdin.take());
        tokio::time::timeout(Duration::from_secs(10), ended.cancelled())
            .await
            .expect("the exit noticed");
        let _ = child.wait().await;
    }
}
