//! Admitting one downstream request: the per-session concurrency limit.
//!
//! Every handler method runs through [`DownstreamSession::handle`], which
//! takes a slot before the work starts and gives it back when the work ends
//! (or the request is dropped), and refuses a request outside a session
//! ([`stateless_refused`]). A session already at
//! `[limits] max_concurrent_requests` gets a JSON-RPC error at once for the
//! extra request; its other requests and every other session are
//! unaffected.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use rmcp::{service::RequestContext, ErrorData, RoleServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    observe::{observe, Outcome, RequestOrigin},
    DownstreamSession,
};

/// JSON-RPC error code for a request refused by a limit (implementation-
/// defined server error range).
pub const LIMIT_EXCEEDED: i32 = -32000;

/// Requests in flight in one session.
pub(crate) struct RequestSlots {
    in_flight: Arc<AtomicUsize>,
    /// The gateway's [`crate::gateway::Gateway::cut_off`]: cancelled when
    /// shutdown gives up on the requests still in flight.
    cut_off: CancellationToken,
}

/// One admitted request; dropping it frees the slot.
pub(crate) struct RequestPermit {
    slots: Arc<AtomicUsize>,
}

impl Drop for RequestPermit {
    fn drop(&mut self) {
        self.slots.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RequestSlots {
    pub(crate) fn new(cut_off: CancellationToken) -> Self {
        Self {
            in_flight: Default::default(),
            cut_off,
        }
    }

    /// Requests in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn admit(&self, limit: usize) -> Result<RequestPermit, ErrorData> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let permit = RequestPermit {
            slots: self.in_flight.clone(),
        };
        if before >= limit {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode(LIMIT_EXCEEDED),
                format!(
                    "too many concurrent requests in this session (max_concurrent_requests = {limit}); wait for an answer before sending more"
                ),
                Some(json!({ "limit": limit })),
            ));
        }
        Ok(permit)
    }
}

impl DownstreamSession {
    /// Admits, observes (span, metrics) and runs one request's `work`.
    pub(crate) fn handle<'a, T, W>(
        &'a self,
        method: &'static str,
        context: &'a RequestContext<RoleServer>,
        work: W,
    ) -> impl Future<Output = Result<T, ErrorData>> + 'a
    where
        T: Outcome + 'a,
        W: Future<Output = Result<T, ErrorData>> + 'a,
    {
        let limit = self.gateway.config().limits.max_concurrent_requests;
        let state = self.state();
        let initialized = method == "initialize" || state.initialize.get().is_some();
        if let Some(headers) = super::http_headers(context) {
            state.note_client_headers(&self.gateway, headers);
        }
        let session_ended = state.ended();
        let client_cancel = context.ct.clone();
        admit_and_observe(
            &state.requests,
            limit,
            method,
            RequestOrigin {
                session_fingerprint: state.fingerprint(),
                ..RequestOrigin::of(context)
            },
            async move {
                if !initialized {
                    return Err(stateless_refused());
                }
                // rmcp lets the requests its handler runs go on for 5 s
                // after their session closed (a DELETE, the idle timeout),
                // then drops them: the upstream kept working for nobody,
                // and was told at last that the client cancelled.
                let mut work = std::pin::pin!(Some(work));
                tokio::select! {
                    answer = work.as_mut().as_pin_mut().expect("the work is dropped only below") => answer,
                    () = session_ended.cancelled() => {
                        // Counted as cancelled, as rmcp would have it.
                        client_cancel.cancel();
                        crate::upstream::dropping_because("the client's session ended", || {
                            work.set(None);
                        });
                        Err(ErrorData::invalid_request("the session has ended", None))
                    }
                }
            },
        )
    }
}

/// The answer to a request that reached the handler outside any session.
///
/// rmcp serves a request whose `_meta` carries
/// `io.modelcontextprotocol/protocolVersion` and `…/clientCapabilities`
/// (2026-07-28's stateless lifecycle) on a handler made for it alone,
/// whatever version it names and even with an `Mcp-Session-Id`. The
/// gateway speaks versions up to 2025-11-25, where every request but
/// `initialize` belongs to an initialized session: served that way it
/// would escape its session's limits, log level and per-session mounts
/// (and `max_concurrent_requests` altogether). Only such a request meets a
/// handler never initialized: rmcp's session path starts with `initialize`.
fn stateless_refused() -> ErrorData {
    ErrorData::invalid_request(
        "this gateway speaks MCP up to 2025-11-25 and serves no request outside a session: \
         send initialize first, then the request with its Mcp-Session-Id and without \
         io.modelcontextprotocol/protocolVersion and clientCapabilities in _meta",
        None,
    )
}

/// What [`DownstreamSession::handle`] does, for a request answered
/// without going through rmcp's handler (`downstream/prebuilt.rs`): takes
/// a slot in `slots` under `limit`, then runs `work` observed.
pub(crate) fn admit_and_observe<'a, T, W>(
    slots: &RequestSlots,
    limit: usize,
    method: &'static str,
    origin: RequestOrigin<'a>,
    work: W,
) -> impl Future<Output = Result<T, ErrorData>> + 'a
where
    T: Outcome + 'a,
    W: Future<Output = Result<T, ErrorData>> + 'a,
{
    let admitted = slots.admit(limit);
    let cut_off = slots.cut_off.clone();
    // Boxed here, once: a proxied call's work is a future of ~8 KB, and
    // captured by value it was copied twice more, into this block and
    // into `observe`'s box (~6% of a call's instructions, callgrind).
    let work = Box::pin(work);
    observe(method, origin, async move {
        let _permit = admitted?;
        // In an `Option` to be dropped where the upstream can be told why.
        let mut work = Some(work);
        tokio::select! {
            answer = work.as_mut().expect("the work is dropped only below") => answer,
            () = cut_off.cancelled() => {
                // Dropping the work cancels what it sent upstream.
                crate::upstream::dropping_because("the gateway is shutting down", || {
                    work = None;
                });
                Err(cut_off_by_shutdown())
            }
        }
    })
}

/// The answer to a request still unanswered when shutdown's grace ended:
/// its client is told, rather than finding its stream closed mid-call.
fn cut_off_by_shutdown() -> ErrorData {
    ErrorData::internal_error(
        "the gateway is shutting down and this request was still unanswered after \
         server.shutdown_grace; it was cancelled upstream (send it again to another instance)",
        None,
    )
}
