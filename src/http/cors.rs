//! CORS for the MCP endpoint: what lets a page on an allowed origin (a
//! browser-based client, the MCP Inspector) talk to the gateway at all.
//!
//! `server.allowed_origins` decides which pages may call (`host_check.rs`
//! refuses the others with 403 before this runs); a browser also needs the
//! answers to say so. Only origins the list names get them: with the
//! check off (`["*"]`) none does, or every website a user visits could
//! drive the gateway from the user's browser. A preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered here, never reaching rmcp
//! (which has no `OPTIONS` and answered 405), and every answer to a
//! request with an `Origin` names that origin and exposes `Mcp-Session-Id`,
//! without which a page cannot read its session id. No credentials: the
//! gateway takes none from cookies. Done in the endpoint's one outer layer
//! rather than as a layer of its own, which cost every idle session memory
//! (see `http/mod.rs`, `Edge`).

use axum::{
    http::{header, HeaderMap, HeaderValue, Method, StatusCode},
    response::{IntoResponse, Response},
};

/// What a page may send, when its preflight does not say.
const ALLOWED_HEADERS: &str =
    "content-type, accept, authorization, mcp-session-id, mcp-protocol-version, last-event-id";

/// What a page may read of an answer besides the CORS-safelisted headers.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

/// How long a browser may keep a preflight's answer (seconds).
const PREFLIGHT_MAX_AGE: &str = "600";

/// The answer to a preflight from `origin` (allowed), if `method` and
/// `headers` make one.
pub fn preflight(method: &Method, headers: &HeaderMap, origin: &HeaderValue) -> Option<Response> {
    if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return None;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let answer = response.headers_mut();
    answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    answer.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    // The origin is allowed: what it asks to send is what it may send.
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or(HeaderValue::from_static(ALLOWED_HEADERS));
    answer.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    answer.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(PREFLIGHT_MAX_AGE),
    );
    answer.insert(header::VARY, HeaderValue::from_static("origin"));
    Some(response)
}

/// Lets a page on `origin` (allowed) read `response`.
pub fn allow(response: &mut Response, origin: HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED_HEADERS),
    );
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preflight_is_answered_and_names_the_origin() {
        let origin = HeaderValue::from_static("http://localhost:6274");
        let mut asked = HeaderMap::new();
        asked.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("POST"),
        );
        asked.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("content-type, mcp-session-id"),
        );
        let answer = preflight(&Method::OPTIONS, &asked, &origin).expect("a preflight");
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
        let headers = answer.headers();
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], origin);
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_HEADERS],
            "content-type, mcp-session-id"
        );
        assert!(headers
            .get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS)
            .is_none());
        // Not a preflight: a plain OPTIONS, or a POST.
        assert!(preflight(&Method::OPTIONS, &HeaderMap::new(), &origin).is_none());
        assert!(preflight(&Method::POST, &asked, &origin).is_none());
    }
}
