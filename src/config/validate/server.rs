//! The gateway-wide sections: `[server]`, `[admin]` and `[telemetry]`,
//! with the checks between them (reserved paths, the admin listener).

use std::net::SocketAddr;

use super::values::{duration, duration_or};
use crate::config::{
    defaults,
    problems::Problems,
    raw::{RawAdmin, RawServer, RawTelemetry},
    AdminConfig, ServerConfig, TelemetryConfig,
};
use crate::naming::Separator;
use crate::telemetry::LogFormat;

pub(super) fn resolve_telemetry(
    raw: RawTelemetry,
    problems: &mut Problems,
) -> Option<TelemetryConfig> {
    let before = problems.len();
    let log_format = match raw.log_format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            problems.push(
                "telemetry.log_format",
                format!("{other:?} is not a log format (use \"text\" or \"json\")"),
            );
            LogFormat::Text
        }
    };
    let log_level = raw
        .log_level
        .unwrap_or_else(|| defaults::LOG_LEVEL.to_owned());
    let problem = crate::telemetry::log_filter_problem(&log_level).or_else(|| {
        crate::telemetry::bare_word_not_a_level(&log_level).map(|word| {
            format!("{word:?} is not a level (trace, debug, info, warn, error, off); a module is enabled with {word}=LEVEL")
        })
    });
    if let Some(problem) = problem {
        problems.push(
            "telemetry.log_level",
            format!("{log_level:?} is not a log filter like \"info\" or \"info,junction=debug\": {problem}"),
        );
    }
    let otlp_endpoint = raw.otlp_endpoint.filter(|endpoint| !endpoint.is_empty());
    if let Some(endpoint) = &otlp_endpoint {
        match url::Url::parse(endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(url) => problems.push(
                "telemetry.otlp_endpoint",
                format!("scheme {:?} is not http or https", url.scheme()),
            ),
            Err(error) => problems.push("telemetry.otlp_endpoint", error.to_string()),
        }
    }
    let otlp_json = match raw.otlp_protocol.as_deref() {
        None | Some("http/protobuf") => false,
        Some("http/json") => true,
        Some(other) => {
            problems.push(
                "telemetry.otlp_protocol",
                format!("{other:?} is not supported (use \"http/protobuf\" or \"http/json\")"),
            );
            false
        }
    };
    if problems.len() != before {
        return None;
    }
    Some(TelemetryConfig {
        log_format,
        log_level,
        otlp_endpoint,
        otlp_json,
        service_name: raw
            .service_name
            .map_or_else(|| defaults::SERVICE_NAME.to_owned(), |name| name.0),
    })
}

/// A listen address: an IP address and a port. A host name
/// (`localhost:8080`) is refused with the addresses to write instead: a
/// name can resolve to several addresses, and the gateway binds one.
pub fn listen_address(text: &str, example_port: u16) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let with_port = text
        .rsplit_once(':')
        .filter(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    Err(match with_port {
        // `::1:8080`: the address's own colons need the brackets.
        Some((host, port)) if host.parse::<std::net::Ipv6Addr>().is_ok() => {
            format!("{text:?}: an IPv6 address takes brackets before its port: [{host}]:{port}")
        }
        Some((host, port)) if !host.chars().all(|c| c.is_ascii_digit() || c == '.') => format!(
            "{text:?} names a host; write an IP address and a port: 127.0.0.1:{port} for this machine alone, 0.0.0.0:{port} for every interface"
        ),
        _ => format!("{text:?} is not a socket address like 127.0.0.1:{example_port}"),
    })
}

pub(super) fn resolve_admin(raw: RawAdmin, problems: &mut Problems) -> Option<AdminConfig> {
    let listen = match raw.listen.filter(|listen| !listen.is_empty()) {
        None => None,
        Some(text) => match listen_address(&text, 9090) {
            Ok(listen) => Some(listen),
            Err(problem) => {
                problems.push("admin.listen", problem);
                return None;
            }
        },
    };
    Some(AdminConfig {
        enabled: raw.enabled.unwrap_or(true),
        listen,
    })
}

pub(super) fn resolve_server(raw: RawServer, problems: &mut Problems) -> Option<ServerConfig> {
    let before = problems.len();
    let listen_text = raw.listen.unwrap_or_else(|| defaults::LISTEN.to_owned());
    let listen = match listen_address(&listen_text, 8080) {
        Ok(listen) => Some(listen),
        Err(problem) => {
            problems.push("server.listen", problem);
            None
        }
    };
    let path = raw.path.unwrap_or_else(|| defaults::PATH.to_owned());
    if let Some(problem) = endpoint_path_problem(&path) {
        problems.push("server.path", format!("{path:?} {problem}"));
    }
    let separator = match Separator::new(raw.separator.as_deref().unwrap_or(defaults::SEPARATOR)) {
        Ok(separator) => Some(separator),
        Err(message) => {
            problems.push("server.separator", message);
            None
        }
    };
    let tool_name_max_chars = raw.tool_name_max_chars.map_or(
        defaults::TOOL_NAME_MAX_CHARS,
        crate::config::raw::Count::usize,
    );
    let limits =
        crate::tool_name_rule::MIN_FITTED_CHARS..=crate::tool_name_rule::MAX_SPEC_TOOL_NAME_CHARS;
    if !limits.contains(&tool_name_max_chars) {
        problems.push(
            "server.tool_name_max_chars",
            format!(
                "{tool_name_max_chars} is not between {} and {} (the spec's longest tool name)",
                limits.start(),
                limits.end()
            ),
        );
    }
    let allowed_hosts = match raw.allowed_hosts.map(crate::config::raw::texts) {
        None => defaults::ALLOWED_HOSTS.map(str::to_owned).to_vec(),
        Some(hosts) if hosts.is_empty() => {
            problems.push(
                "server.allowed_hosts",
                "must not be empty; use [\"*\"] to accept any Host header",
            );
            Vec::new()
        }
        // rmcp treats an empty list as "no check".
        Some(hosts) if hosts.iter().any(|host| host == "*") => Vec::new(),
        Some(hosts) => hosts,
    };
    let allowed_origins = match raw.allowed_origins {
        None => Some(defaults::ALLOWED_ORIGINS.map(str::to_owned).to_vec()),
        Some(origins) if origins.iter().any(|origin| origin == "*") => None,
        Some(origins) => {
            for (index, origin) in origins.iter().enumerate() {
                if has_a_port_and_any_port(origin) {
                    problems.push(
                        format!("server.allowed_origins.{index}"),
                        format!("{origin:?} has both a port and `:*` (any port); keep one"),
                    );
                } else if !is_origin_pattern(origin) {
                    problems.push(
                        format!("server.allowed_origins.{index}"),
                        format!(
                            "{origin:?} is not an origin like \"https://app.example.com\", \"http://localhost:*\" or \"null\""
                        ),
                    );
                }
            }
            Some(origins)
        }
    };
    let session_idle_timeout = duration_or(
        "server.session_idle_timeout",
        raw.session_idle_timeout,
        defaults::SESSION_IDLE_TIMEOUT,
        problems,
    );
    let session_hibernate_after = match raw.session_hibernate_after.as_deref() {
        Some("off") => Some(None),
        Some(text) => duration("server.session_hibernate_after", text, problems).map(Some),
        None => Some(Some(defaults::SESSION_HIBERNATE_AFTER)),
    };
    let shutdown_grace = duration_or(
        "server.shutdown_grace",
        raw.shutdown_grace,
        defaults::SHUTDOWN_GRACE,
        problems,
    );
    let request_read_timeout = duration_or(
        "server.request_read_timeout",
        raw.request_read_timeout,
        defaults::REQUEST_READ_TIMEOUT,
        problems,
    );
    // Paths are compared without a trailing `/`: `[endpoints]` are served
    // under both as `{path}/NAME`, which would be one route for both.
    let same_path = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let sse_path = match raw.sse_path {
        // An endpoint at `/sse` keeps it (it may be the older transport's
        // place in a config written before this one was served).
        None => (!same_path(&path, defaults::SSE_PATH)).then(|| defaults::SSE_PATH.to_owned()),
        Some(off) if off.is_empty() => None,
        Some(sse_path) => {
            if let Some(problem) = endpoint_path_problem(&sse_path) {
                problems.push("server.sse_path", format!("{sse_path:?} {problem}"));
            } else if same_path(&sse_path, &path) {
                problems.push(
                    "server.sse_path",
                    format!("{sse_path:?} is server.path{}; give the older transport a path of its own, or \"\" to serve none", if sse_path == path { "" } else { " but for a trailing `/`" }),
                );
            }
            Some(sse_path)
        }
    };
    if problems.len() != before {
        return None;
    }
    Some(ServerConfig {
        listen: listen?,
        path,
        sse_path,
        separator: separator?,
        fit_tool_names: raw.fit_tool_names.unwrap_or(defaults::FIT_TOOL_NAMES),
        tool_name_max_chars,
        allowed_hosts,
        allowed_origins,
        session_idle_timeout: session_idle_timeout?,
        session_hibernate_after: session_hibernate_after?,
        shutdown_grace: shutdown_grace?,
        request_read_timeout: request_read_timeout?,
    })
}

/// The paths the gateway serves besides the MCP endpoint (`/metrics` and
/// the status pages are reserved even when `[admin]` is off or listens
/// elsewhere, so turning it on never takes the endpoint's place).
pub(super) const RESERVED_PATHS: [&str; 6] = [
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/status",
    "/status.json",
];

/// What is wrong with `path` as the MCP endpoint's path, if anything. It
/// is one literal route: the router would read `{x}` as a capture (any
/// segment), refuse `:x` and `*x` segments at start-up, and `?` or `#`
/// can never be part of a request's path.
pub(super) fn endpoint_path_problem(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        return Some("must start with `/`");
    }
    if path.contains(|c: char| c.is_whitespace() || matches!(c, '{' | '}' | '?' | '#')) {
        return Some("must not contain whitespace, `{`, `}`, `?` or `#`");
    }
    if path
        .split('/')
        .any(|segment| segment.starts_with(':') || segment.starts_with('*'))
    {
        return Some("must not have a segment starting with `:` or `*`");
    }
    if RESERVED_PATHS.contains(&path) {
        return Some("is reserved; use a path such as /mcp");
    }
    None
}

/// `null`, or `http(s)://host` with an optional `:port` or `:*`, no path.
pub(super) fn is_origin_pattern(origin: &str) -> bool {
    if origin == "null" {
        return true;
    }
    let base = origin.strip_suffix(":*").unwrap_or(origin);
    match url::Url::parse(base) {
        Ok(url) => {
            matches!(url.scheme(), "http" | "https")
                && url.host().is_some()
                && url.path() == "/"
                && !base.ends_with('/')
                && url.query().is_none()
                && url.username().is_empty()
        }
        Err(_) => false,
    }
}

/// Whether an origin pattern has both a port and `:*` ("any port"), as in
/// `https://h:8443:*`: rmcp ignores such an entry, where the edge's own
/// check would read it as "any port". The port is read as rmcp reads it
/// (`http`'s URI parser, which keeps a scheme's default port, unlike
/// `url`'s).
fn has_a_port_and_any_port(origin: &str) -> bool {
    origin.strip_suffix(":*").is_some_and(|base| {
        axum::http::Uri::try_from(base)
            .ok()
            .and_then(|uri| uri.authority()?.port_u16())
            .is_some()
    })
}

/// Why `admin` cannot listen beside a gateway listening on `listen`, if
/// it cannot: on the same address (port 0 picks two free ports).
pub(super) fn admin_listen_problem(
    listen: SocketAddr,
    admin: &AdminConfig,
) -> Option<&'static str> {
    let shared = admin
        .listen
        .is_some_and(|admin| admin == listen && admin.port() != 0);
    (admin.enabled && shared).then_some(
        "is server.listen too: give the admin endpoints an address of their own, or leave admin.listen out to serve them on server.listen",
    )
}
