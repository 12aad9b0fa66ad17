//! The `Host` check of the operator pages on the gateway's own listener.
//!
//! rmcp refuses an MCP request whose `Host` is not in
//! `server.allowed_hosts` (DNS-rebinding protection: a page on
//! `evil.example`, its name re-pointed at 127.0.0.1, would otherwise be
//! same-origin with the gateway). `/status`, `/status.json` and `/metrics`
//! sit on the same listener and tell mount names, upstream hosts and their
//! last errors, so they get the same check here; rmcp's own is private to
//! its service. Entries match as rmcp's do: `host` any port, `host:port`
//! that port, an empty list (`["*"]`) anything. `/healthz` and `/readyz`
//! answer any Host (probes call them by the pod's address), but `/readyz`
//! names its mounts and their errors only to an allowed one.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{header, StatusCode, Uri},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// The allow-list, as validated (`config::Server::allowed_hosts`).
#[derive(Clone)]
pub struct AllowedHosts(pub Arc<[String]>);

/// Refuses (403) a request whose `Host` (or HTTP/2 `:authority`) is not
/// allowed, and (400) one without a readable one.
pub async fn require_allowed_host(
    State(allowed): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    if allowed.0.is_empty() {
        return next.run(request).await;
    }
    let Some((host, port)) = request_authority(request.uri(), request.headers()) else {
        return (
            StatusCode::BAD_REQUEST,
            "Bad Request: missing or invalid Host header",
        )
            .into_response();
    };
    if !is_allowed(&host, port, &allowed.0) {
        tracing::warn!(%host, "refused an operator page for a disallowed Host (possible DNS rebinding)");
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed",
        )
            .into_response();
    }
    next.run(request).await
}

/// Whether the request's `Host` is allowed (an empty list allows any).
pub fn host_allowed(uri: &Uri, headers: &axum::http::HeaderMap, allowed: &[String]) -> bool {
    allowed.is_empty()
        || request_authority(uri, headers)
            .is_some_and(|(host, port)| is_allowed(&host, port, allowed))
}

/// The request's host (lowercase, without IPv6 brackets) and port.
fn request_authority(uri: &Uri, headers: &axum::http::HeaderMap) -> Option<(String, Option<u16>)> {
    let authority = match headers.get(header::HOST) {
        Some(host) => host
            .to_str()
            .ok()?
            .parse::<axum::http::uri::Authority>()
            .ok()?,
        None => uri.authority()?.clone(),
    };
    Some((normalize(authority.host()), authority.port_u16()))
}

fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

fn is_allowed(host: &str, port: Option<u16>, allowed: &[String]) -> bool {
    allowed.iter().any(|entry| {
        let entry = entry.trim();
        let (allowed_host, allowed_port) = match entry.parse::<axum::http::uri::Authority>() {
            Ok(authority) => (normalize(authority.host()), authority.port_u16()),
            Err(_) => (normalize(entry), None),
        };
        allowed_host == host && allowed_port.is_none_or(|allowed_port| port == Some(allowed_port))
    })
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
        request_authority(&Uri::from_static("/status"), &headers)
            .is_some_and(|(host, port)| is_allowed(&host, port, &allowed))
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
}
