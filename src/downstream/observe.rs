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
    /// The mount the current request was routed to, set by routing.
    static ROUTED_MOUNT: RefCell<Option<MountName>>;
}

/// Records the mount the current request goes to (metrics label, span
/// attribute). A no-op outside a request.
pub(crate) fn routed_to(mount: &MountName) {
    let _ = ROUTED_MOUNT.try_with(|routed| *routed.borrow_mut() = Some(mount.clone()));
    tracing::Span::current().record("junction.mount", mount.as_str());
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
/// times it. `tool` is the tool name for `tools/call`.
pub(crate) fn observe<'a, T, W>(
    method: &'static str,
    tool: Option<&'a str>,
    origin: RequestOrigin<'a>,
    work: W,
) -> impl Future<Output = Result<T, ErrorData>> + 'a
where
    T: Outcome + 'a,
    W: Future<Output = Result<T, ErrorData>> + 'a,
{
    observe_inner(method, tool, origin, Box::pin(work))
}

async fn observe_inner<T: Outcome, W: Future<Output = Result<T, ErrorData>>>(
    method: &'static str,
    tool: Option<&str>,
    origin: RequestOrigin<'_>,
    work: std::pin::Pin<Box<W>>,
) -> Result<T, ErrorData> {
    let session_id = origin
        .headers
        .and_then(|headers| headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let span_name = match tool {
        Some(tool) => format!("{method} {tool}"),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        "mcp.request",
        otel.name = %span_name,
        otel.kind = "server",
        mcp.method.name = method,
        // Never the id itself: logs and traces are read by more people
        // than the client that owns the session.
        mcp.session.id = %crate::telemetry::redact::session_fingerprint(session_id),
        gen_ai.tool.name = tool.unwrap_or(""),
        junction.mount = Empty,
        rpc.jsonrpc.error_code = Empty,
        otel.status_code = Empty,
    );
    adopt_parent(&span, origin.meta, origin.headers);

    let started = Instant::now();
    let (result, mount) = ROUTED_MOUNT
        .scope(RefCell::new(None), async {
            let result = work.await;
            let mount = ROUTED_MOUNT.with(|routed| routed.borrow().clone());
            (result, mount)
        })
        .instrument(span.clone())
        .await;
    let outcome = match &result {
        Ok(answer) if answer.is_tool_error() => "tool_error",
        Ok(_) => "ok",
        Err(error) => {
            span.record("rpc.jsonrpc.error_code", error.code.0);
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
