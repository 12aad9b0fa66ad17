//! W3C trace context in and out of MCP messages.
//!
//! Incoming: a client's `params._meta.traceparent` (the MCP convention) or,
//! failing that, its HTTP `traceparent` header becomes the parent of the
//! gateway's span for the request. Outgoing: the current span's context is
//! written into the upstream request's `_meta` (`traceparent`,
//! `tracestate`); HTTP upstreams also get it as headers (see
//! `upstream::connect`). Without an exporter spans carry no context, and a
//! client's own `traceparent` passes through unchanged.

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rmcp::model::MetaObject;
use tracing_opentelemetry::OpenTelemetrySpanExt;

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

struct Fields(HashMap<&'static str, String>);

impl Extractor for Fields {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().copied().collect()
    }
}

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.0.insert(TRACEPARENT, value),
            TRACESTATE => self.0.insert(TRACESTATE, value),
            _ => None,
        };
    }
}

/// Makes `span` a child of the client's trace, if it sent one.
pub fn adopt_parent(
    span: &tracing::Span,
    meta: Option<&MetaObject>,
    headers: Option<&axum::http::HeaderMap>,
) {
    // Without an exporter a span takes no parent (`set_parent` is
    // OpenTelemetry's); the client's `_meta` passes through unchanged.
    if !super::exporting_traces() {
        return;
    }
    let mut fields = HashMap::new();
    if let Some((meta, traceparent)) = meta.and_then(|meta| Some((meta, meta.get_traceparent()?))) {
        fields.insert(TRACEPARENT, traceparent.to_owned());
        if let Some(tracestate) = meta.get_tracestate() {
            fields.insert(TRACESTATE, tracestate.to_owned());
        }
    } else if let Some(headers) = headers {
        let names = [
            (TRACEPARENT, crate::header_names::TRACEPARENT),
            (TRACESTATE, crate::header_names::TRACESTATE),
        ];
        for (name, header) in names {
            if let Some(value) = headers.get(&header).and_then(|v| v.to_str().ok()) {
                fields.insert(name, value.to_owned());
            }
        }
    }
    if fields.is_empty() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Fields(fields));
    let _ = span.set_parent(parent);
}

/// The current span's trace context as `(traceparent, tracestate)`, if it
/// has a valid one (only when spans are exported).
pub fn current() -> Option<(String, Option<String>)> {
    // Without an exporter no span has a context: asking for it on every
    // upstream request cost ~1k instructions a call (callgrind).
    if !super::exporting_traces() {
        return None;
    }
    let context = tracing::Span::current().context();
    let mut fields = Fields(HashMap::new());
    TraceContextPropagator::new().inject_context(&context, &mut fields);
    let traceparent = fields.0.remove(TRACEPARENT)?;
    let tracestate = fields.0.remove(TRACESTATE).filter(|s| !s.is_empty());
    Some((traceparent, tracestate))
}

/// Writes the current span's context into an outgoing request's `_meta`.
pub fn inject_into(meta: &mut MetaObject) {
    if let Some((traceparent, tracestate)) = current() {
        meta.set_traceparent(traceparent);
        match tracestate {
            Some(tracestate) => meta.set_tracestate(tracestate),
            None => {
                meta.remove(TRACESTATE);
            }
        }
    }
}
