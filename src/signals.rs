//! The signals that stop or reload a running gateway, listened for from
//! the start.
//!
//! Until a handler is installed, SIGTERM, SIGINT and SIGHUP end the process
//! at once: no drain, and the stdio children, each the leader of its own
//! process group, are left running. Tokio installs a signal's handler when
//! a listener for it is created, for the rest of the process, so
//! [`shutdown_signal`] creates its listeners when called, before the
//! gateway starts a child, not when its future is first polled.
//!
//! The graceful stop waits for calls in flight (`shutdown_grace`) and for
//! upstreams to close; a second SIGINT or SIGTERM during it (Ctrl-C
//! pressed again) stops the process at once, its children killed first.
//! Not one within [`SAME_STOP`] of the first: a wrapper (`npm run`,
//! `concurrently`) forwards the terminal's Ctrl-C that the gateway also
//! got itself, and that one press must still stop gracefully.

use std::{
    future::Future,
    sync::atomic::{AtomicBool, Ordering},
};

/// Set once a second stop signal ends the process ([`stop_now`]), before
/// its upstreams are killed: a request in flight that sees its upstream go
/// from then on says the gateway is stopping, not that it restarts the
/// upstream (it may be answered in the moment before the exit).
static STOPPING_NOW: AtomicBool = AtomicBool::new(false);

/// Whether the process is ending at once, its upstreams killed by it.
pub fn stopping_now() -> bool {
    STOPPING_NOW.load(Ordering::Acquire)
}

/// Listens from now on; resolves on the first SIGINT or SIGTERM, and from
/// then on ends the process at a second one ([`stop_now`]). Also
/// installs SIGHUP's handler, which the config watcher listens to: one
/// arriving before the watcher runs is not a reload, but it does not end
/// the gateway either.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|error| tracing::warn!(%error, "cannot listen for {name}"))
                .ok()
        };
        let interrupt = listen(SignalKind::interrupt(), "SIGINT");
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        drop(listen(SignalKind::hangup(), "SIGHUP"));
        async move {
            let (mut interrupt, mut terminate) = (interrupt, terminate);
            either(&mut interrupt, &mut terminate).await;
            let first = tokio::time::Instant::now();
            tokio::spawn(async move {
                loop {
                    let second = either(&mut interrupt, &mut terminate).await;
                    if first.elapsed() >= SAME_STOP {
                        stop_now(second);
                    }
                }
            });
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A signal this soon after the first is the same stop, forwarded.
#[cfg(unix)]
const SAME_STOP: std::time::Duration = std::time::Duration::from_secs(1);

/// The next SIGINT or SIGTERM (never, for one not listened to): which.
#[cfg(unix)]
async fn either(
    interrupt: &mut Option<tokio::signal::unix::Signal>,
    terminate: &mut Option<tokio::signal::unix::Signal>,
) -> tokio::signal::unix::SignalKind {
    use tokio::signal::unix::SignalKind;
    async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
        match signal {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        () = next(interrupt) => SignalKind::interrupt(),
        () = next(terminate) => SignalKind::terminate(),
    }
}

/// Ends the process now (a second signal during the graceful stop): what
/// the upstreams started is killed first, since nothing will close them.
/// Exit code 128 + the signal's number, as a shell reports a process the
/// signal ended: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
#[cfg(unix)]
fn stop_now(signal: tokio::signal::unix::SignalKind) -> ! {
    STOPPING_NOW.store(true, Ordering::Release);
    // Killed before anything is written: a stderr nobody reads could
    // block the write, and the exit with it.
    crate::upstream::kill_every_tagged();
    crate::telemetry::say(
        "WARN",
        "junction: a second stop signal: stopped at once, upstream processes killed",
    );
    std::process::exit(128 + signal.as_raw_value())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// Whether this process has a handler for signal `number`
    /// (`SigCgt` in /proc/self/status).
    fn caught(number: u32) -> bool {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let mask = status
            .lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .map(|mask| u64::from_str_radix(mask.trim(), 16).expect("a hex mask"))
            .expect("a SigCgt line");
        mask & (1 << (number - 1)) != 0
    }

    /// The handlers are there once the function returns, before its
    /// future is polled (it was an `async fn`: nothing until polled, and
    /// a SIGTERM just after start took the default action). SIGHUP's may
    /// also come from `gateway::watch`'s tests in this binary; SIGINT's
    /// and SIGTERM's only from here.
    #[tokio::test]
    async fn handlers_are_installed_before_the_future_is_polled() {
        let (sighup, sigint, sigterm) = (1, 2, 15);
        let waiting = super::shutdown_signal();
        for number in [sighup, sigint, sigterm] {
            assert!(caught(number), "signal {number} has no handler");
        }
        drop(waiting);
    }
}
