//! Junction: an MCP gateway that serves many upstream MCP servers behind one
//! Streamable HTTP endpoint.
//!
//! Layout (see ARCHITECTURE.md for the full map):
//! - [`config`]: what the user wrote (raw), loaded with figment, validated
//!   into a resolved [`config::Config`] with every problem reported at once.
//! - [`naming`]: the reversible rewrite of tool/prompt names and resource
//!   URIs between a mount's own names and the names clients see (tool
//!   names fitted to clients' rule, if asked, route back by the lists).
//! - [`tool_name_rule`]: the tool-name rule clients enforce, and names
//!   fitted to it.
//! - [`tool_filter`]: which of an upstream's tools a mount offers
//!   (`include_tools`, `exclude_tools`).
//! - [`rewrite`]: applies that rewrite inside results (resource links,
//!   embedded resources, read contents).
//! - [`catalog`]: the discovery cache; one catalog per mount, merged into one
//!   routing table and the lists clients page through.
//! - [`upstream`]: opening upstream sessions (stdio child or Streamable HTTP)
//!   and listening to what they send.
//! - [`gateway`]: the running mounts, their shared sessions and discovery,
//!   and the registry of downstream sessions.
//! - [`downstream`]: one downstream MCP session: answers the client, routes
//!   each request to its mount, owns its per-session upstreams.
//! - [`http`]: the axum app: the MCP endpoint, `/healthz`, `/readyz`.
//! - [`demo`]: a small MCP server the embedded default config mounts.
//! - [`signals`]: SIGINT/SIGTERM (shutdown) and SIGHUP, caught from the start.
//! - [`wait_for_zero`]: bounded waits for a count of things under way.

// rmcp marks logging, sampling and roots deprecated (SEP-2577, 2026-07-28),
// but they are live parts of the handshake-era protocol this gateway relays.
#![allow(deprecated)]

/// `eprintln!` that never panics: a stderr that cannot be written (a pipe
/// whose reader has gone, a full disk) loses the line, not the process
/// with exit code 101 in place of the documented one.
#[macro_export]
macro_rules! say_on_stderr {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod catalog;
pub mod cli;
pub mod coalesce;
pub mod config;
pub mod demo;
pub mod downstream;
pub mod gateway;
pub mod header_names;
pub mod http;
pub mod naming;
pub mod rewrite;
pub mod said_at_most;
pub mod signals;
pub mod telemetry;
pub mod tool_filter;
pub mod tool_name_rule;
pub mod upstream;
pub mod wait_for_zero;
