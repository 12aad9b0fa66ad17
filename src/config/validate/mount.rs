//! One `[mounts.<name>]` entry: its transport, isolation, credentials,
//! forwarded headers and tool filter, every problem reported with its path.

use std::{collections::BTreeMap, path::PathBuf};

use super::bounds::resolve_mount_timeouts;
use crate::config::{
    problems::Problems,
    raw::{text_map, texts, Count, RawForwardHeaders, RawMount, Text},
    Isolation, MountConfig, UpstreamTransport,
};
use crate::naming::{MountName, Namespace};
use crate::tool_filter::ToolFilter;

/// Moves a user name and password out of an upstream `url` into the
/// mount's `Authorization` header (HTTP Basic, as reqwest would send them).
/// Left in the URL, reqwest sent its own Basic header beside the mount's
/// (or a client's forwarded) `Authorization`: two credentials, the server
/// picking one, and a tool call (sent another way) the other. As the
/// mount's own header, a client's forwarded one replaces it like any.
pub(super) fn credentials_into_header(
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

/// Whether a stdio mount's command line and environment can be given to
/// the operating system, each problem reported at its field: a NUL byte
/// ends a C string (the start failed "nul byte found in provided data",
/// naming no field, only when the mount first started), and a variable's
/// name cannot be empty or hold `=`.
fn can_be_spawned(
    path: &str,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    problems: &mut Problems,
) -> bool {
    const NUL: &str = "must not contain a NUL character (\\u0000)";
    let mut ok = true;
    let mut refuse = |field: String, why: &str| {
        problems.push(field, why);
        ok = false;
    };
    if command.contains('\0') {
        refuse(format!("{path}.command"), NUL);
    }
    for (index, arg) in args.iter().enumerate() {
        if arg.contains('\0') {
            refuse(format!("{path}.args.{index}"), NUL);
        }
    }
    for (name, value) in env {
        let field = format!("{path}.env.{name}");
        if name.is_empty() {
            refuse(field, "a variable's name must not be empty");
        } else if name.contains('=') || name.contains('\0') {
            refuse(
                field,
                "a variable's name must not contain `=` or a NUL character",
            );
        } else if value.contains('\0') {
            refuse(field, NUL);
        }
    }
    if cwd.is_some_and(|cwd| cwd.contains('\0')) {
        refuse(format!("{path}.cwd"), NUL);
    }
    ok
}

pub(super) fn resolve_mount(
    name: &str,
    raw: RawMount,
    problems: &mut Problems,
) -> Option<MountConfig> {
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
    let tools = resolve_tool_filter(
        &path,
        raw.include_tools.map(texts),
        raw.exclude_tools.map(texts),
        problems,
    );
    let forward_headers = raw.forward_headers.map(|forward| {
        let http = raw.url.is_some() && raw.command.is_none();
        let per_session = raw.isolation.as_deref() == Some("per_session");
        resolve_forward_headers(&path, forward, http, per_session, problems)
    });
    if raw.max_upstream_sessions == Some(Count(0)) {
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
            // One written but unreadable was reported as such: it is not
            // missing.
            let unreadable = ["command", "url"]
                .iter()
                .any(|key| problems.reported_at(&format!("{path}.{key}")));
            if !unreadable {
                problems.push(
                    &path,
                    "missing `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream)",
                );
            }
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
            let args = raw.args.map(texts).unwrap_or_default();
            let env = raw.env.map(text_map).unwrap_or_default();
            let cwd = raw.cwd.map(|Text(cwd)| cwd);
            ok &= can_be_spawned(&path, &command, &args, &env, cwd.as_deref(), problems);
            Some(UpstreamTransport::Stdio {
                command,
                args,
                env,
                cwd: cwd.map(PathBuf::from),
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
        max_upstream_sessions: raw.max_upstream_sessions.map(Count::usize),
        tools: tools?,
        forward_headers: forward_headers.unwrap_or(Some(BTreeMap::new()))?,
        // Set by `load` once substitution is known.
        command_as_written: None,
    })
}

/// Headers no mount may forward: the transport's own (a client's would
/// break the exchange or smuggle one), the hop-by-hop ones, the trace
/// context (the gateway sends its own), and the client's session with
/// the gateway, which means nothing upstream. `Accept-Encoding` is the
/// gateway's HTTP client's to say: it decodes only what it asks for. So
/// are all `Mcp-*` (the protocol's own) and `Proxy-*` ones: a client's
/// `Proxy-Authorization` would take the place of the gateway's own proxy
/// credentials.
pub(super) const NOT_FORWARDED: &[&str] = &[
    "accept",
    "accept-encoding",
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
pub(super) const NOT_FORWARDED_PREFIXES: &[&str] = &["mcp-", "proxy-"];

/// A mount's `forward_headers`, as upstream name → client name (lower
/// case). Only a `per_session` HTTP mount may have them: a shared upstream
/// session serves every client, and would carry the first one's
/// credentials for all of them.
pub(super) fn resolve_forward_headers(
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
            .map(|(index, name)| (format!("{key}.{index}"), name.0.clone(), name.0))
            .collect(),
        RawForwardHeaders::Renamed(table) => table
            .into_iter()
            .map(|(upstream, client)| (format!("{key}.{upstream}"), upstream, client.0))
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
pub(super) fn resolve_tool_filter(
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
