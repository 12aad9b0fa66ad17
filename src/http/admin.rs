//! `/metrics`, `/status.json` and `/status`: what an operator looks at.
//!
//! All three sit behind `[admin] enabled`; with `[admin] listen` they are
//! served on their own listener (e.g. a port only the monitoring network
//! reaches) instead of the gateway's.

use std::sync::Arc;

use axum::{
    extract::State,
    http::header,
    response::{Html, IntoResponse},
    routing::get,
    Json, Router,
};
use prometheus_client::{
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};
use serde::Serialize;

use super::status_page;
use crate::{
    gateway::{Gateway, MountPhase},
    telemetry::metrics::{metrics, MountLabels, MountStateLabels},
    upstream::ClientProfile,
};

pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/metrics", get(prometheus))
        .route("/status.json", get(status_json))
        .route("/status", get(status_html))
        .with_state(gateway)
}

async fn prometheus(State(gateway): State<Arc<Gateway>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics().render(&per_mount(&gateway)),
    )
}

/// The series of each mount of the running config, made per scrape: a
/// mount a reload removed has none. `junction_mount_state{mount, state}`:
/// 1 for the phase each mount is in, 0 for the others (so `state="down"`
/// can be alerted on); `junction_upstream_sessions{mount}`: its upstream
/// sessions open.
fn per_mount(gateway: &Gateway) -> Registry {
    let mut registry = Registry::with_prefix("junction");
    let states = Family::<MountStateLabels, Gauge>::default();
    let upstream_sessions = Family::<MountLabels, Gauge>::default();
    for mount in gateway.mounts().iter() {
        let labels = MountLabels {
            mount: mount.config.name.as_str().to_owned(),
        };
        let open = metrics().upstream_sessions.get_or_create(&labels).get();
        upstream_sessions.get_or_create(&labels).set(open);
        let phase = mount.status().phase;
        for candidate in MountPhase::ALL {
            states
                .get_or_create(&MountStateLabels {
                    mount: mount.config.name.as_str().to_owned(),
                    state: candidate.as_str(),
                })
                .set(i64::from(candidate == phase));
        }
    }
    registry.register(
        "mount_state",
        "Each mount's phase (starting, ready, degraded, down): 1 for the one it is in",
        states,
    );
    registry.register(
        "upstream_sessions",
        "Upstream sessions currently open, by mount",
        upstream_sessions,
    );
    registry
}

/// The gateway as a whole.
#[derive(Debug, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub uptime_seconds: u64,
    /// As `/readyz` says it: false while draining.
    pub ready: bool,
    /// Shutting down (SIGTERM): new work is refused.
    pub draining: bool,
    pub downstream_sessions: usize,
    pub mounts: Vec<MountReport>,
    /// The `[endpoints]`, in name order.
    pub endpoints: Vec<EndpointReport>,
}

/// One `[endpoints]` table, as the status page shows it.
#[derive(Debug, Serialize)]
pub struct EndpointReport {
    pub name: String,
    /// Its Streamable HTTP path.
    pub path: String,
    /// Its path on the older HTTP+SSE transport, if that is served.
    pub sse_path: Option<String>,
    pub mounts: Vec<String>,
    /// Downstream sessions opened on it.
    pub downstream_sessions: usize,
}

/// One mount, as the status page shows it.
#[derive(Debug, Serialize)]
pub struct MountReport {
    pub name: String,
    pub namespace: String,
    pub transport: &'static str,
    pub isolation: &'static str,
    pub health: MountPhase,
    pub last_error: Option<String>,
    pub restarts: u64,
    pub upstream_sessions: i64,
    /// The mount's tools clients are listed.
    pub tools: usize,
    /// The upstream's tools its `include_tools` / `exclude_tools` hide.
    pub tools_hidden: usize,
    /// Tools the mount offers whose client-visible name an earlier mount
    /// (or, fitted, one of its own tools) took: the log's "name
    /// collision" warning says which.
    pub tools_shadowed: usize,
    /// Prompts, resources and templates clients are listed (names another
    /// mount took, as for tools, left out).
    pub prompts: usize,
    pub resources: usize,
    pub resource_templates: usize,
    /// Upstream tasks of live client sessions whose owner the mount's own
    /// (shared) upstream session remembers.
    pub tasks: usize,
}

pub fn status(gateway: &Gateway) -> Status {
    let metrics = metrics();
    let merged = gateway.catalog(ClientProfile::FULL);
    let mounts = gateway
        .mounts()
        .iter()
        .map(|mount| {
            let status = mount.status();
            let catalog = mount.catalog_now(ClientProfile::FULL);
            let hidden = mount
                .tool_filter()
                .hides_of(catalog.tools.iter().map(|tool| tool.name.as_ref()));
            let listed = merged.listed_of(&mount.config.name);
            let labels = MountLabels {
                mount: mount.config.name.as_str().to_owned(),
            };
            MountReport {
                name: mount.config.name.as_str().to_owned(),
                namespace: mount.config.namespace.as_str().to_owned(),
                transport: mount.config.transport.kind(),
                isolation: mount.config.isolation.as_str(),
                health: status.phase,
                last_error: status.last_error,
                restarts: metrics.upstream_restarts.get_or_create(&labels).get(),
                upstream_sessions: metrics.upstream_sessions.get_or_create(&labels).get(),
                tools: listed.tools,
                tools_hidden: hidden,
                tools_shadowed: (catalog.tools.len() - hidden).saturating_sub(listed.tools),
                prompts: listed.prompts,
                resources: listed.resources,
                resource_templates: listed.resource_templates,
                tasks: mount
                    .live_shared_session()
                    .map_or(0, |session| session.relay().tasks_remembered()),
            }
        })
        .collect();
    let config = gateway.config();
    let sessions_on = gateway.sessions().by_endpoint();
    let endpoints = config
        .endpoints
        .iter()
        .map(|endpoint| EndpointReport {
            name: endpoint.name.to_string(),
            path: crate::config::endpoint_path(&config.server.path, &endpoint.name),
            sse_path: config
                .server
                .sse_path
                .as_ref()
                .map(|sse_path| crate::config::endpoint_path(sse_path, &endpoint.name)),
            mounts: endpoint.mounts.iter().map(ToString::to_string).collect(),
            downstream_sessions: sessions_on.get(&endpoint.name).copied().unwrap_or(0),
        })
        .collect();
    Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: gateway.uptime().as_secs(),
        ready: gateway.is_ready() && !gateway.is_draining(),
        draining: gateway.is_draining(),
        downstream_sessions: gateway.sessions().len(),
        mounts,
        endpoints,
    }
}

async fn status_json(State(gateway): State<Arc<Gateway>>) -> impl IntoResponse {
    Json(status(&gateway))
}

async fn status_html(State(gateway): State<Arc<Gateway>>) -> impl IntoResponse {
    Html(status_page::render(&status(&gateway)))
}
