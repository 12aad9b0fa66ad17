//! One span and one set of metrics per downstream request.
//!
//! The session's handler runs each request through [`observe`]: it runs
//! inside a `tracing` span carrying the MCP semantic
//! convention attributes (`mcp.method.name`, `mcp.session.id`,
//! `gen_ai.tool.name`, the mount once routed, the JSON-RPC error code on
//! failure), parented to the client's W3C trace context if it sent one, and
//! is counted and timed in the Prometheus metrics. Log lines written while
//! it is handled carry the span's fields. The session id is the
//! `Mcp-Session-Id` the client sent; no header value that could hold a
//! secret is ever recorded.

use std::{cell::RefCell, future::Future, time::Instant};

use rmcp::{
    model::{
        CallToolResponse, CallToolResult, CompleteResult, Extensions, GetPromptResponse,
        InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListToolsResult, MetaObject, ReadResourceResponse, RequestMetaObject, ServerResult,
    },
    service::RequestContext,
    ErrorData, RoleServer,
};
use tracing::{field::Empty, Instrument};

use crate::{
    naming::MountName,
    telemetry::{
        context::adopt_parent,
        metrics::{metrics, MethodLabels, RequestLabels},
    },
};

tokio::task_local! {
    /// The current request's routing, set by routing.
    static ROUTED: RefCell<Routed>;
}

/// Where the current request went.
struct Routed {
    method: &'static str,
    mount: Option<MountName>,
}

/// Records the mount the current request goes to (metrics label, span
/// attribute). A no-op outside a request.
pub(crate) fn routed_to(mount: &MountName) {
    tracing::Span::current().record("junction.mount", mount.as_str());
    let _ = ROUTED.try_with(|routed| routed.borrow_mut().mount = Some(mount.clone()));
}

/// The current request calls `tool`, a tool the lists name: the span is
/// named after it and carries it. Only then: a name the client made up
/// (any length, any number of them, under a real namespace or not) never
/// becomes a span's name or attribute. A no-op outside a request.
pub(crate) fn calls_listed_tool(tool: &str) {
    let span = tracing::Span::current();
    let _ = ROUTED.try_with(|routed| {
        // The exported span has started by now: renamed through
        // OpenTelemetry (tracing-opentelemetry reads `otel.name` only
        // before a span starts).
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let context = span.context();
        let exported = context.span();
        // Not exported (no endpoint): no name to build on every call.
        if exported.span_context().is_valid() {
            exported.update_name(format!("{} {tool}", routed.borrow().method));
        }
        span.record("gen_ai.tool.name", tool);
    });
}

/// Whether a successful answer reports a failure anyway (`isError: true`).
pub(crate) trait Outcome {
    fn is_tool_error(&self) -> bool {
        false
    }
}

impl Outcome for CallToolResult {
    fn is_tool_error(&self) -> bool {
        self.is_error == Some(true)
    }
}

impl Outcome for ServerResult {
    fn is_tool_error(&self) -> bool {
        matches!(self, ServerResult::CallToolResult(result) if result.is_error == Some(true))
    }
}

impl Outcome for CallToolResponse {
    fn is_tool_error(&self) -> bool {
        matches!(self, CallToolResponse::Complete(result) if result.is_error == Some(true))
    }
}

macro_rules! plain_outcome {
    ($($t:ty),*) => { $(impl Outcome for $t {})* };
}
plain_outcome!(
    (),
    InitializeResult,
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    GetPromptResponse,
    ReadResourceResponse,
    CompleteResult,
    serde_json::Value,
    bytes::Bytes
);

/// Where a request came from, as far as its span is concerned: its HTTP
/// headers (session id, W3C trace context) and its `_meta` (trace context
/// sent in the message, which wins).
#[derive(Clone, Copy)]
pub(crate) struct RequestOrigin<'a> {
    pub headers: Option<&'a axum::http::HeaderMap>,
    pub meta: Option<&'a MetaObject>,
}

impl<'a> RequestOrigin<'a> {
    /// The origin of a request rmcp handed to the session's handler.
    pub(crate) fn of(context: &'a RequestContext<RoleServer>) -> Self {
        Self {
            headers: super::http_headers(context),
            meta: Some(&context.meta.0),
        }
    }
}

/// The `_meta` a client sent with a request that reaches the session layer
/// before rmcp's handler: rmcp keeps it in the params or in the request's
/// extensions (where the handler's `context.meta` comes from).
pub(crate) fn sent_meta<'a>(
    params_meta: Option<&'a RequestMetaObject>,
    extensions: &'a Extensions,
) -> Option<&'a RequestMetaObject> {
    params_meta.or_else(|| extensions.get::<RequestMetaObject>())
}

/// Runs one downstream request's `work` inside its span, then counts and
/// times it (a listed tool names the span: [`calls_listed_tool`]).
pub(crate) fn observe<'a, T, W>(
    method: &'static str,
    origin: RequestOrigin<'a>,
    work: W,
) -> impl Future<Output = Result<T, ErrorData>> + 'a
where
    T: Outcome + 'a,
    W: Future<Output = Result<T, ErrorData>> + 'a,
{
    observe_inner(method, origin, Box::pin(work))
}

async fn observe_inner<T: Outcome, W: Future<Output = Result<T, ErrorData>>>(
    method: &'static str,
    origin: RequestOrigin<'_>,
    work: std::pin::Pin<Box<W>>,
) -> Result<T, ErrorData> {
    let session_id = origin
        .headers
        .and_then(|headers| headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let span = tracing::info_span!(
        "mcp.request",
        // `{method} {tool}` once the tool resolves (`routed_to`).
        otel.name = method,
        otel.kind = "server",
        mcp.method.name = method,
        // Never the id itself: logs and traces are read by more people
        // than the client that owns the session.
        mcp.session.id = %crate::telemetry::redact::session_fingerprint(session_id),
        gen_ai.tool.name = Empty,
        junction.mount = Empty,
        rpc.jsonrpc.error_code = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    );
    adopt_parent(&span, origin.meta, origin.headers);

    let started = Instant::now();
    let routed = Routed {
        method,
        mount: None,
    };
    let (result, mount) = ROUTED
        .scope(RefCell::new(routed), async {
            let result = work.await;
            let mount = ROUTED.with(|routed| routed.borrow().mount.clone());
            (result, mount)
        })
        .instrument(span.clone())
        .await;
    // OpenTelemetry's MCP conventions: a tool's own failure is an error
    // too (`error.type` "tool_error"); a JSON-RPC error's type is its code.
    let outcome = match &result {
        Ok(answer) if answer.is_tool_error() => {
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
            "tool_error"
        }
        Ok(_) => "ok",
        Err(error) => {
            span.record("rpc.jsonrpc.error_code", error.code.0);
            span.record("error.type", error.code.0.to_string());
            span.record("otel.status_code", "ERROR");
            "error"
        }
    };
    let metrics = metrics();
    metrics
        .requests
        .get_or_create(&RequestLabels {
            mount: mount.map_or_else(|| "-".to_owned(), |m| m.as_str().to_owned()),
            method: method.to_owned(),
            outcome,
        })
        .inc();
    metrics
        .request_duration
        .get_or_create(&MethodLabels {
            method: method.to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    result
}
