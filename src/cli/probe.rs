//! Starting a config's mounts once, without serving HTTP, to see what they
//! offer: the shared part of `check --connect` and `tools`.
//!
//! The mounts are started exactly as `serve` starts them ([`Gateway::start`]:
//! one discovery task per mount, full client profile), so the lists are the
//! ones clients would get. The wait for first discovery is bounded; a mount
//! still starting when it runs out is reported as such. [`Probe::stop`] then
//! ends every upstream: shared sessions are closed (a stdio child gets EOF,
//! SIGTERM, then SIGKILL, to its whole process group, and is waited for).
//!
//! A mount still *opening* its session when the wait ran out is stopped by
//! its supervisor: the abandoned start kills the child's whole process
//! group, so nothing a wrapper such as `sh` or `npx` started survives.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    catalog::{MergedCatalog, MountCatalog},
    config::{Config, MountConfig},
    gateway::{Gateway, MountPhase},
    upstream::ClientProfile,
};

/// Default bound on waiting for every mount's first discovery: as long as
/// one upstream gets to answer `initialize` by default, since
/// `npx`-launched servers can take that long on a first download.
pub const DEFAULT_DISCOVERY_WAIT: Duration = Duration::from_secs(30);

/// How often readiness is polled. The gateway has no "all discovered" signal
/// (start-up never waits for mounts), and a poll this short adds no
/// noticeable latency to a command that runs once.
const READY_POLL: Duration = Duration::from_millis(50);

/// What one mount did during the probe.
#[derive(Debug, Clone)]
pub enum MountOutcome {
    /// Discovered; its lists in the upstream's own names.
    Ready(Arc<MountCatalog>),
    /// Could not be started or discovered; the reason.
    Failed(String),
    /// First discovery had not finished when the wait ran out.
    TimedOut,
}

/// One mount and how it fared.
#[derive(Debug, Clone)]
pub struct MountReport {
    pub config: MountConfig,
    pub outcome: MountOutcome,
}

/// Everything learned from starting the mounts once. The upstreams still
/// run until [`Probe::stop`].
pub struct Probe {
    /// In config order.
    pub mounts: Vec<MountReport>,
    /// What clients with every capability would be listed, names qualified
    /// and collisions dropped.
    pub catalog: Arc<MergedCatalog>,
    /// The longest tool name clients take (`[server] tool_name_max_chars`).
    pub tool_name_max_chars: usize,
    /// How long the probe waited at most.
    pub waited: Duration,
    gateway: Arc<Gateway>,
}

impl Probe {
    /// Mounts that did not become ready.
    pub fn unavailable(&self) -> impl Iterator<Item = &MountReport> {
        self.mounts
            .iter()
            .filter(|mount| !matches!(mount.outcome, MountOutcome::Ready(_)))
    }

    /// Stops every upstream the probe started; returns once they are gone.
    pub async fn stop(self) {
        // No downstream sessions exist, so this only retires the mounts:
        // their supervisors close live sessions (a stdio child gets EOF,
        // SIGTERM, then SIGKILL, to its whole process group) and abandon
        // starts still running.
        self.gateway.shutdown().await;
    }
}

/// Starts every mount of `config`, waits up to `wait` for their first
/// discovery and records what they offer. Call [`Probe::stop`] next.
pub async fn probe(config: Config, wait: Duration) -> Probe {
    let tool_name_max_chars = config.server.tool_name_max_chars;
    let gateway = Gateway::new(config);
    let started = Instant::now();
    gateway.start();
    let deadline = started + wait;
    while !gateway.is_ready() && Instant::now() < deadline {
        tokio::time::sleep(READY_POLL).await;
    }
    let mounts = gateway
        .mounts()
        .iter()
        .map(|mount| {
            let status = mount.status();
            let outcome = match status.phase {
                MountPhase::Ready => MountOutcome::Ready(mount.catalog_now(ClientProfile::FULL)),
                MountPhase::Degraded | MountPhase::Down => MountOutcome::Failed(
                    status
                        .last_error
                        .unwrap_or_else(|| "failed without a reason".to_owned()),
                ),
                MountPhase::Starting => MountOutcome::TimedOut,
            };
            MountReport {
                config: mount.config.clone(),
                outcome,
            }
        })
        .collect();
    let catalog = gateway.catalog(ClientProfile::FULL);
    Probe {
        mounts,
        catalog,
        tool_name_max_chars,
        waited: wait,
        gateway,
    }
}

/// Parses `--timeout` values such as `30s` or `2m` (humantime).
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    let longest = crate::config::defaults::MAX_DURATION;
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => {
            Err(format!("timeout {text:?} must be longer than zero"))
        }
        Ok(duration) if duration > longest => Err(format!(
            "timeout {text:?} is longer than {}",
            humantime::format_duration(longest)
        )),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!(
            "timeout {text:?} is not a duration like \"30s\" or \"2m\": {error}"
        )),
    }
}
