//! The names of the MCP and trace-context headers the gateway reads on
//! every request, made once. Looked up by a `&str`, `HeaderMap::get`
//! parses and validates the name on each call (~440 instructions; a
//! proxied call made ten such lookups); by a `HeaderName`, it only hashes.

use axum::http::HeaderName;

pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
