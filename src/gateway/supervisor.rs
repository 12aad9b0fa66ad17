//! Keeps one of a mount's own upstream sessions running: start, discover,
//! wait for the end, back off, start again.
//!
//! A supervisor owns exactly one [`ProfileSession`] (see `mount.rs`). Each
//! round opens the upstream (bounded by the mount's initialize timeout),
//! reads its lists (bounded by the request timeout), publishes the live
//! session, and waits for the connection to end. A session that ends, or a
//! start that fails, counts as a failure; after
//! `supervision.crash_loop_restarts` failures in a row the mount is `down`
//! and retried every `down_retry` only. A session that stayed up for
//! [`STABLE_AFTER`] resets the count. Delays grow exponentially with jitter
//! ([`restart_delay`]), so a crash-looping server costs a few wake-ups, not
//! a core. Retiring the mount (reload, shutdown) ends the loop and closes
//! the session. Downstream sessions never wait on a backoff: while it runs,
//! calls fail at once with the reason (see `Mount::session_for`).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use super::mount::{Mount, ProfileSession, SessionSlot};
use crate::{
    config::Supervision,
    telemetry::metrics::metrics,
    upstream::{discovery, ClientProfile},
};

/// A session up this long was healthy: its end starts a fresh count of
/// failures. Shorter than the default maximum backoff would make a server
/// that dies every minute never reach `down`; longer would make one crash a
/// day count against the next.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The wait before start attempt number `failures + 1`, after `failures`
/// failures in a row (≥ 1): `restart_backoff × 2^(failures−1)`, capped at
/// `restart_backoff_max`, then scaled by `jitter` in [0, 1) to somewhere
/// between half and all of it, so many mounts failing together (a shared
/// dependency went away) do not restart in lockstep.
pub fn restart_delay(supervision: &Supervision, failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    let base = supervision
        .restart_backoff
        .saturating_mul(1u32 << exponent)
        .min(supervision.restart_backoff_max);
    base.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Runs until the mount is retired.
pub async fn supervise(mount: Arc<Mount>, profile_session: Arc<ProfileSession>) {
    let name = mount.config.name.clone();
    let profile = profile_session.profile();
    let retired = mount.retired_token();
    let mut failures: u32 = 0;
    let mut attempt: u64 = 0;
    // The failure the next attempt follows, if it follows one.
    let mut after_failure: Option<(String, bool)> = None;
    // A per-session upstream reaching the server (`Mount::upstream_reached`)
    // cuts one wait short per run of failures: a server that accepts
    // sessions but fails the mount's start otherwise is tried at each
    // client's call, past its backoff and `down_retry`.
    let mut reached = mount.reached();
    let mut may_wake_early = true;
    metrics().mount_supervised(&mount.labels());
    loop {
        attempt += 1;
        // Only what happens from this attempt on counts.
        reached.borrow_and_update();
        if attempt > 1 {
            metrics()
                .upstream_restarts
                .get_or_create(&mount.labels())
                .inc();
        }
        profile_session.publish(match after_failure.take() {
            Some((error, down)) => SessionSlot::Retrying { error, down },
            None => SessionSlot::Starting,
        });
        let started = tokio::select! {
            started = start_and_discover(&mount, &profile_session) => started,
            _ = retired.cancelled() => break,
        };
        // An ended session is closed once its failure is known to callers
        // and to `/readyz` (a hung child takes seconds to close).
        let mut to_close = None;
        let error = match started {
            Ok(session) => {
                let up_since = Instant::now();
                if profile == ClientProfile::FULL {
                    mount.record_ready(attempt - 1);
                    mount.discover_inherited_profiles();
                }
                profile_session.publish(SessionSlot::Live(session.clone()));
                mount.session_started(profile, session.clone());
                // A new run of failures may be cut short once again, by
                // what happens from now on.
                may_wake_early = true;
                reached.borrow_and_update();
                tokio::select! {
                    _ = session.ended() => {}
                    _ = retired.cancelled() => {
                        session.close().await;
                        break;
                    }
                }
                // A session an HTTP upstream forgot (it restarted, or
                // expired the session) is opened again at once, not
                // counted as a failure: the server is there, and calls
                // wait for the new session meanwhile. Not one forgotten
                // within the longest backoff: a server that forgets every
                // session would be reconnected in a loop.
                let lived = up_since.elapsed();
                if session.expired() && lived >= mount.supervision().restart_backoff_max {
                    tracing::info!(mount = %name, %profile, "the upstream no longer knows the gateway's session (restarted or expired); reconnecting");
                    session.close().await;
                    failures = 0;
                    continue;
                }
                if lived >= STABLE_AFTER {
                    failures = 0;
                }
                let error = match (session.pid(), session.ended_unresponsive()) {
                    (Some(pid), true) => format!(
                        "the upstream process (pid {pid}) answered nothing, not even a ping, and was stopped"
                    ),
                    (None, true) => {
                        "the upstream answered nothing, not even a ping; its session was ended"
                            .to_owned()
                    }
                    // Its stdout closed: it exited, or closed it and
                    // runs on (stopped by the gateway next).
                    (Some(pid), false) => {
                        format!("the upstream process (pid {pid}) closed its output or exited")
                    }
                    (None, false) => "the upstream connection ended".to_owned(),
                };
                to_close = Some(session);
                error
            }
            Err(error) => error,
        };
        failures += 1;
        profile_session.mark_attempted();
        let failed_at = Instant::now();
        let jitter = fastrand::f64();
        // Watched before the config is read: a reload in between is seen.
        let mut config_changes = mount.config_changes();
        let (mut down, mut retry_at) = next_attempt(&mount, failures, jitter, failed_at);
        if down {
            tracing::error!(mount = %name, %profile, %error, failures, retry_in = ?(retry_at - failed_at), "mount is down: too many failures in a row");
        } else {
            tracing::warn!(mount = %name, %profile, %error, failures, retry_in = ?(retry_at - failed_at), "upstream session failed; restarting");
        }
        if profile == ClientProfile::FULL {
            mount.record_failure(down, &error, attempt);
        }
        if let Some(session) = to_close {
            profile_session.publish(SessionSlot::Waiting {
                error: error.clone(),
                down,
                retry_at,
            });
            // Ended by the peer or by the gateway noticing the session is
            // gone: release what is left of it either way, before the next
            // start (its child may hold what a new one needs).
            session.close().await;
        }
        // A reload may change `[supervision]` meanwhile: the wait is
        // worked out again from the failure (an hour's `down_retry` cut to
        // a minute applies now, not after the hour).
        loop {
            profile_session.publish(SessionSlot::Waiting {
                error: error.clone(),
                down,
                retry_at,
            });
            tokio::select! {
                _ = tokio::time::sleep_until(retry_at) => break,
                // A per-session upstream of the mount reached the server.
                Ok(()) = reached.changed(), if may_wake_early => {
                    may_wake_early = false;
                    break;
                }
                _ = retired.cancelled() => {
                    profile_session.publish(SessionSlot::Retired);
                    return;
                }
                changed = config_changes.changed() => {
                    if changed.is_err() {
                        // The gateway is going: only the retire is left.
                        retired.cancelled().await;
                        profile_session.publish(SessionSlot::Retired);
                        return;
                    }
                    (down, retry_at) = next_attempt(&mount, failures, jitter, failed_at);
                    if profile == ClientProfile::FULL {
                        mount.record_failure(down, &error, attempt);
                    }
                }
            }
        }
        after_failure = Some((error, down));
    }
    profile_session.publish(SessionSlot::Retired);
}

/// Whether a mount that has failed `failures` times in a row (the last at
/// `failed_at`) is down, and when it is tried next, by its current
/// `[supervision]`.
fn next_attempt(mount: &Mount, failures: u32, jitter: f64, failed_at: Instant) -> (bool, Instant) {
    let supervision = mount.supervision();
    let down = failures >= supervision.crash_loop_restarts;
    let delay = if down {
        supervision.down_retry
    } else {
        restart_delay(&supervision, failures, jitter)
    };
    (down, failed_at + delay)
}

/// One start: open the upstream session and read its lists. The catalog is
/// stored (and sessions told of what changed) before the session is
/// published, so nobody routes by a stale catalog to a fresh upstream.
async fn start_and_discover(
    mount: &Arc<Mount>,
    profile_session: &ProfileSession,
) -> Result<Arc<crate::upstream::UpstreamSession>, String> {
    let session = mount
        .open_own_session(profile_session.profile())
        .await
        .map_err(|error| error.to_string())?;
    metrics()
        .cache_refreshes
        .get_or_create(&mount.labels())
        .inc();
    let catalog = match discovery::discover(&session, mount.list_limits()).await {
        Ok(catalog) => catalog,
        Err(error) => {
            session.close().await;
            return Err(format!(
                "discovery failed: {}",
                crate::upstream::http_client::with_causes(&error)
            ));
        }
    };
    tracing::info!(
        mount = %mount.config.name,
        profile = %profile_session.profile(),
        pid = session.pid(),
        tools = catalog.tools.len(),
        prompts = catalog.prompts.len(),
        resources = catalog.resources.len(),
        templates = catalog.templates.len(),
        "mount upstream session ready"
    );
    mount.catalog_discovered(profile_session, catalog);
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Supervision {
        Supervision {
            restart_backoff: Duration::from_millis(100),
            restart_backoff_max: Duration::from_secs(2),
            crash_loop_restarts: 5,
            down_retry: Duration::from_secs(60),
        }
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let full = |failures| restart_delay(&policy(), failures, 1.0);
        assert_eq!(full(1), Duration::from_millis(100));
        assert_eq!(full(2), Duration::from_millis(200));
        assert_eq!(full(3), Duration::from_millis(400));
        assert_eq!(full(5), Duration::from_millis(1600));
        assert_eq!(full(6), Duration::from_secs(2));
        assert_eq!(full(1000), Duration::from_secs(2), "no overflow");
    }

    #[test]
    fn jitter_keeps_between_half_and_all_of_the_delay() {
        assert_eq!(restart_delay(&policy(), 3, 0.0), Duration::from_millis(200));
        let some = restart_delay(&policy(), 3, 0.37);
        assert!(some > Duration::from_millis(200) && some < Duration::from_millis(400));
        assert_eq!(
            restart_delay(&policy(), 3, 7.0),
            Duration::from_millis(400),
            "jitter is clamped"
        );
    }
}
