//! Gateway configuration: the resolved, validated form everything else uses.
//!
//! Raw input ([`raw`]) is loaded by [`load`] (file by extension, then
//! `JUNCTION_…` env overrides, then `${VAR}` expansion) and checked by
//! [`validate`], which reports every problem with its field path. Nothing
//! here binds a socket or starts a process.

mod duplicates;
mod expand;
mod load;
mod problems;
mod raw;
mod validate;

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

pub use expand::{expand_str, is_variable_name};
pub use load::{
    load, load_content, log_format_asked, override_listen, ConfigSource, EMBEDDED_DEFAULT,
};
pub use problems::{ConfigError, Problem};
pub use validate::{endpoint_path_problems, listen_address, namespace_problems};

use crate::{
    naming::{MountName, Namespace, Separator},
    tool_filter::ToolFilter,
};

/// Everything the gateway needs to run, already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub telemetry: TelemetryConfig,
    pub admin: AdminConfig,
    pub timeouts: Timeouts,
    pub supervision: Supervision,
    pub limits: Limits,
    /// Mounts in config order: on a name collision the earlier one wins.
    pub mounts: Vec<MountConfig>,
    /// Further MCP endpoints, each serving some of the mounts, by name.
    pub endpoints: Vec<EndpointConfig>,
    /// The strings `${VAR}` substitution changed, as written, by path
    /// (`mounts.web.url`): what came from the environment is usually a
    /// secret, and is shown as the variable it came from (`junction
    /// check`).
    pub as_written: std::collections::BTreeMap<String, String>,
    /// Settings of the file an environment variable overrode, by path,
    /// with the variable: the file's value is not used, which an operator
    /// reading the file would not guess (the Docker image always sets
    /// `JUNCTION_SERVER__ALLOWED_HOSTS`).
    pub overridden: Vec<(String, String)>,
}

impl Config {
    /// The string at `path`, `value` after substitution, as written.
    pub fn shown<'a>(&'a self, path: &str, value: &'a str) -> &'a str {
        self.as_written.get(path).map_or(value, String::as_str)
    }

    /// The endpoint named `name`, if configured.
    pub fn endpoint(&self, name: &str) -> Option<&EndpointConfig> {
        self.endpoints
            .iter()
            .find(|endpoint| endpoint.name.as_ref() == name)
    }
}

/// One `[endpoints.NAME]` table: an MCP endpoint of its own, at
/// `{server.path}/NAME`, serving only `mounts`. A client with too many
/// tools for it (IDE agents cap them) connects there instead. Not an
/// access boundary: every endpoint is open to every client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Checked as a mount name is (`^[a-z][a-z0-9-]{0,31}$`): a path
    /// segment as it is.
    pub name: Arc<str>,
    /// The mounts it serves, in the order written (the config's mount
    /// order still decides name collisions).
    pub mounts: Vec<MountName>,
}

impl EndpointConfig {
    /// Whether it serves mount `mount`.
    pub fn serves(&self, mount: &MountName) -> bool {
        self.mounts.contains(mount)
    }
}

/// The HTTP path of endpoint `name` under the MCP endpoint's `base`.
pub fn endpoint_path(base: &str, name: &str) -> String {
    format!("{}/{name}", base.trim_end_matches('/'))
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
    /// Whether a tool name clients would refuse is served as one that fits
    /// their rule ([`crate::tool_name_rule::fit`]).
    pub fit_tool_names: bool,
    /// The longest tool name clients take: `check` warns past it, and
    /// `fit_tool_names` fits to it.
    pub tool_name_max_chars: usize,
    /// `Host` header allow-list (DNS-rebinding protection); empty = no check.
    pub allowed_hosts: Vec<String>,
    /// `Origin` header allow-list for requests that carry one (browsers);
    /// `None` = no check. Entries are `scheme://host[:port|:*]` or `null`.
    pub allowed_origins: Option<Vec<String>>,
    /// A downstream session with no traffic for this long is ended.
    pub session_idle_timeout: Duration,
    /// A downstream session idle this long, with no stream open, sleeps:
    /// its state is kept and rmcp's per-session machinery freed until its
    /// next request. `None` (`"off"`): sessions never sleep.
    pub session_hibernate_after: Option<Duration>,
    /// On SIGTERM/SIGINT, how long requests in flight get to finish. What
    /// follows (sessions ended, connections and upstreams closed, children
    /// killed) has fixed limits of its own (README.md, "Operating"), not
    /// this again.
    pub shutdown_grace: Duration,
    /// How long a client has to send a request's head, then its body; a
    /// connection idle between requests this long is closed. Bounds what a
    /// slow or silent client holds (slowloris).
    pub request_read_timeout: Duration,
    /// Path of the older HTTP+SSE transport's event stream (its posts go
    /// to the same path), for clients that speak only that; `None` (`""`):
    /// not served.
    pub sse_path: Option<String>,
}

/// The `[timeouts]` table: gateway-wide defaults, each overridable in a
/// mount's own `timeouts` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP (and TLS) connect to a Streamable HTTP upstream, per attempt.
    pub connect: Duration,
    /// Starting an upstream (spawn or connect) plus the `initialize`
    /// exchange.
    pub initialize: Duration,
    /// A request with no answer *and no progress notification* for this
    /// long is cancelled upstream and fails; each progress notification
    /// starts the wait again.
    pub request: Duration,
    /// No request runs longer than this, progress or not.
    pub request_ceiling: Duration,
}

impl Timeouts {
    /// These defaults with a mount's own overrides applied.
    pub fn for_mount(&self, mount: &MountTimeouts) -> Timeouts {
        Timeouts {
            connect: mount.connect.unwrap_or(self.connect),
            initialize: mount.initialize.unwrap_or(self.initialize),
            request: mount.request.unwrap_or(self.request),
            request_ceiling: mount.request_ceiling.unwrap_or(self.request_ceiling),
        }
    }
}

/// A mount's `timeouts` table: what it overrides of `[timeouts]`, plus
/// request timeouts for single tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountTimeouts {
    pub connect: Option<Duration>,
    pub initialize: Option<Duration>,
    pub request: Option<Duration>,
    pub request_ceiling: Option<Duration>,
    /// By the upstream's own tool name (not the namespaced one).
    pub tools: BTreeMap<String, Duration>,
}

/// The `[supervision]` table: how a mount's own upstream session is
/// restarted after it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    /// Delay before the first restart; doubled after each further failure
    /// in a row, with jitter.
    pub restart_backoff: Duration,
    /// Cap on that delay.
    pub restart_backoff_max: Duration,
    /// After this many failures in a row the mount is marked `down`.
    pub crash_loop_restarts: u32,
    /// While `down`, one restart attempt every this long.
    pub down_retry: Duration,
}

/// The `[limits]` table. Beyond a limit the client gets a clear error and
/// nothing else is affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Live downstream sessions; a new session beyond it gets HTTP 503.
    pub max_sessions: usize,
    /// Requests in flight in one downstream session; one more gets a
    /// JSON-RPC error.
    pub max_concurrent_requests: usize,
    /// Largest POST body, in bytes; bigger gets HTTP 413.
    pub max_body_size: usize,
    /// Upstream sessions one `per_session` mount may have open at once
    /// (each may be a process); a mount's `max_upstream_sessions` overrides.
    pub max_upstream_sessions: usize,
}

/// The `[telemetry]` table: logs and trace export.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    pub log_format: crate::telemetry::LogFormat,
    /// A `tracing` filter such as `info` or `info,junction=debug`;
    /// `RUST_LOG` wins when set.
    pub log_level: String,
    /// OTLP/HTTP base endpoint (`http://collector:4318`); `None` = no trace
    /// export unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (both win; see
    /// `telemetry::trace_export`).
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
    /// Tuning a reload changes in place: a running mount reads it from
    /// `Mount::timeouts` and `Mount::request_limit`, not from here.
    pub timeouts: MountTimeouts,
    /// Overrides `[limits] max_upstream_sessions` for this mount (tuning,
    /// like `timeouts`).
    pub max_upstream_sessions: Option<usize>,
    /// Which of the upstream's tools the mount offers. Applied to the
    /// running mount by a reload, like tuning: it changes what the
    /// catalog shows, not the upstream.
    pub tools: ToolFilter,
    /// Headers of the client's own requests a `per_session` HTTP mount
    /// sends upstream: upstream header name → client header name, both
    /// lower case. Empty for every other mount (validation sees to it).
    pub forward_headers: BTreeMap<String, String>,
    /// A stdio mount's `command` as written, when `${VAR}` substitution
    /// changed it: what errors show in its place, so a variable's value
    /// (a secret, maybe) reaches no log, status page or client.
    pub command_as_written: Option<String>,
}

impl MountConfig {
    /// The stdio command as errors may show it.
    pub fn shown_command<'a>(&'a self, command: &'a str) -> &'a str {
        self.command_as_written.as_deref().unwrap_or(command)
    }

    /// Whether `other` names the same upstream, exposed the same way: it
    /// may differ only in tuning (timeouts but `connect`, the per-session
    /// limit) and in which tools it offers, which a reload applies to the
    /// running mount without restarting it.
    pub fn same_upstream(&self, other: &MountConfig) -> bool {
        // Destructured so that a new field has to be sorted into one kind
        // or the other here.
        let MountConfig {
            name,
            namespace,
            isolation,
            transport,
            timeouts,
            max_upstream_sessions: _,
            tools: _,
            forward_headers,
            // Follows `transport`'s command.
            command_as_written: _,
        } = self;
        *name == other.name
            && *namespace == other.namespace
            && *isolation == other.isolation
            && *transport == other.transport
            && *forward_headers == other.forward_headers
            // Built into an HTTP upstream's client when it opens (a
            // stdio one has no use for it).
            && (matches!(transport, UpstreamTransport::Stdio { .. })
                || timeouts.connect == other.timeouts.connect)
    }
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
    /// A remote server on the legacy HTTP+SSE transport (2024-11-05): an
    /// SSE stream at `url` that names the endpoint messages are POSTed to.
    Sse {
        url: url::Url,
        headers: BTreeMap<String, String>,
    },
}

impl UpstreamTransport {
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamTransport::Stdio { .. } => "stdio",
            UpstreamTransport::StreamableHttp { .. } => "streamable_http",
            UpstreamTransport::Sse { .. } => "sse",
        }
    }

    /// OpenTelemetry's `network.transport` for it.
    pub fn network_transport(&self) -> &'static str {
        match self {
            UpstreamTransport::Stdio { .. } => "pipe",
            UpstreamTransport::StreamableHttp { .. } | UpstreamTransport::Sse { .. } => "tcp",
        }
    }
}

impl ServerConfig {
    /// How the names clients see are made.
    pub fn naming(&self) -> crate::naming::Naming {
        crate::naming::Naming {
            separator: self.separator.clone(),
            fit_tool_names_to: self.fit_tool_names.then_some(self.tool_name_max_chars),
        }
    }
}

/// Defaults for the `[server]` table, documented in README.md.
pub mod defaults {
    use std::time::Duration;

    /// The longest duration any setting or `--timeout` takes: a year is
    /// past any useful timeout, and far inside what deadlines (now plus a
    /// duration) and sums of two durations can hold without overflowing.
    pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600); // humantime's "1year"
    pub const LISTEN: &str = "127.0.0.1:8080";
    pub const PATH: &str = "/mcp";
    pub const SSE_PATH: &str = "/sse";
    pub const SEPARATOR: &str = "__";
    /// Off: names are a contract scripts rely on; fitting changes some.
    pub const FIT_TOOL_NAMES: bool = false;
    pub const TOOL_NAME_MAX_CHARS: usize = crate::tool_name_rule::MAX_TOOL_NAME_CHARS;
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
    /// Long enough that a client between two steps of one task stays awake.
    pub const SESSION_HIBERNATE_AFTER: Duration = Duration::from_secs(60);
    /// Long enough for a typical tool call to finish; short enough that
    /// with the teardown after it (up to 21 s, README "Operating") it fits
    /// an orchestrator's kill timeout of 45 s (deploy/kubernetes sets that;
    /// Kubernetes' default of 30 s covers the usual case, not the worst).
    pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
    /// Far longer than any client on a working network needs to send a
    /// request, and longer than the 90 s reqwest's and Go's clients keep
    /// an idle connection: a client's request is never written on a
    /// connection just as the gateway closes it for idleness (hyper's one
    /// deadline covers both the idle wait and the head).
    pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(120);

    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// `npx` fetching a package on first start can take this long.
    pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
    /// The TypeScript SDK's default request timeout, which clients expect.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
    /// A long task reporting progress may run this long.
    pub const REQUEST_CEILING: Duration = Duration::from_secs(60 * 60);

    pub const RESTART_BACKOFF: Duration = Duration::from_millis(250);
    pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
    pub const CRASH_LOOP_RESTARTS: u32 = 5;
    /// Slow enough to cost nothing, soon enough that a server that was
    /// redeployed a few times in a row is back within a minute.
    pub const DOWN_RETRY: Duration = Duration::from_secs(60);

    pub const MAX_SESSIONS: usize = 10_000;
    pub const MAX_CONCURRENT_REQUESTS: usize = 64;
    /// Tool arguments can carry files (base64 images, documents); 4 MiB is
    /// also rmcp's own default.
    pub const MAX_BODY_SIZE: usize = 4 * 1024 * 1024;
    /// Each may be a child process.
    pub const MAX_UPSTREAM_SESSIONS: usize = 100;

    pub const LOG_LEVEL: &str = "info,rmcp=warn";
    pub const SERVICE_NAME: &str = "junction";
}

/// The embedded default config, for unit tests: loaded inside a figment
/// `Jail`, which one test holds at a time, so that the `JUNCTION_*`
/// variables a test sets in its own jail (overrides it checks) are never
/// read as this config's (a parallel test saw two mounts more).
#[cfg(test)]
#[allow(clippy::result_large_err)] // figment's `Jail` closure returns its error type.
pub fn embedded_for_tests() -> Config {
    let mut loaded = None;
    figment::Jail::expect_with(|_| {
        loaded = Some(load(&ConfigSource::Embedded));
        Ok(())
    });
    loaded
        .expect("the jail ran")
        .expect("the embedded config is valid")
}

#[cfg(test)]
mod tests;
