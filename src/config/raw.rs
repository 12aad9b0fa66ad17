//! The config as the user wrote it: loose serde shapes, no I/O, no checks.
//!
//! Every field is optional here so that one missing or mistyped field does
//! not hide the other problems: [`super::validate`] turns these into the
//! resolved [`super::Config`] and reports everything wrong at once.
//! `deny_unknown_fields` catches typos such as `comand`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `[server]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<String>,
    pub path: Option<String>,
    pub separator: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub session_idle_timeout: Option<String>,
    pub session_hibernate_after: Option<String>,
    pub shutdown_grace: Option<String>,
    pub request_read_timeout: Option<String>,
}

/// One `[mounts.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMount {
    // stdio upstream
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    // Streamable HTTP upstream
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    // both
    pub namespace: Option<String>,
    pub isolation: Option<String>,
    pub timeouts: Option<RawMountTimeouts>,
    pub max_upstream_sessions: Option<usize>,
}

/// The `[timeouts]` table, and the same keys in `[mounts.NAME.timeouts]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    pub connect: Option<String>,
    pub initialize: Option<String>,
    pub request: Option<String>,
    pub request_ceiling: Option<String>,
}

/// `[mounts.NAME.timeouts]`: the `[timeouts]` keys plus per-tool request
/// timeouts by the upstream's own tool name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMountTimeouts {
    pub connect: Option<String>,
    pub initialize: Option<String>,
    pub request: Option<String>,
    pub request_ceiling: Option<String>,
    pub tools: Option<BTreeMap<String, String>>,
}

/// The `[supervision]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSupervision {
    pub restart_backoff: Option<String>,
    pub restart_backoff_max: Option<String>,
    pub crash_loop_restarts: Option<u32>,
    pub down_retry: Option<String>,
}

/// The `[limits]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_sessions: Option<usize>,
    pub max_concurrent_requests: Option<usize>,
    pub max_body_size: Option<RawSize>,
    pub max_upstream_sessions: Option<usize>,
}

/// A size in bytes: a number, or a string such as `"4MiB"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

/// The `[telemetry]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub log_format: Option<String>,
    pub log_level: Option<String>,
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: Option<String>,
    pub service_name: Option<String>,
}

/// The `[admin]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
}
