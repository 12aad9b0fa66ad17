//! The `Host` and `Origin` checks (DNS-rebinding protection), made before
//! anything else on the gateway's listener answers.
//!
//! rmcp refuses an MCP request whose `Host` is not in
//! `server.allowed_hosts` (a page on `evil.example`, its name re-pointed at
//! 127.0.0.1, would otherwise be same-origin with the gateway) or whose
//! `Origin` is not in `server.allowed_origins`, but only once the request
//! reaches its service: the gateway's own layers in front of it (the body
//! check, the session limit, the drain, unknown sessions) would answer
//! such a request first, with their 400, 413, 503 or 404, where the spec
//! wants 403. So the MCP endpoint gets these checks as its outermost
//! layer. `/status`, `/status.json` and `/metrics` sit on the same
//! listener and tell mount names, upstream hosts and their last errors,
//! so they get the `Host` check too; rmcp's own is private to its
//! service. Entries match as rmcp's do: a host `host` any port, `host:port`
//! that port, an empty list (`["*"]`) anything; an origin
//! `scheme://host:port` that port (an origin without one has its scheme's
//! default), `:*` any port, no port any port, `null` the opaque origin.
//! `/healthz` and `/readyz` answer any Host (probes call them by the pod's
//! address), but `/readyz` names its mounts and their errors only to an
//! allowed one.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{header, StatusCode, Uri},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// The allow-lists, as validated (`config::Server::allowed_hosts` and
/// `allowed_origins`; `None`: no `Origin` check).
#[derive(Clone)]
pub struct Allowed {
    pub hosts: AllowedHosts,
    pub origins: Option<Arc<[String]>>,
}

/// The `Host` allow-list, each entry taken apart once (every request is
/// checked against it); empty: any host.
#[derive(Clone)]
pub struct AllowedHosts(Arc<[(String, Option<u16>)]>);

impl AllowedHosts {
    pub fn new(entries: &[String]) -> Self {
        let parsed = entries.iter().map(|entry| {
            let entry = entry.trim();
            match entry.parse::<axum::http::uri::Authority>() {
                Ok(authority) => (normalize(authority.host()), authority.port_u16()),
                Err(_) => (normalize(entry), None),
            }
        });
        Self(parsed.collect())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `host` (as sent, any case, IPv6 in brackets) on `port` is
    /// allowed.
    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.0.iter().any(|(allowed, allowed_port)| {
            allowed.eq_ignore_ascii_case(host)
                && allowed_port.is_none_or(|allowed_port| port == Some(allowed_port))
        })
    }
}

/// Refuses (403) a request whose `Host` (or HTTP/2 `:authority`) is not
/// allowed, (400) one without a readable one, and (403) one whose `Origin`
/// is present and not allowed.
pub async fn require_allowed_host(
    State(allowed): State<Allowed>,
    request: Request,
    next: Next,
) -> Response {
    match refusal(&allowed, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The answer to `request` if its `Host` or `Origin` is not allowed (as
/// [`require_allowed_host`] says), for a layer that has more to do. Given
/// before any body is read, it ends the connection
/// ([`super::json_guard::closing_after`]).
pub fn refusal(allowed: &Allowed, request: &Request) -> Option<Response> {
    refusal_of(allowed, request).map(super::json_guard::closing_after)
}

fn refusal_of(allowed: &Allowed, request: &Request) -> Option<Response> {
    if !allowed.hosts.is_empty() {
        let Some(authority) = request_authority(request.uri(), request.headers()) else {
            return Some(
                (
                    StatusCode::BAD_REQUEST,
                    "Bad Request: missing or invalid Host header",
                )
                    .into_response(),
            );
        };
        if !allowed.hosts.allows(authority.host(), authority.port_u16()) {
            let host = authority.host();
            tracing::warn!(%host, "rejected request with disallowed Host header (possible DNS rebinding attempt)");
            crate::telemetry::metrics().count_refused(crate::telemetry::metrics::Refusal::Host);
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden: Host header is not allowed",
                )
                    .into_response(),
            );
        }
    }
    if let (Some(origins), Some(origin)) = (&allowed.origins, request.headers().get(header::ORIGIN))
    {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        if !origin_allowed(&origin, origins) {
            tracing::warn!(%origin, "rejected request with disallowed Origin header (possible cross-origin attack)");
            crate::telemetry::metrics().count_refused(crate::telemetry::metrics::Refusal::Origin);
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden: Origin header is not allowed",
                )
                    .into_response(),
            );
        }
    }
    None
}

/// An origin, or an allow-list entry, taken apart.
#[derive(Debug, PartialEq)]
enum OriginParts {
    /// `null`, a sandboxed or file page's opaque origin.
    Opaque,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

fn origin_parts(value: &str) -> Option<OriginParts> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("null") {
        return Some(OriginParts::Opaque);
    }
    let uri = value.parse::<Uri>().ok()?;
    let authority = uri.authority()?;
    Some(OriginParts::Tuple {
        scheme: uri.scheme_str()?.to_ascii_lowercase(),
        host: normalize(authority.host()),
        port: authority.port_u16(),
    })
}

/// Whether `origin` (an `Origin` header's value) is in `allowed`. One that
/// cannot be read is not.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let Some(origin) = origin_parts(origin) else {
        return false;
    };
    let default_port = |scheme: &str| match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    allowed.iter().any(|entry| {
        let (entry, any_port) = match entry.trim().strip_suffix(":*") {
            Some(base) => (base, true),
            None => (entry.trim(), false),
        };
        match (origin_parts(entry), &origin) {
            (Some(OriginParts::Opaque), OriginParts::Opaque) => true,
            (
                Some(OriginParts::Tuple {
                    scheme,
                    host,
                    port: allowed_port,
                }),
                OriginParts::Tuple {
                    scheme: sent_scheme,
                    host: sent_host,
                    port: sent_port,
                },
            ) => {
                scheme == *sent_scheme
                    && host == *sent_host
                    && (any_port
                        || allowed_port.is_none_or(|allowed_port| {
                            sent_port.or_else(|| default_port(sent_scheme)) == Some(allowed_port)
                        }))
            }
            _ => false,
        }
    })
}

/// Whether the request's `Host` is allowed (an empty list allows any).
pub fn host_allowed(uri: &Uri, headers: &axum::http::HeaderMap, allowed: &AllowedHosts) -> bool {
    allowed.is_empty()
        || request_authority(uri, headers)
            .is_some_and(|authority| allowed.allows(authority.host(), authority.port_u16()))
}

/// The request's authority: its target's, if the target has one (the
/// absolute form, or HTTP/2's `:authority`), else its `Host` (RFC 9112
/// §3.2.2: a server takes an absolute-form target's authority and
/// ignores `Host`). `None` (400) for a `Host` sent more than once (§3.2:
/// a server must refuse it) or not a valid authority: two readers that
/// take different ones would be a way past the check.
fn request_authority(
    uri: &Uri,
    headers: &axum::http::HeaderMap,
) -> Option<axum::http::uri::Authority> {
    if let Some(authority) = uri.authority() {
        return Some(authority.clone());
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(host), None) => host.to_str().ok()?.parse().ok(),
        _ => None,
    }
}

/// A host as allow-list entries and origins keep it: lowercase, without
/// IPv6 brackets.
fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(host: &str, allowed: &[&str]) -> bool {
        let headers = axum::http::HeaderMap::from_iter([(
            header::HOST,
            host.parse().expect("a header value"),
        )]);
        let allowed: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
        host_allowed(
            &Uri::from_static("/status"),
            &headers,
            &AllowedHosts::new(&allowed),
        )
    }

    #[test]
    fn origins_match_as_rmcp_matches_them() {
        let allowed: Vec<String> = [
            "http://localhost:*",
            "https://app.example.com:443",
            "http://[::1]:*",
            "null",
            "https://old.example",
        ]
        .iter()
        .map(|entry| entry.to_string())
        .collect();
        let allowed_origin = |origin: &str| origin_allowed(origin, &allowed);
        assert!(allowed_origin("http://localhost:5173"));
        assert!(allowed_origin("http://LOCALHOST"));
        assert!(!allowed_origin("https://localhost:5173"), "another scheme");
        assert!(
            allowed_origin("https://app.example.com"),
            "the default port"
        );
        assert!(allowed_origin("https://app.example.com:443"));
        assert!(!allowed_origin("https://app.example.com:8443"));
        assert!(allowed_origin("http://[::1]:3000"));
        assert!(allowed_origin("null"));
        assert!(allowed_origin("https://old.example:9999"), "no port: any");
        assert!(!allowed_origin("http://evil.example"));
        assert!(!allowed_origin("http://localhost.evil.example:80"));
        assert!(!allowed_origin("not an origin"));
        assert!(
            !origin_allowed("http://localhost:1", &[]),
            "an empty list allows none"
        );
    }

    #[test]
    fn hosts_match_as_rmcp_matches_them() {
        let defaults = ["localhost", "127.0.0.1", "::1"];
        assert!(check("localhost:8080", &defaults));
        assert!(check("LOCALHOST", &defaults));
        assert!(check("127.0.0.1:1", &defaults));
        assert!(check("[::1]:8080", &defaults));
        assert!(!check("evil.example", &defaults));
        assert!(!check("evil.example:8080", &defaults));
        assert!(!check("localhost.evil.example", &defaults));
        assert!(check("gw.example:8080", &["gw.example:8080"]));
        assert!(!check("gw.example:9090", &["gw.example:8080"]));
        assert!(!check("gw.example", &["gw.example:8080"]));
        assert!(!check("not a host", &defaults));
    }

    /// RFC 9112 §3.2: two `Host`s are refused, whichever comes first; an
    /// absolute-form target's authority is the one checked, not `Host`.
    #[test]
    fn hosts_are_read_as_http_1_1_reads_them() {
        let allowed = AllowedHosts::new(&["localhost".to_owned()]);
        let hosts = |values: &[&str]| {
            let mut headers = axum::http::HeaderMap::new();
            for value in values {
                headers.append(header::HOST, value.parse().expect("a header value"));
            }
            headers
        };
        let origin_form = Uri::from_static("/mcp");
        for twice in [["localhost", "evil.example"], ["evil.example", "localhost"]] {
            assert!(
                !host_allowed(&origin_form, &hosts(&twice), &allowed),
                "{twice:?}"
            );
        }
        assert!(!host_allowed(
            &origin_form,
            &hosts(&["localhost", "localhost"]),
            &allowed
        ));
        let absolute = |uri: &'static str| Uri::from_static(uri);
        assert!(!host_allowed(
            &absolute("http://evil.example/mcp"),
            &hosts(&["localhost"]),
            &allowed
        ));
        assert!(host_allowed(
            &absolute("http://localhost:8080/mcp"),
            &hosts(&["evil.example"]),
            &allowed
        ));
        assert!(host_allowed(
            &absolute("http://localhost/mcp"),
            &hosts(&[]),
            &allowed
        ));
    }
}
