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

use rustix::process::{pidfd_open, Pid, PidfdFlags};
use tokio::io::{unix::AsyncFd, Interest};
use tokio_util::sync::CancellationToken;

/// Cancels `ended` when process `pid` (a child of this process, not yet
/// reaped) exits; the watch stops when `ended` is cancelled otherwise.
/// Without pidfds (Linux before 5.3) nothing is watched: stdout's end of
/// file still ends the session.
pub fn watch(pid: u32, mount: &str, ended: CancellationToken) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let pidfd = match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(pidfd) => pidfd,
        Err(error) => {
            tracing::debug!(mount, %error, "cannot watch the upstream process's exit");
            return;
        }
    };
    let pidfd = match AsyncFd::with_interest(pidfd, Interest::READABLE) {
        Ok(pidfd) => pidfd,
        Err(error) => {
            tracing::debug!(mount, %error, "cannot watch the upstream process's exit");
            return;
        }
    };
    let mount = mount.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            exited = pidfd.readable() => {
                if exited.is_ok() && !ended.is_cancelled() {
                    tracing::debug!(mount, pid = pid.as_raw_nonzero().get(), "the upstream process exited");
                    ended.cancel();
                }
            }
            _ = ended.cancelled() => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child's exit ends the session though its stdout is still open
    /// (held here by the test, as a helper process would hold it).
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
        watch(child.id().expect("a pid"), "m", ended.clone());
        assert!(!ended.is_cancelled());
        // Ends the child: `read` gets its line.
        drop(child.stdin.take());
        tokio::time::timeout(std::time::Duration::from_secs(10), ended.cancelled())
            .await
            .expect("the exit noticed");
        let _ = child.wait().await;
    }
}
