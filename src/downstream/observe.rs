//! One span and one set of metrics per downstream request.
//!
//! The session's handler runs each request through [`observe`]: it runs
//! inside a `tracing` span carrying OpenTelemetry's MCP server span
//! attributes (`mcp.method.name`, `jsonrpc.request.id`,
//! `mcp.protocol.version`, `mcp.session.id`, `network.transport`,
//! `gen_ai.tool.name` / `gen_ai.prompt.name` of a listed tool or prompt,
//! `mcp.resource.uri`, `error.type` and `rpc.response.status_code` on
//! failure, the mount once routed), parented to the client's W3C trace
//! context if it sent one, and is counted and timed in the Prometheus
//! metrics. Log lines written while it is handled carry the span's fields.
//! The session id is a fingerprint of the `Mcp-Session-Id` the client
//! sent; no header value that could hold a secret is ever recorded, and
//! what else the client chose (ids, URIs) is cut to a bounded length.

use std::{cell::RefCell, future::Future, sync::Arc, time::Instant};

use rmcp::{
    model::{
        CallToolResponse, CallToolResult, CompleteResult, Extensions, GetPromptResponse,
        InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListToolsResult, MetaObject, ProtocolVersion, ReadResourceResponse, RequestId,
        RequestMetaObject, ServerResult,
    },
    service::RequestContext,
    ErrorData, RoleServer,
};
use tracing::{field::Empty, Instrument};

use crate::{
    header_names,
    naming::MountName,
    telemetry::{
        context::adopt_parent,
        metrics::{metrics, no_mount, MethodLabels, RequestLabels},
        redact::bounded,
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

/// Whether the current request is a `method` routed to `mount`: its span
/// then names both already. False outside a request.
pub(crate) fn is_routed_here(method: &str, mount: &MountName) -> bool {
    ROUTED
        .try_with(|routed| {
            let routed = routed.borrow();
            routed.method == method && routed.mount.as_ref() == Some(mount)
        })
        .unwrap_or(false)
}

/// What a request names that the lists list.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    Tool,
    Prompt,
}

/// The current request calls tool (or gets prompt) `name`, one the lists
/// name: the span is named after it and carries it (`gen_ai.tool.name`,
/// `gen_ai.prompt.name`). Only then: a name the client made up (any
/// length, any number of them, under a real namespace or not) never
/// becomes a span's name or attribute. A no-op outside a request.
pub(crate) fn names_listed(target: Target, name: &str) {
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
            exported.update_name(format!("{} {name}", routed.borrow().method));
        }
        match target {
            Target::Tool => span.record("gen_ai.tool.name", name),
            Target::Prompt => span.record("gen_ai.prompt.name", name),
        };
    });
}

/// The current request is about resource `uri` (`resources/read`,
/// subscriptions): `mcp.resource.uri`, cut to a bounded length. A no-op
/// outside a request.
pub(crate) fn concerns_resource(uri: &str) {
    tracing::Span::current().record("mcp.resource.uri", bounded(uri));
}

/// What a successful answer tells its span.
pub(crate) trait Outcome {
    /// Whether it reports a failure anyway (`isError: true`).
    fn is_tool_error(&self) -> bool {
        false
    }

    /// The protocol version it negotiated (`initialize`).
    fn negotiated_version(&self) -> Option<&str> {
        None
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

impl Outcome for InitializeResult {
    fn negotiated_version(&self) -> Option<&str> {
        Some(self.protocol_version.as_str())
    }
}

macro_rules! plain_outcome {
    ($($t:ty),*) => { $(impl Outcome for $t {})* };
}
plain_outcome!(
    (),
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    GetPromptResponse,
    ReadResourceResponse,
    CompleteResult,
    bytes::Bytes
);

/// The raw answers of task-augmented calls and `tasks/result`: a tool's
/// result among them may report its failure.
impl Outcome for serde_json::Value {
    fn is_tool_error(&self) -> bool {
        self.get("isError") == Some(&serde_json::Value::Bool(true))
    }
}

/// Where a request came from, as far as its span is concerned: its
/// JSON-RPC id, its HTTP headers (session id, protocol version, W3C trace
/// context) and its `_meta` (trace context sent in the message, which
/// wins).
#[derive(Clone)]
pub(crate) struct RequestOrigin<'a> {
    pub id: &'a RequestId,
    pub headers: Option<&'a axum::http::HeaderMap>,
    pub meta: Option<&'a MetaObject>,
    /// Cancelled when the client cancels the request: what the request
    /// ends with then is no answer (rmcp discards it) and no failure of
    /// the mount's.
    pub cancelled: Option<&'a tokio_util::sync::CancellationToken>,
    /// The session's fingerprint, if its state has it already
    /// ([`super::SessionState::fingerprint`]); else it is worked out from
    /// the `Mcp-Session-Id` header.
    pub session_fingerprint: Option<Arc<str>>,
}

impl<'a> RequestOrigin<'a> {
    /// The origin of a request rmcp handed to the session's handler.
    pub(crate) fn of(context: &'a RequestContext<RoleServer>) -> Self {
        Self {
            id: &context.id,
            headers: super::http_headers(context),
            meta: Some(&context.meta.0),
            cancelled: Some(&context.ct),
            session_fingerprint: None,
        }
    }

    /// The protocol version the request was sent under: its
    /// `MCP-Protocol-Version` header, or 2025-03-26 without one (as the
    /// transport spec has servers assume). Only a version the gateway
    /// knows: rmcp refuses others, and a header is no place to take an
    /// attribute's value from unchecked.
    fn protocol_version(&self) -> Option<&'static str> {
        let Some(sent) = self
            .headers
            .and_then(|headers| headers.get(&header_names::MCP_PROTOCOL_VERSION))
        else {
            return Some("2025-03-26");
        };
        ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(ProtocolVersion::as_str)
            .find(|known| sent.as_bytes() == known.as_bytes())
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
    let session_fingerprint = origin.session_fingerprint.clone().unwrap_or_else(|| {
        crate::telemetry::redact::session_fingerprint(
            origin
                .headers
                .and_then(|headers| headers.get(&header_names::MCP_SESSION_ID))
                .and_then(|value| value.to_str().ok())
                .unwrap_or(""),
        )
        .into()
    });
    let request_id = origin.id.to_string();
    let cancelled = origin.cancelled;
    let initialize = method == "initialize";
    let span = tracing::info_span!(
        "mcp.request",
        // `{method} {tool}` once a listed tool resolves (`names_listed`).
        otel.name = Empty,
        otel.kind = Empty,
        mcp.method.name = method,
        // Displayed, not debugged: no quoting and escaping on every request.
        jsonrpc.request.id = %bounded(&request_id),
        // An `initialize`'s is the version it negotiates, once answered.
        mcp.protocol.version = if initialize { None } else { origin.protocol_version().map(tracing::field::display) },
        // Never the id itself: logs and traces are read by more people
        // than the client that owns the session.
        mcp.session.id = %session_fingerprint,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        junction.mount = Empty,
        rpc.jsonrpc.error_code = Empty,
        rpc.response.status_code = Empty,
        error.type = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    // OpenTelemetry's alone, read before the span starts (`adopt_parent`
    // starts it): as log fields they repeat `mcp.method.name`, formatted
    // on every request for nothing.
    if crate::telemetry::exporting_traces() {
        span.record("otel.name", method);
        span.record("otel.kind", "server");
    }
    adopt_parent(&span, origin.meta, origin.headers);
    // Downstream is Streamable HTTP, always. Traces only: as log fields,
    // formatted on every request, they cost ~1% of a call (callgrind).
    if crate::telemetry::exporting_traces() {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        span.set_attribute("network.transport", "tcp");
        span.set_attribute("network.protocol.name", "http");
        if method == "tools/call" {
            span.set_attribute("gen_ai.operation.name", "execute_tool");
        }
    }

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
    if let Some(version) = result.as_ref().ok().and_then(Outcome::negotiated_version) {
        span.record("mcp.protocol.version", version);
    }
    let outcome = match &result {
        // Its client cancelled it: rmcp discards the answer, and the
        // mount did nothing wrong (per-mount error rates rose whenever
        // a user pressed Stop).
        _ if cancelled.is_some_and(|token| token.is_cancelled()) => "cancelled",
        Ok(answer) if answer.is_tool_error() => {
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
            "tool_error"
        }
        Ok(_) => "ok",
        Err(error) => {
            let code = error.code.0.to_string();
            // `rpc.jsonrpc.error_code` is the older conventions' name,
            // kept for dashboards built on it.
            span.record("rpc.jsonrpc.error_code", error.code.0);
            span.record("rpc.response.status_code", code.as_str());
            span.record("error.type", code.as_str());
            // Sets the status to ERROR with the message as description.
            span.record("otel.status_description", bounded(&error.message));
            "error"
        }
    };
    let metrics = metrics();
    metrics
        .requests
        .get_or_create(&RequestLabels {
            mount: mount.map_or_else(no_mount, |m| m.shared_str()),
            method,
            outcome,
        })
        .inc();
    metrics
        .request_duration
        .get_or_create(&MethodLabels { method })
        .observe(started.elapsed().as_secs_f64());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_version_is_a_known_one_or_the_assumed_one() {
        let id = RequestId::Number(1);
        let version = |sent: Option<&str>| {
            let mut headers = axum::http::HeaderMap::new();
            if let Some(sent) = sent {
                headers.insert("mcp-protocol-version", sent.parse().unwrap());
            }
            let origin = RequestOrigin {
                id: &id,
                headers: Some(&headers),
                meta: None,
                cancelled: None,
                session_fingerprint: None,
            };
            origin.protocol_version()
        };
        assert_eq!(version(None), Some("2025-03-26"));
        assert_eq!(version(Some("2025-06-18")), Some("2025-06-18"));
        assert_eq!(version(Some("1999-01-01")), None);
    }
}
