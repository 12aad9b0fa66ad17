//! Gateway configuration: the resolved, validated form everything else uses.
//!
//! Raw input ([`raw`]) is loaded by [`load`] (file by extension, then
//! `JUNCTION_…` env overrides, then `${VAR}` expansion) and checked by
//! [`validate`], which reports every problem with its field path. Nothing
//! here binds a socket or starts a process.

mod expand;
mod load;
mod problems;
mod raw;
mod validate;

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

pub use load::{load, ConfigSource, EMBEDDED_DEFAULT};
pub use problems::{ConfigError, Problem};

use crate::naming::{MountName, Namespace, Separator};

/// Everything the gateway needs to run, already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub telemetry: TelemetryConfig,
    pub admin: AdminConfig,
    /// Mounts in config order: on a name collision the earlier one wins.
    pub mounts: Vec<MountConfig>,
}

/// The `[server]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Socket address the HTTP listener binds.
    pub listen: SocketAddr,
    /// HTTP path of the MCP endpoint, starting with `/`.
    pub path: String,
    /// Between namespace and tool/prompt name in the names clients see.
    pub separator: Separator,
    /// `Host` header allow-list (DNS-rebinding protection); empty = no check.
    pub allowed_hosts: Vec<String>,
    /// `Origin` header allow-list for requests that carry one (browsers);
    /// `None` = no check. Entries are `scheme://host[:port|:*]` or `null`.
    pub allowed_origins: Option<Vec<String>>,
    /// A downstream session with no traffic for this long is ended.
    pub session_idle_timeout: Duration,
}

/// The `[telemetry]` table: logs and trace export.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    pub log_format: crate::telemetry::LogFormat,
    /// A `tracing` filter such as `info` or `info,junction=debug`;
    /// `RUST_LOG` wins when set.
    pub log_level: String,
    /// OTLP/HTTP base endpoint (`http://collector:4318`); `None` = no trace
    /// export unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    pub otlp_json: bool,
    /// `OTEL_SERVICE_NAME` wins when set.
    pub service_name: String,
}

/// The `[admin]` table: `/metrics`, `/status`, `/status.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub enabled: bool,
    /// Serve them on their own listener; `None` = on `server.listen`.
    pub listen: Option<SocketAddr>,
}

/// One upstream MCP server and how it is exposed.
#[derive(Debug, Clone, PartialEq)]
pub struct MountConfig {
    pub name: MountName,
    pub namespace: Namespace,
    pub isolation: Isolation,
    pub transport: UpstreamTransport,
}

/// Who shares an upstream session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// One upstream session serves every downstream session.
    Shared,
    /// Each downstream session gets its own upstream session for this mount.
    PerSession,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Shared => "shared",
            Isolation::PerSession => "per_session",
        }
    }
}

/// How to reach an upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A remote Streamable HTTP endpoint.
    StreamableHttp {
        url: url::Url,
        headers: BTreeMap<String, String>,
    },
}

impl UpstreamTransport {
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamTransport::Stdio { .. } => "stdio",
            UpstreamTransport::StreamableHttp { .. } => "streamable_http",
        }
    }
}

/// Defaults for the `[server]` table, documented in README.md.
pub mod defaults {
    use std::time::Duration;

    pub const LISTEN: &str = "127.0.0.1:8080";
    pub const PATH: &str = "/mcp";
    pub const SEPARATOR: &str = "__";
    pub const ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
    /// Pages served from this machine may call the gateway; a page from any
    /// other origin (a DNS-rebinding attack) gets 403.
    pub const ALLOWED_ORIGINS: [&str; 6] = [
        "http://localhost:*",
        "https://localhost:*",
        "http://127.0.0.1:*",
        "https://127.0.0.1:*",
        "http://[::1]:*",
        "https://[::1]:*",
    ];
    /// Long enough for a developer to step away; short enough that abandoned
    /// sessions (and their per-session upstream processes) do not pile up.
    pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
    pub const LOG_LEVEL: &str = "info,rmcp=warn";
    pub const SERVICE_NAME: &str = "junction";
}

#[cfg(test)]
mod tests;
