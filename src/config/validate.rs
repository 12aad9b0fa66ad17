//! Raw config → resolved [`Config`], collecting every problem with its path.
//!
//! Each section is deserialized on its own (with `serde_path_to_error`, so a
//! type error names its field) and then checked; a broken mount never hides
//! the problems of the next one.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{
    defaults,
    problems::{without_the_value, Problems},
    raw::{
        text_map, texts, RawAdmin, RawForwardHeaders, RawLimits, RawMount, RawMountTimeouts,
        RawServer, RawSize, RawSupervision, RawTelemetry, RawTimeouts, Text,
    },
    AdminConfig, Config, Isolation, Limits, MountConfig, MountTimeouts, ServerConfig, Supervision,
    TelemetryConfig, Timeouts, UpstreamTransport,
};
use crate::naming::{MountName, Namespace, Separator};
use crate::telemetry::LogFormat;
use crate::tool_filter::ToolFilter;

/// Turns the merged, expanded tree into a [`Config`]. `problems` may already
/// hold problems found earlier (expansion); they are reported with the rest.
pub fn resolve(
    tree: Value,
    mount_order: &[String],
    mut problems: Problems,
) -> Result<Config, Problems> {
    let mut root = match tree {
        Value::Object(root) => root,
        Value::Null => Default::default(),
        other => {
            problems.push(
                "",
                format!(
                    "expected a table at the top level, found {}",
                    kind_of(&other)
                ),
            );
            return Err(problems);
        }
    };
    // A section left empty in YAML (`limits:` with every key commented
    // out) is null: the same as no section.
    let mut section = |name: &str| root.remove(name).filter(|value| !value.is_null());
    let server_value = section("server");
    let mounts_value = section("mounts");
    let telemetry_value = section("telemetry");
    let admin_value = section("admin");
    let timeouts_value = section("timeouts");
    let supervision_value = section("supervision");
    let limits_value = section("limits");
    for key in root.keys() {
        problems.push(
            key.as_str(),
            "unknown key (expected `server`, `mounts`, `timeouts`, `supervision`, `limits`, `telemetry` or `admin`)",
        );
    }
    let raw_timeouts: RawTimeouts = match timeouts_value {
        None => RawTimeouts::default(),
        Some(value) => parse_section("timeouts", value, &mut problems).unwrap_or_default(),
    };
    let (timeouts, timeouts_to_check_against) = resolve_timeouts(raw_timeouts, &mut problems);
    let raw_supervision: RawSupervision = match supervision_value {
        None => RawSupervision::default(),
        Some(value) => parse_section("supervision", value, &mut problems).unwrap_or_default(),
    };
    let supervision = resolve_supervision(raw_supervision, &mut problems);
    let raw_limits: RawLimits = match limits_value {
        None => RawLimits::default(),
        Some(value) => parse_section("limits", value, &mut problems).unwrap_or_default(),
    };
    let limits = resolve_limits(raw_limits, &mut problems);
    let raw_telemetry: RawTelemetry = match telemetry_value {
        None => RawTelemetry::default(),
        Some(value) => parse_section("telemetry", value, &mut problems).unwrap_or_default(),
    };
    let telemetry = resolve_telemetry(raw_telemetry, &mut problems);
    let raw_admin: RawAdmin = match admin_value {
        None => RawAdmin::default(),
        Some(value) => parse_section("admin", value, &mut problems).unwrap_or_default(),
    };
    let admin = resolve_admin(raw_admin, &mut problems);

    let raw_server: RawServer = match server_value {
        None => RawServer::default(),
        Some(value) => parse_section("server", value, &mut problems).unwrap_or_default(),
    };
    // Namespaces are checked with the separator even when another
    // `[server]` field is wrong, so that that problem hides no other.
    let separator = raw_server
        .separator
        .as_deref()
        .map_or_else(|| Separator::new(defaults::SEPARATOR), Separator::new)
        .ok();
    let server = resolve_server(raw_server, &mut problems);
    if let (Some(server), Some(admin)) = (&server, &admin) {
        if let Some(problem) = admin_listen_problem(server.listen, admin) {
            problems.push("admin.listen", problem);
        }
    }

    let mut raw_mounts = match mounts_value {
        None => serde_json::Map::new(),
        Some(Value::Object(mounts)) => mounts,
        Some(other) => {
            problems.push(
                "mounts",
                format!("expected a table of mounts, found {}", kind_of(&other)),
            );
            serde_json::Map::new()
        }
    };
    // Document order first; mounts added only through env overrides follow.
    let mut ordered: Vec<(String, Value)> = Vec::new();
    for name in mount_order {
        if let Some(value) = raw_mounts.remove(name) {
            ordered.push((name.clone(), value));
        }
    }
    let mut remaining: Vec<(String, Value)> = raw_mounts.into_iter().collect();
    remaining.sort_by(|a, b| a.0.cmp(&b.0));
    ordered.extend(remaining);

    let mut mounts = Vec::new();
    // Every mount's namespace, also of a mount with other problems: a
    // collision is reported with them, not after they are fixed.
    let mut namespaces = Vec::new();
    for (name, value) in ordered {
        let path = format!("mounts.{name}");
        let Some(raw) = parse_section::<RawMount>(&path, value, &mut problems) else {
            continue;
        };
        namespaces.extend(namespace_of(&name, raw.namespace.as_deref()));
        if let Some(mount) = resolve_mount(&name, raw, &mut problems) {
            mounts.push(mount);
        }
    }
    if let Some(timeouts) = &timeouts_to_check_against {
        for mount in &mounts {
            check_ceiling(
                &format!("mounts.{}.timeouts", mount.name),
                &timeouts.for_mount(&mount.timeouts),
                &mount.timeouts,
                &mut problems,
            );
        }
    }

    if let Some(separator) = &separator {
        let named = namespaces.iter().map(|(name, namespace)| (name, namespace));
        check_namespaces(named, separator, &mut problems);
    }

    match (server, telemetry, admin, timeouts, supervision, limits) {
        (
            Some(server),
            Some(telemetry),
            Some(admin),
            Some(timeouts),
            Some(supervision),
            Some(limits),
        ) if problems.is_empty() => Ok(Config {
            server,
            telemetry,
            admin,
            timeouts,
            supervision,
            limits,
            mounts,
            as_written: Default::default(),
            overridden: Default::default(),
        }),
        _ => Err(problems),
    }
}

/// What kind of value `value` is, for a problem about it: never the value
/// itself, which `${VAR}` may have filled with a secret.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// Reads a table (every field optional) into `T`. serde stops at a
/// table's first bad field, so each field is read on its own first: every
/// bad field is reported, and the table is read without them, so that
/// the checks after this one see what is good and report their own
/// problems too.
fn parse_section<T: DeserializeOwned>(
    path: &str,
    value: Value,
    problems: &mut Problems,
) -> Option<T> {
    let value = match value {
        Value::Object(fields) => {
            let mut good = serde_json::Map::new();
            for (key, field) in fields {
                let alone = Value::Object(serde_json::Map::from_iter([(key.clone(), field)]));
                match serde_path_to_error::deserialize::<_, T>(alone.clone()) {
                    Ok(_) => good.extend(alone.as_object().cloned().unwrap_or_default()),
                    Err(error) => {
                        let before = problems.len();
                        let field = alone[key.as_str()].clone();
                        let within_field = |inner: Value| json_object(&key, inner);
                        report_each_member::<T>(
                            path,
                            &within_field,
                            &field,
                            MEMBER_DEPTH,
                            problems,
                        );
                        if problems.len() == before {
                            push_deserialize_problem(path, error, problems);
                        }
                    }
                }
            }
            Value::Object(good)
        }
        other => other,
    };
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            push_deserialize_problem(path, error, problems);
            None
        }
    }
}

/// How deep [`report_each_member`] looks into a bad field: far enough for
/// `mounts.NAME.timeouts.tools.TOOL`.
const MEMBER_DEPTH: usize = 3;

/// `{key: inner}`.
fn json_object(key: &str, inner: Value) -> Value {
    Value::Object(serde_json::Map::from_iter([(key.to_owned(), inner)]))
}

/// serde stops at a field's first bad member too (`env = { A = [], B = {} }`
/// reports only `A`): reads each member of the bad field `value` on its own,
/// inside the document `wrap` makes of it, and reports every bad one
/// (looking into members that are tables or lists themselves, `depth`
/// levels down). Reports nothing if no member alone is bad: the field is
/// then wrong as a whole, and the caller reports that.
fn report_each_member<T: DeserializeOwned>(
    path: &str,
    wrap: &dyn Fn(Value) -> Value,
    value: &Value,
    depth: usize,
    problems: &mut Problems,
) {
    if depth == 0 {
        return;
    }
    type Wrap<'a> = Box<dyn Fn(Value) -> Value + 'a>;
    let members: Vec<(Value, Wrap<'_>)> = match value {
        Value::Object(map) => map
            .iter()
            .map(|(key, member)| {
                let rewrap: Wrap<'_> = Box::new(move |inner| wrap(json_object(key, inner)));
                (member.clone(), rewrap)
            })
            .collect(),
        // Each item alone, in a list of one (its index is put back below).
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let rewrap: Wrap<'_> = Box::new(move |inner| wrap(Value::Array(vec![inner])));
                (item.clone(), rewrap)
            })
            .collect(),
        _ => return,
    };
    let is_list = value.is_array();
    for (index, (member, rewrap)) in members.into_iter().enumerate() {
        let Err(error) = serde_path_to_error::deserialize::<_, T>(rewrap(member.clone())) else {
            continue;
        };
        // Looked into only if its kind fits (an empty one reads): else
        // the member itself is what is wrong (a list where text goes).
        let empty = match &member {
            Value::Object(_) => Some(Value::Object(serde_json::Map::new())),
            Value::Array(_) => Some(Value::Array(Vec::new())),
            _ => None,
        };
        let fits = empty
            .is_some_and(|empty| serde_path_to_error::deserialize::<_, T>(rewrap(empty)).is_ok());
        let before = problems.len();
        if fits {
            report_each_member::<T>(path, &*rewrap, &member, depth - 1, problems);
        }
        if problems.len() == before {
            // The member was read at index 0 of a list of one.
            let inner = field_path(error.path(), is_list.then_some(index));
            problems.push(
                format!("{path}.{inner}"),
                without_the_value(&error.into_inner().to_string()),
            );
        }
    }
}

/// `path` written as every problem's path is (`mounts.m.args.2`, the
/// way figment, `${VAR}` expansion and environment overrides name a
/// field), not serde_path_to_error's `args[2]`: one way to read them, and
/// a problem inside a list set by a variable is told that variable.
/// `list_index`: the index the last list level really had, for a member
/// read alone in a list of one (the config's lists hold text, so a list
/// is always the last level looked into).
fn field_path(path: &serde_path_to_error::Path, list_index: Option<usize>) -> String {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let last_list = segments
        .iter()
        .rposition(|segment| matches!(segment, Segment::Seq { .. }));
    segments
        .iter()
        .enumerate()
        .map(|(at, segment)| match segment {
            Segment::Seq { index } => match list_index {
                Some(real) if Some(at) == last_list => real.to_string(),
                _ => index.to_string(),
            },
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn push_deserialize_problem(
    path: &str,
    error: serde_path_to_error::Error<serde_json::Error>,
    problems: &mut Problems,
) {
    let inner = field_path(error.path(), None);
    let full = if inner.is_empty() {
        path.to_owned()
    } else {
        format!("{path}.{inner}")
    };
    problems.push(full, without_the_value(&error.into_inner().to_string()));
}

fn resolve_telemetry(raw: RawTelemetry, problems: &mut Problems) -> Option<TelemetryConfig> {
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
            .unwrap_or_else(|| defaults::SERVICE_NAME.to_owned()),
    })
}

fn resolve_admin(raw: RawAdmin, problems: &mut Problems) -> Option<AdminConfig> {
    let listen = match raw.listen.filter(|listen| !listen.is_empty()) {
        None => None,
        Some(text) => match text.parse::<SocketAddr>() {
            Ok(listen) => Some(listen),
            Err(_) => {
                problems.push(
                    "admin.listen",
                    format!("{text:?} is not a socket address like 127.0.0.1:9090"),
                );
                return None;
            }
        },
    };
    Some(AdminConfig {
        enabled: raw.enabled.unwrap_or(true),
        listen,
    })
}

fn resolve_server(raw: RawServer, problems: &mut Problems) -> Option<ServerConfig> {
    let before = problems.len();
    let listen_text = raw.listen.unwrap_or_else(|| defaults::LISTEN.to_owned());
    let listen = match listen_text.parse::<SocketAddr>() {
        Ok(listen) => Some(listen),
        Err(_) => {
            problems.push(
                "server.listen",
                format!("{listen_text:?} is not a socket address like 127.0.0.1:8080"),
            );
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
    let allowed_hosts = match raw.allowed_hosts {
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
                if !is_origin_pattern(origin) {
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
    let sse_path = match raw.sse_path {
        // An endpoint at `/sse` keeps it (it may be the older transport's
        // place in a config written before this one was served).
        None => (path != defaults::SSE_PATH).then(|| defaults::SSE_PATH.to_owned()),
        Some(off) if off.is_empty() => None,
        Some(sse_path) => {
            if let Some(problem) = endpoint_path_problem(&sse_path) {
                problems.push("server.sse_path", format!("{sse_path:?} {problem}"));
            } else if sse_path == path {
                problems.push(
                    "server.sse_path",
                    format!("{sse_path:?} is server.path; give the older transport a path of its own, or \"\" to serve none"),
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
const RESERVED_PATHS: [&str; 6] = [
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
fn endpoint_path_problem(path: &str) -> Option<&'static str> {
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

/// A positive duration such as `"30s"` or `"500ms"`, at most
/// [`defaults::MAX_DURATION`], or `None` (reported).
fn duration(path: &str, text: &str, problems: &mut Problems) -> Option<Duration> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => {
            problems.push(path, "must be longer than zero");
            None
        }
        Ok(duration) if duration > defaults::MAX_DURATION => {
            problems.push(
                path,
                format!(
                    "{text:?} is longer than the longest duration taken ({})",
                    humantime::format_duration(defaults::MAX_DURATION)
                ),
            );
            None
        }
        Ok(duration) => Some(duration),
        Err(error) => {
            problems.push(
                path,
                format!("{text:?} is not a duration like \"30m\", \"90s\" or \"500ms\": {error}"),
            );
            None
        }
    }
}

/// [`duration`] for an optional field with a default.
fn duration_or(
    path: &str,
    text: Option<String>,
    default: Duration,
    problems: &mut Problems,
) -> Option<Duration> {
    match text {
        None => Some(default),
        Some(text) => duration(path, &text, problems),
    }
}

/// [`duration`] for an optional override (no default).
fn optional_duration(
    path: &str,
    text: Option<String>,
    problems: &mut Problems,
    ok: &mut bool,
) -> Option<Duration> {
    let text = text?;
    let parsed = duration(path, &text, problems);
    *ok &= parsed.is_some();
    parsed
}

/// `[timeouts]`, if valid; and, for checking the mounts' own against, the
/// same with each invalid value taken as its default, if its
/// `request_ceiling` is valid (a bad `connect` must not hide that a mount's
/// `request` is past the ceiling: every problem is reported at once).
fn resolve_timeouts(
    raw: RawTimeouts,
    problems: &mut Problems,
) -> (Option<Timeouts>, Option<Timeouts>) {
    let connect = duration_or(
        "timeouts.connect",
        raw.connect,
        defaults::CONNECT_TIMEOUT,
        problems,
    );
    let initialize = duration_or(
        "timeouts.initialize",
        raw.initialize,
        defaults::INITIALIZE_TIMEOUT,
        problems,
    );
    let request = duration_or(
        "timeouts.request",
        raw.request,
        defaults::REQUEST_TIMEOUT,
        problems,
    );
    let request_ceiling = duration_or(
        "timeouts.request_ceiling",
        raw.request_ceiling,
        defaults::REQUEST_CEILING,
        problems,
    );
    let to_check_against = request_ceiling.map(|request_ceiling| Timeouts {
        connect: connect.unwrap_or(defaults::CONNECT_TIMEOUT),
        initialize: initialize.unwrap_or(defaults::INITIALIZE_TIMEOUT),
        request: request.unwrap_or(defaults::REQUEST_TIMEOUT),
        request_ceiling,
    });
    if let (Some(request), Some(ceiling)) = (request, request_ceiling) {
        if request > ceiling {
            problems.push(
                "timeouts.request",
                format!(
                    "is longer than request_ceiling ({})",
                    humantime::format_duration(ceiling)
                ),
            );
            return (None, to_check_against);
        }
    }
    let valid = (|| {
        Some(Timeouts {
            connect: connect?,
            initialize: initialize?,
            request: request?,
            request_ceiling: request_ceiling?,
        })
    })();
    (valid, to_check_against)
}

/// No request timeout of a mount (its own or a tool's) may exceed the
/// ceiling that applies to it.
fn check_ceiling(path: &str, timeouts: &Timeouts, mount: &MountTimeouts, problems: &mut Problems) {
    let ceiling = timeouts.request_ceiling;
    let too_long = |duration: &Duration| *duration > ceiling;
    let ceiling_text = humantime::format_duration(ceiling);
    if mount.request.as_ref().is_some_and(too_long) {
        problems.push(
            format!("{path}.request"),
            format!("is longer than request_ceiling ({ceiling_text})"),
        );
    }
    for (tool, duration) in &mount.tools {
        if too_long(duration) {
            problems.push(
                format!("{path}.tools.{tool}"),
                format!("is longer than request_ceiling ({ceiling_text})"),
            );
        }
    }
}

fn resolve_mount_timeouts(
    path: &str,
    raw: Option<RawMountTimeouts>,
    problems: &mut Problems,
    ok: &mut bool,
) -> MountTimeouts {
    let Some(raw) = raw else {
        return MountTimeouts::default();
    };
    let field = |name: &str| format!("{path}.timeouts.{name}");
    let mut tools = BTreeMap::new();
    for (tool, text) in raw.tools.unwrap_or_default() {
        if let Some(duration) =
            optional_duration(&field(&format!("tools.{tool}")), Some(text), problems, ok)
        {
            tools.insert(tool, duration);
        }
    }
    MountTimeouts {
        connect: optional_duration(&field("connect"), raw.connect, problems, ok),
        initialize: optional_duration(&field("initialize"), raw.initialize, problems, ok),
        request: optional_duration(&field("request"), raw.request, problems, ok),
        request_ceiling: optional_duration(
            &field("request_ceiling"),
            raw.request_ceiling,
            problems,
            ok,
        ),
        tools,
    }
}

fn resolve_supervision(raw: RawSupervision, problems: &mut Problems) -> Option<Supervision> {
    let restart_backoff = duration_or(
        "supervision.restart_backoff",
        raw.restart_backoff,
        defaults::RESTART_BACKOFF,
        problems,
    );
    let restart_backoff_max = duration_or(
        "supervision.restart_backoff_max",
        raw.restart_backoff_max,
        defaults::RESTART_BACKOFF_MAX,
        problems,
    );
    let down_retry = duration_or(
        "supervision.down_retry",
        raw.down_retry,
        defaults::DOWN_RETRY,
        problems,
    );
    let crash_loop_restarts = raw
        .crash_loop_restarts
        .unwrap_or(defaults::CRASH_LOOP_RESTARTS);
    let mut ok = true;
    if crash_loop_restarts == 0 {
        problems.push("supervision.crash_loop_restarts", "must be at least 1");
        ok = false;
    }
    if let (Some(first), Some(max)) = (restart_backoff, restart_backoff_max) {
        if first > max {
            problems.push(
                "supervision.restart_backoff",
                format!(
                    "is longer than restart_backoff_max ({})",
                    humantime::format_duration(max)
                ),
            );
            ok = false;
        }
    }
    let supervision = Supervision {
        restart_backoff: restart_backoff?,
        restart_backoff_max: restart_backoff_max?,
        crash_loop_restarts,
        down_retry: down_retry?,
    };
    ok.then_some(supervision)
}

fn resolve_limits(raw: RawLimits, problems: &mut Problems) -> Option<Limits> {
    let mut ok = true;
    let mut count = |name: &str, value: Option<usize>, default: usize| match value {
        Some(0) => {
            problems.push(format!("limits.{name}"), "must be at least 1");
            ok = false;
            default
        }
        Some(value) => value,
        None => default,
    };
    let max_sessions = count("max_sessions", raw.max_sessions, defaults::MAX_SESSIONS);
    let max_concurrent_requests = count(
        "max_concurrent_requests",
        raw.max_concurrent_requests,
        defaults::MAX_CONCURRENT_REQUESTS,
    );
    let max_upstream_sessions = count(
        "max_upstream_sessions",
        raw.max_upstream_sessions,
        defaults::MAX_UPSTREAM_SESSIONS,
    );
    let max_body_size = match raw.max_body_size {
        None => Some(defaults::MAX_BODY_SIZE),
        Some(size) => byte_size("limits.max_body_size", size, problems),
    };
    let limits = Limits {
        max_sessions,
        max_concurrent_requests,
        max_body_size: max_body_size?,
        max_upstream_sessions,
    };
    ok.then_some(limits)
}

/// Bytes, from a number or a string such as `"512KiB"`, `"4MiB"`, `"1GiB"`
/// (`KB`/`MB`/`GB` mean the same powers of 1024: nobody means 10^6 here).
fn byte_size(path: &str, raw: RawSize, problems: &mut Problems) -> Option<usize> {
    let bytes = match raw {
        RawSize::Bytes(bytes) => Some(bytes),
        RawSize::Text(text) => {
            let trimmed = text.trim();
            let split = trimmed
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(trimmed.len());
            let (number, unit) = trimmed.split_at(split);
            let multiplier: Option<u64> = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => Some(1),
                "k" | "kb" | "kib" => Some(1 << 10),
                "m" | "mb" | "mib" => Some(1 << 20),
                "g" | "gb" | "gib" => Some(1 << 30),
                _ => None,
            };
            match (number.parse::<u64>(), multiplier) {
                (Ok(number), Some(multiplier)) => number.checked_mul(multiplier),
                _ => {
                    problems.push(
                        path,
                        format!("{text:?} is not a size like 4194304, \"512KiB\" or \"4MiB\""),
                    );
                    return None;
                }
            }
        }
    };
    match bytes.and_then(|bytes| usize::try_from(bytes).ok()) {
        Some(0) => {
            problems.push(path, "must be at least 1 byte");
            None
        }
        Some(bytes) => Some(bytes),
        None => {
            problems.push(path, "is too large");
            None
        }
    }
}

/// `null`, or `http(s)://host` with an optional `:port` or `:*`, no path.
fn is_origin_pattern(origin: &str) -> bool {
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

/// Moves a user name and password out of an upstream `url` into the
/// mount's `Authorization` header (HTTP Basic, as reqwest would send them).
/// Left in the URL, reqwest sent its own Basic header beside the mount's
/// (or a client's forwarded) `Authorization`: two credentials, the server
/// picking one, and a tool call (sent another way) the other. As the
/// mount's own header, a client's forwarded one replaces it like any.
fn credentials_into_header(
    url: &mut url::Url,
    headers: &mut std::collections::BTreeMap<String, String>,
) -> Result<(), &'static str> {
    if url.username().is_empty() && url.password().is_none() {
        return Ok(());
    }
    if headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        return Err("carries a user name and password while `headers` sets Authorization: give the credential one way");
    }
    use base64::Engine;
    let mut pair: Vec<u8> = percent_encoding::percent_decode_str(url.username()).collect();
    pair.push(b':');
    pair.extend(percent_encoding::percent_decode_str(
        url.password().unwrap_or_default(),
    ));
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    headers.insert("Authorization".to_owned(), format!("Basic {encoded}"));
    // Only fails for URLs that cannot have user info at all (not http).
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok(())
}

fn resolve_mount(name: &str, raw: RawMount, problems: &mut Problems) -> Option<MountConfig> {
    let path = format!("mounts.{name}");
    let mut ok = true;
    let mount_name = match MountName::new(name) {
        Ok(mount_name) => Some(mount_name),
        Err(message) => {
            problems.push(&path, message);
            ok = false;
            None
        }
    };
    let namespace = match (&raw.namespace, &mount_name) {
        (Some(namespace), _) => match Namespace::new(namespace) {
            Ok(namespace) => Some(namespace),
            Err(message) => {
                problems.push(format!("{path}.namespace"), message);
                ok = false;
                None
            }
        },
        (None, Some(mount_name)) => Some(Namespace::from_mount(mount_name)),
        (None, None) => None,
    };
    let timeouts = resolve_mount_timeouts(&path, raw.timeouts, problems, &mut ok);
    let tools = resolve_tool_filter(&path, raw.include_tools, raw.exclude_tools, problems);
    let forward_headers = raw.forward_headers.map(|forward| {
        let http = raw.url.is_some() && raw.command.is_none();
        let per_session = raw.isolation.as_deref() == Some("per_session");
        resolve_forward_headers(&path, forward, http, per_session, problems)
    });
    if raw.max_upstream_sessions == Some(0) {
        problems.push(
            format!("{path}.max_upstream_sessions"),
            "must be at least 1",
        );
        ok = false;
    }
    let isolation = match raw.isolation.as_deref() {
        None | Some("shared") => Isolation::Shared,
        Some("per_session") => Isolation::PerSession,
        Some(other) => {
            problems.push(
                format!("{path}.isolation"),
                format!("{other:?} is not an isolation mode (use \"shared\" or \"per_session\")"),
            );
            ok = false;
            Isolation::Shared
        }
    };

    // With `command` or `url` missing (or both there), the transport's
    // fit is not judged, but a value that is no transport is still one
    // problem more.
    if raw.command.is_some() == raw.url.is_some() {
        if let Some(other) = raw
            .transport
            .as_deref()
            .filter(|transport| !["stdio", "streamable_http", "sse"].contains(transport))
        {
            problems.push(
                format!("{path}.transport"),
                format!(
                    "{other:?} is not a transport (use \"stdio\", \"streamable_http\" or \"sse\")"
                ),
            );
        }
    }
    let transport = match (raw.command.map(|Text(command)| command), raw.url) {
        (Some(_), Some(_)) => {
            problems.push(
                &path,
                "set either `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream), not both",
            );
            None
        }
        (None, None) => {
            problems.push(
                &path,
                "missing `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream)",
            );
            None
        }
        (Some(command), None) => {
            if raw.headers.is_some() {
                problems.push(
                    format!("{path}.headers"),
                    "only HTTP upstreams (`url`) take headers",
                );
                ok = false;
            }
            match raw.transport.as_deref() {
                None | Some("stdio") => {}
                Some(_) => {
                    problems.push(
                        format!("{path}.transport"),
                        "a `command` upstream speaks stdio; \"streamable_http\" and \"sse\" need a `url`",
                    );
                    ok = false;
                }
            }
            if command.trim().is_empty() {
                problems.push(format!("{path}.command"), "must not be empty");
                ok = false;
            }
            Some(UpstreamTransport::Stdio {
                command,
                args: raw.args.map(texts).unwrap_or_default(),
                env: raw.env.map(text_map).unwrap_or_default(),
                cwd: raw.cwd.map(|Text(cwd)| PathBuf::from(cwd)),
            })
        }
        (None, Some(url_text)) => {
            for (field, present) in [
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("cwd", raw.cwd.is_some()),
            ] {
                if present {
                    problems.push(
                        format!("{path}.{field}"),
                        "only stdio upstreams (`command`) take this field",
                    );
                    ok = false;
                }
            }
            let legacy_sse = match raw.transport.as_deref() {
                None | Some("streamable_http") => Some(false),
                Some("sse") => Some(true),
                Some(other) => {
                    let hint = match other {
                        "stdio" => " (stdio upstreams are given by `command`)",
                        _ => "",
                    };
                    problems.push(
                        format!("{path}.transport"),
                        format!(
                            "{other:?} is not an HTTP transport (use \"streamable_http\" or \"sse\"){hint}"
                        ),
                    );
                    None
                }
            };
            let mut headers = raw.headers.map(text_map).unwrap_or_default();
            for (header, value) in &headers {
                if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    problems.push(
                        format!("{path}.headers.{header}"),
                        "is not a valid HTTP header name",
                    );
                    ok = false;
                }
                if reqwest::header::HeaderValue::from_str(value).is_err() {
                    // Never echo the value: it is likely a secret.
                    problems.push(
                        format!("{path}.headers.{header}"),
                        "value is not a valid HTTP header value",
                    );
                    ok = false;
                }
            }
            let url = match url::Url::parse(&url_text) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => Some(url),
                Ok(url) => {
                    problems.push(
                        format!("{path}.url"),
                        format!("scheme {:?} is not http or https", url.scheme()),
                    );
                    None
                }
                Err(error) => {
                    problems.push(format!("{path}.url"), error.to_string());
                    None
                }
            };
            let url =
                url.and_then(
                    |mut url| match credentials_into_header(&mut url, &mut headers) {
                        Ok(()) => Some(url),
                        Err(message) => {
                            problems.push(format!("{path}.url"), message);
                            None
                        }
                    },
                );
            match (url, legacy_sse) {
                (Some(url), Some(false)) => {
                    Some(UpstreamTransport::StreamableHttp { url, headers })
                }
                (Some(url), Some(true)) => Some(UpstreamTransport::Sse { url, headers }),
                _ => None,
            }
        }
    };
    if !ok {
        return None;
    }
    Some(MountConfig {
        name: mount_name?,
        namespace: namespace?,
        isolation,
        transport: transport?,
        timeouts,
        max_upstream_sessions: raw.max_upstream_sessions,
        tools: tools?,
        forward_headers: forward_headers.unwrap_or(Some(BTreeMap::new()))?,
        // Set by `load` once substitution is known.
        command_as_written: None,
    })
}

/// Headers no mount may forward: the transport's own (a client's would
/// break the exchange or smuggle one), the hop-by-hop ones, the trace
/// context (the gateway sends its own), and the client's session with
/// the gateway, which means nothing upstream. So are all `Mcp-*` (the
/// protocol's own) and `Proxy-*` ones: a client's `Proxy-Authorization`
/// would take the place of the gateway's own proxy credentials.
const NOT_FORWARDED: &[&str] = &[
    "accept",
    "connection",
    "content-encoding",
    "content-length",
    "content-type",
    "expect",
    "host",
    "keep-alive",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "proxy-connection",
    "te",
    "traceparent",
    "tracestate",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
const NOT_FORWARDED_PREFIXES: &[&str] = &["mcp-", "proxy-"];

/// A mount's `forward_headers`, as upstream name → client name (lower
/// case). Only a `per_session` HTTP mount may have them: a shared upstream
/// session serves every client, and would carry the first one's
/// credentials for all of them.
fn resolve_forward_headers(
    path: &str,
    raw: RawForwardHeaders,
    http: bool,
    per_session: bool,
    problems: &mut Problems,
) -> Option<BTreeMap<String, String>> {
    let key = format!("{path}.forward_headers");
    let mut ok = true;
    if !http {
        problems.push(&key, "only HTTP upstreams (`url`) take this field");
        ok = false;
    } else if !per_session {
        problems.push(
            &key,
            "only a `per_session` mount may forward a client's headers: a shared upstream session serves every client",
        );
        ok = false;
    }
    let pairs: Vec<(String, String, String)> = match raw {
        RawForwardHeaders::Same(names) => names
            .into_iter()
            .enumerate()
            .map(|(index, name)| (format!("{key}.{index}"), name.clone(), name))
            .collect(),
        RawForwardHeaders::Renamed(table) => table
            .into_iter()
            .map(|(upstream, client)| (format!("{key}.{upstream}"), upstream, client))
            .collect(),
    };
    let mut forwarded = BTreeMap::new();
    for (at, upstream, client) in pairs {
        let renamed = !upstream.eq_ignore_ascii_case(&client);
        for name in std::iter::once(&upstream).chain(renamed.then_some(&client)) {
            let lower = name.to_ascii_lowercase();
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(&at, format!("{name:?} is not a valid HTTP header name"));
                ok = false;
            } else if NOT_FORWARDED.contains(&lower.as_str())
                || NOT_FORWARDED_PREFIXES
                    .iter()
                    .any(|prefix| lower.starts_with(prefix))
            {
                problems.push(
                    &at,
                    format!("{name:?} is the gateway's own; it cannot be forwarded"),
                );
                ok = false;
            }
        }
        let upstream = upstream.to_ascii_lowercase();
        if forwarded.contains_key(&upstream) {
            problems.push(&at, format!("{upstream:?} is forwarded twice"));
            ok = false;
        }
        forwarded.insert(upstream, client.to_ascii_lowercase());
    }
    ok.then_some(forwarded)
}

/// A mount's `include_tools` and `exclude_tools`: each pattern must match
/// some name (an empty one matches none, surely a slip). An empty
/// `include_tools` is allowed: a mount kept for its prompts and resources.
fn resolve_tool_filter(
    path: &str,
    include: Option<Vec<String>>,
    exclude: Option<Vec<String>>,
    problems: &mut Problems,
) -> Option<ToolFilter> {
    let mut ok = true;
    for (key, patterns) in [("include_tools", &include), ("exclude_tools", &exclude)] {
        for (index, pattern) in patterns.iter().flatten().enumerate() {
            if pattern.is_empty() {
                problems.push(
                    format!("{path}.{key}.{index}"),
                    "an empty pattern matches no tool; write a tool name, or a pattern with * and ?",
                );
                ok = false;
            }
        }
    }
    ok.then(|| ToolFilter::new(include, exclude.unwrap_or_default()))
}

/// Two mounts may not share a non-empty namespace, and no `namespace +
/// separator` may be a prefix of another's, or a qualified name could be
/// split two ways.
///
/// Also for a reload, which keeps the running `[server]` (and so its
/// separator): the new mounts must be unambiguous with that one.
pub fn namespace_problems(mounts: &[MountConfig], separator: &Separator) -> Vec<super::Problem> {
    let mut problems = Problems::default();
    let named = mounts.iter().map(|mount| (&mount.name, &mount.namespace));
    check_namespaces(named, separator, &mut problems);
    problems.into_error("").problems
}

/// Mount `name`'s namespace (`written`, or the mount's name), if both are
/// valid (an invalid one is reported where the mount is resolved).
fn namespace_of(name: &str, written: Option<&str>) -> Option<(MountName, Namespace)> {
    let mount_name = MountName::new(name).ok()?;
    let namespace = match written {
        Some(written) => Namespace::new(written).ok()?,
        None => Namespace::from_mount(&mount_name),
    };
    Some((mount_name, namespace))
}

fn check_namespaces<'a>(
    mounts: impl Iterator<Item = (&'a MountName, &'a Namespace)>,
    separator: &Separator,
    problems: &mut Problems,
) {
    let mut seen: BTreeMap<&str, &MountName> = BTreeMap::new();
    for (name, namespace) in mounts {
        if namespace.is_pass_through() {
            continue;
        }
        if let Some(first) = seen.get(namespace.as_str()) {
            problems.push(
                format!("mounts.{name}.namespace"),
                format!(
                    "namespace {:?} is already used by mount {first}",
                    namespace.as_str()
                ),
            );
            continue;
        }
        seen.insert(namespace.as_str(), name);
    }
    for (a, mount_a) in &seen {
        for (b, mount_b) in &seen {
            let prefix = format!("{a}{}", separator.as_str());
            if a != b && format!("{b}{}", separator.as_str()).starts_with(&prefix) {
                problems.push(
                    format!("mounts.{mount_b}.namespace"),
                    format!(
                        "namespace {b:?} followed by separator {:?} starts with mount {mount_a}'s namespace {a:?} and the separator, so names would be ambiguous",
                        separator.as_str()
                    ),
                );
            }
        }
    }
}

/// Why `admin` cannot listen beside a gateway listening on `listen`, if
/// it cannot: on the same address (port 0 picks two free ports).
fn admin_listen_problem(listen: SocketAddr, admin: &AdminConfig) -> Option<&'static str> {
    let shared = admin
        .listen
        .is_some_and(|admin| admin == listen && admin.port() != 0);
    (admin.enabled && shared).then_some(
        "is server.listen too: give the admin endpoints an address of their own, or leave admin.listen out to serve them on server.listen",
    )
}
