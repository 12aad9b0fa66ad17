//! Upstream sessions: one MCP client connection to one upstream server.
//!
//! [`connect`] turns a mount's transport config into a running rmcp client
//! (a stdio child in its own process group, or Streamable HTTP);
//! [`handler`] is what that client does with what the upstream sends;
//! [`discovery`] reads the upstream's lists. Nothing here knows about
//! downstream sessions: events go out through [`UpstreamEvents`].

mod bounded_map;
mod call_body;
pub mod child;
pub mod connect;
mod deep_nesting;
mod detached;
pub mod direct_call;
pub mod discovery;
#[cfg(target_os = "linux")]
mod exit_watch;
pub mod handler;
pub mod http_client;
mod idless_errors;
mod legacy_sse;
mod lenient_tools;
pub mod live_headers;
mod malformed;
pub mod ordered;
mod overlong_line;
mod oversized_event;
pub mod process_group;
pub mod profile;
mod quoted_error;
pub mod raw;
mod raw_post;
pub mod relay;
pub mod same_task_http;
mod stderr;
#[cfg(test)]
mod tests;
mod unanswered;
mod unicode_repair;
pub mod unreadable_answer;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::Either;
use rmcp::model::GetMeta;
use rmcp::{
    model::{
        CancelledNotification, CancelledNotificationParam, ClientRequest, RequestId, ServerResult,
    },
    service::{RunningService, ServiceError},
    Peer, RoleClient,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::telemetry::metrics::{metrics, UpstreamLabels};

pub use connect::{open, UpstreamError};
pub use detached::kill_every_tagged;
pub use handler::{ListKind, UpstreamEvents, UpstreamHandler};
pub use live_headers::LiveHeaders;
pub use profile::ClientProfile;
pub use relay::InflightGuard;
pub use relay::{Caller, LogLevelSetting, Relay};

use crate::naming::MountName;

/// A live upstream session. Dropping it ends the session (the child process
/// is killed); [`UpstreamSession::close`] ends it gracefully.
pub struct UpstreamSession {
    /// Unique among the sessions this process opened: what the upstream
    /// said in one session (a task id) means nothing in the next.
    id: u64,
    mount: MountName,
    /// `pipe` (stdio) or `tcp`, for spans.
    network_transport: &'static str,
    peer: Peer<RoleClient>,
    /// Taken out by `close`; a std mutex because it is never held across an
    /// await.
    service: Mutex<Option<RunningService<RoleClient, UpstreamHandler>>>,
    /// Held by a `close` from start to end: a second one waits for the
    /// first's graceful stop instead of killing the group under it.
    closing: tokio::sync::Mutex<()>,
    /// The child's pid for stdio upstreams, for logs and tests.
    pid: Option<u32>,
    /// Attributes what the upstream sends to the downstream caller.
    relay: Arc<Relay>,
    /// Answers the gateway needs as the upstream wrote them.
    raw: Arc<raw::RawAnswers>,
    /// Kills a stdio upstream's process group when this session goes away.
    group: Mutex<process_group::ProcessGroupGuard>,
    /// Cancelled when the connection ends, however it ends.
    ended: CancellationToken,
    /// Cancelled (before `ended`) when an HTTP upstream said it does not
    /// know the session: it restarted or let the session expire, and is
    /// there to open a new one at once.
    expired: CancellationToken,
    /// `tools/call` without rmcp's client, for Streamable HTTP upstreams.
    direct: Option<Arc<direct_call::DirectCalls>>,
    /// Whether the `upstream_sessions` gauge still counts this session: it
    /// stops at the close (a dead session may be held a while longer), or
    /// at the drop of one never closed.
    counted: std::sync::atomic::AtomicBool,
    /// Set while a liveness check runs (see `check_alive`).
    checking_alive: Arc<std::sync::atomic::AtomicBool>,
    /// Set (before `ended`) when a liveness check ended the session: the
    /// upstream answered nothing, not even a ping.
    unresponsive: Arc<std::sync::atomic::AtomicBool>,
    /// What the session holds until it is closed (a per-session upstream's
    /// place under its mount's `max_upstream_sessions`): given back once
    /// the child and its group are gone, not when the session is merely
    /// seen to have ended, so that whoever waits for [`Self::close`] finds
    /// it given back.
    held_until_closed: Mutex<Option<Box<dyn Send>>>,
    /// The server answered `completion/complete` with -32601: it will not
    /// be asked again in this session (clients ask on every keystroke).
    no_completion: std::sync::atomic::AtomicBool,
    /// Run when a request finds the server unreachable (see
    /// [`Self::when_unreachable`]).
    on_unreachable: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Cancels on their way to the upstream (see `CancelUpstreamOnDrop`):
    /// [`Self::close`] lets them go out first.
    cancels_sending: Arc<CancelsSending>,
}

/// A count of cancels being sent, and its change to zero.
#[derive(Default)]
pub(crate) struct CancelsSending {
    count: std::sync::atomic::AtomicUsize,
    none_left: tokio::sync::Notify,
}

/// How long [`UpstreamSession::close`] waits for cancels being sent. A
/// session's calls are dropped as it ends (a DELETE, a shutdown), each
/// sending its cancel from a task of its own: a close that won the race
/// dropped them, and a server that does not cancel a session's work on
/// its DELETE ran the calls to their end.
const CANCELS_SEND_WAIT: Duration = Duration::from_millis(500);

/// How long a ping after a timed-out request may take before the upstream
/// counts as gone: a server that answers anything answers a ping at once.
const LIVENESS_WAIT: Duration = Duration::from_secs(5);

/// Whether something still serves `peer`'s session: a ping answered within
/// [`LIVENESS_WAIT`] (a server that answers anything answers a ping at
/// once).
pub(crate) async fn answers_ping(peer: &Peer<RoleClient>) -> bool {
    ping(peer).await == Ping::Answered
}

/// What became of a ping.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ping {
    /// With a result or an error: the server reads what it is sent.
    Answered,
    /// No answer within [`LIVENESS_WAIT`].
    Unanswered,
    /// It could not be sent, or the connection ended before an answer.
    Failed,
}

/// Pings `peer`, waiting at most [`LIVENESS_WAIT`].
pub(crate) async fn ping(peer: &Peer<RoleClient>) -> Ping {
    let ping = ClientRequest::PingRequest(Default::default());
    match tokio::time::timeout(LIVENESS_WAIT, peer.send_request(ping)).await {
        // An error answer (a server without `ping`: -32601) is an answer.
        Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_))) => Ping::Answered,
        Ok(Err(_)) => Ping::Failed,
        Err(_) => Ping::Unanswered,
    }
}

/// How long one upstream request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimit {
    /// With no answer and no progress notification for this long, the
    /// request fails; each progress notification starts the wait again.
    pub idle: Duration,
    /// The request fails after this long whatever it reports.
    pub ceiling: Duration,
}

/// An upstream request's answer.
struct Exchange {
    typed: ServerResult,
    /// As written, for requests marked by [`raw::wants_raw_answer`], when
    /// it was seen.
    raw: Option<serde_json::Value>,
    /// The token rmcp sent the request with.
    progress_token: rmcp::model::ProgressToken,
    /// The request, still counted in flight (see [`RawExchange::inflight`]).
    inflight: InflightGuard,
}

/// The answer to [`UpstreamSession::request_raw`].
pub struct RawExchange {
    /// The upstream's `result`, as written.
    pub result: serde_json::Value,
    /// The progress token the request was sent with upstream.
    pub progress_token: rmcp::model::ProgressToken,
    /// The request stays in flight (for attribution) until this is
    /// dropped: a caller recording what the answer created (a task) drops
    /// it after, so that what the upstream sends about it meanwhile is
    /// not taken for another session's.
    pub inflight: InflightGuard,
}

/// Why an upstream request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Service(ServiceError),
    #[error("no answer and no progress within {}; the request was cancelled upstream", humantime::format_duration(*.0))]
    Idle(Duration),
    #[error("no answer within the {} ceiling; the request was cancelled upstream", humantime::format_duration(*.0))]
    Ceiling(Duration),
    #[error("the upstream server went away during the request")]
    Ended,
    /// A Streamable HTTP request's own answer stream ended before its
    /// answer, the session going on (rmcp reports it as a closed
    /// transport).
    #[error("the upstream's answer stream ended before its answer; the request may have run, and was cancelled upstream")]
    AnswerLost,
    /// The server could not be reached at all (a refused connection, no
    /// route): the request was not sent, and the session is over.
    #[error("cannot reach the upstream server: {0}")]
    Unreachable(String),
    /// The upstream no longer knew the session (it restarted, or let the
    /// session expire). `unrun`: it refused the request itself, which a
    /// new session may send again (`unsent`, when the request was handed
    /// back); otherwise the request may have run.
    #[error("the upstream server no longer knew the gateway's session (it restarted or expired it){}", if *.unrun { "; the request was not run" } else { "" })]
    Expired {
        unrun: bool,
        unsent: Option<Box<ClientRequest>>,
    },
}

impl From<ServiceError> for RequestError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::TransportClosed => RequestError::Ended,
            other => RequestError::Service(other),
        }
    }
}

impl UpstreamSession {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn mount(&self) -> &MountName {
        &self.mount
    }

    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Who, downstream, what this session's upstream sends is for.
    pub fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }

    /// Sends `request` upstream on behalf of `caller` and waits for the
    /// answer. While it is in flight, what the upstream sends about it is
    /// relayed to the caller. If `cancel` fires, `limit` runs out, or this
    /// future is dropped, the upstream gets `notifications/cancelled` with
    /// its own request id. If the connection ends meanwhile, the request
    /// fails at once with [`RequestError::Ended`].
    pub async fn request(
        &self,
        request: ClientRequest,
        caller: Caller,
        cancel: &CancellationToken,
        limit: RequestLimit,
    ) -> Result<ServerResult, RequestError> {
        Ok(self.exchange(request, caller, cancel, limit).await?.typed)
    }

    /// Like [`Self::request`], for a method whose answer the gateway needs
    /// as the upstream wrote it: one rmcp has no type for, or one whose
    /// type would reshape it. Sent as given, answered with the upstream's
    /// own `result` (or, when rmcp parsed it before it could be seen, as
    /// rmcp read it).
    pub async fn request_raw(
        &self,
        method: &str,
        params: serde_json::Map<String, serde_json::Value>,
        caller: Caller,
        cancel: &CancellationToken,
        limit: RequestLimit,
    ) -> Result<RawExchange, RequestError> {
        let request = ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(
            method.to_owned(),
            Some(serde_json::Value::Object(params)),
        ));
        let Exchange {
            typed,
            raw,
            progress_token,
            inflight,
        } = self.exchange(request, caller, cancel, limit).await?;
        let result = match raw {
            Some(raw) => raw,
            None => serde_json::to_value(typed).map_err(|error| {
                RequestError::Service(ServiceError::McpError(rmcp::ErrorData::internal_error(
                    error.to_string(),
                    None,
                )))
            })?,
        };
        Ok(RawExchange {
            result,
            progress_token,
            inflight,
        })
    }

    /// A request and its answer (see [`Exchange`]).
    async fn exchange(
        &self,
        request: ClientRequest,
        caller: Caller,
        cancel: &CancellationToken,
        limit: RequestLimit,
    ) -> Result<Exchange, RequestError> {
        let method = request.method().to_owned();
        // A span of its own for the trace, and in the log where it says
        // something: for a request made for a downstream request routed
        // here with the same method, the downstream request's span already
        // names method and mount, and this one's creation, entries, exits
        // and end were ~5% of a proxied call (callgrind).
        let span = if !crate::telemetry::exporting_traces()
            && crate::downstream::is_routed_here(&method, &self.mount)
        {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "mcp.upstream.request",
                otel.name = tracing::field::Empty,
                otel.kind = tracing::field::Empty,
                mcp.method.name = method.as_str(),
                junction.mount = %self.mount,
                rpc.jsonrpc.error_code = tracing::field::Empty,
                rpc.response.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
            )
        };
        // Traces only (see `telemetry::exporting_traces`). The name and
        // kind, read before the span starts, are OpenTelemetry's alone: as
        // log fields they were a `format!` and two fields formatted on
        // every call for nothing.
        if crate::telemetry::exporting_traces() {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            span.record("otel.name", format!("{method} {}", self.mount));
            span.record("otel.kind", "client");
            span.set_attribute("network.transport", self.network_transport);
            if let Some(info) = self.peer.peer_info() {
                span.set_attribute("mcp.protocol.version", info.protocol_version.to_string());
            }
        }
        let started = std::time::Instant::now();
        let answer = self
            .request_in_span(request, caller, cancel, limit)
            .instrument(span.clone())
            .await;
        match &answer {
            Ok(Exchange {
                typed: ServerResult::CallToolResult(result),
                ..
            }) if result.is_error == Some(true) => {
                span.record("error.type", "tool_error");
                span.record("otel.status_code", "ERROR");
            }
            Ok(_) => {}
            // Its client cancelled it: no failure of the upstream's.
            Err(RequestError::Service(ServiceError::Cancelled { .. })) => {}
            Err(RequestError::Service(ServiceError::McpError(error))) => {
                let code = error.code.0.to_string();
                span.record("rpc.jsonrpc.error_code", error.code.0);
                span.record("rpc.response.status_code", code.as_str());
                span.record("error.type", code.as_str());
                span.record(
                    "otel.status_description",
                    crate::telemetry::redact::bounded(&error.message),
                );
            }
            Err(error) => {
                if matches!(error, RequestError::Idle(_) | RequestError::Ceiling(_)) {
                    self.check_alive();
                }
                // No JSON-RPC code: the conventions' fallback type.
                span.record("error.type", "_OTHER");
                // Through the redaction: a transport error names the
                // upstream's URL, whose path or query may hold its key.
                let described = match error {
                    RequestError::Service(error) => http_client::with_causes(error),
                    other => other.to_string(),
                };
                span.record(
                    "otel.status_description",
                    crate::telemetry::redact::bounded(&described),
                );
            }
        }
        // How long until its client gave up says nothing of the upstream.
        let cancelled = matches!(
            answer,
            Err(RequestError::Service(ServiceError::Cancelled { .. }))
        );
        if !cancelled {
            metrics()
                .upstream_duration
                .get_or_create(&UpstreamLabels {
                    mount: self.mount.shared_str(),
                    method,
                })
                .observe(started.elapsed().as_secs_f64());
        }
        answer
    }

    async fn request_in_span(
        &self,
        mut request: ClientRequest,
        caller: Caller,
        cancel: &CancellationToken,
        limit: RequestLimit,
    ) -> Result<Exchange, RequestError> {
        // Cancelled while it waited for a catalog, a per-session upstream
        // to open or a shared one to start: not sent at all (the tool's
        // effects would happen; a cancel after it cannot undo them).
        if cancel.is_cancelled() {
            return Err(RequestError::Service(ServiceError::Cancelled {
                reason: Some("cancelled by the client before it was sent".to_owned()),
            }));
        }
        // The upstream continues the client's trace (W3C, in `_meta`).
        crate::telemetry::context::inject_into(&mut request.get_meta_mut().0);
        // Until registered, what the upstream sends about this request
        // waits for it (`Relay::settle`) rather than finding no caller.
        let sending = self.relay.sending();
        let keeps_raw = raw::wants_raw_answer(&request);
        let direct = self
            .direct
            .as_ref()
            .and_then(|calls| Some((calls, calls.prepare(&mut request)?)));
        // Registered before the request goes out (the direct future does
        // nothing until polled), or with rmcp as soon as it is queued.
        // The send futures are boxed: they are several KB each, and every
        // caller up to the handler would hold (and move) them otherwise.
        let is_direct = direct.is_some();
        let (id, progress_token, response) = match direct {
            Some((calls, prepared)) => {
                let (id, token) = (prepared.id.clone(), prepared.progress_token.clone());
                (
                    id,
                    token,
                    Either::Left(Box::pin(calls.call(prepared, request))),
                )
            }
            None => {
                let handle = Box::pin(
                    self.peer
                        .send_cancellable_request(request, Default::default()),
                )
                .await?;
                let (id, token) = (handle.id.clone(), handle.progress_token.clone());
                (id, token, Either::Right(Box::pin(handle.await_response())))
            }
        };
        // The upstream's id for it, in traces only (see
        // `telemetry::exporting_traces`).
        if crate::telemetry::exporting_traces() {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            tracing::Span::current().set_attribute("jsonrpc.request.id", id.to_string());
        }
        // Whatever happens to the request, its mark goes with it.
        let raw_answer = keeps_raw.then(|| TakeRawAnswer {
            raw: &self.raw,
            id: Some(id.clone()),
        });
        let mut inflight =
            self.relay
                .register_sent(sending, id.clone(), progress_token.clone(), caller);
        let mut cancel_guard = CancelUpstreamOnDrop {
            peer: self.peer.clone(),
            id: Some(id),
            reason: "cancelled by the client",
            sending: &self.cancels_sending,
        };
        let ceiling = tokio::time::sleep(limit.ceiling);
        tokio::pin!(ceiling);
        tokio::pin!(response);
        let mut idle_until = tokio::time::Instant::now() + limit.idle;
        // Whether the session's end still ends the wait (see below).
        let mut end_ends_wait = true;
        let answer = loop {
            tokio::select! {
                // An answer that came wins over whatever else is ready:
                // the session ends right after a child's last answer, and
                // by then its caller may not yet have run.
                biased;
                answer = &mut response => break answer,
                _ = cancel.cancelled() => {
                    return Err(RequestError::Service(ServiceError::Cancelled {
                        reason: Some("cancelled by the client".to_owned()),
                    }));
                }
                // A progress notification (or the client's answer to a
                // request within it) says the upstream is still at it.
                _ = inflight.progressed() => {
                    idle_until = tokio::time::Instant::now() + limit.idle;
                }
                _ = tokio::time::sleep_until(idle_until) => {
                    // Waiting for its client (a person answering an
                    // elicitation, a model sampling) is not silence.
                    if inflight.awaiting_client() {
                        idle_until = tokio::time::Instant::now() + limit.idle;
                        continue;
                    }
                    cancel_guard.reason = "timed out at the gateway";
                    return Err(RequestError::Idle(limit.idle));
                }
                _ = &mut ceiling => {
                    cancel_guard.reason = "timed out at the gateway";
                    return Err(RequestError::Ceiling(limit.ceiling));
                }
                // Nobody will answer: fail now rather than at the timeout.
                // Unless the upstream forgot the session (another request
                // was told so): a direct call's POST, sent on the old
                // session, gets its own refusal in a moment, with the
                // request handed back to be sent again; a read (rmcp's)
                // is sent again whatever point it reached.
                _ = self.ended.cancelled(), if end_ends_wait => {
                    cancel_guard.id = None;
                    if self.expired.is_cancelled() {
                        if is_direct {
                            end_ends_wait = false;
                            continue;
                        }
                        return Err(RequestError::Expired { unrun: false, unsent: None });
                    }
                    return Err(RequestError::Ended);
                }
            }
        };
        // An answer rmcp cannot type is an answer all the same.
        if matches!(
            &answer,
            Ok(_) | Err(ServiceError::McpError(_) | ServiceError::UnexpectedResponse)
        ) {
            cancel_guard.id = None;
            inflight.answered();
        } else {
            // The exchange broke (the answer stream dropped, a resume
            // failed) with the request perhaps still running upstream: a
            // disconnection is no cancellation, so the upstream is told, and
            // a client retrying does not run the tool twice at once.
            cancel_guard.reason = "the gateway lost the answer";
        }
        if let Err(ServiceError::McpError(error)) = &answer {
            // A later `notifications/elicitation/complete` for one of the
            // elicitations this error asks for belongs to this caller.
            inflight.elicitations_required(error);
        }
        if let Err(ServiceError::TransportSend(error)) = &answer {
            if http_client::means_session_gone(error) {
                // Nobody to tell of a cancel.
                cancel_guard.id = None;
                // The connection cannot serve another request: end it, so
                // the supervisor (or the next per-session call) reconnects.
                tracing::warn!(mount = %self.mount, error = %http_client::with_causes(&*error.error), "upstream session gone");
                let forgotten = http_client::session_forgotten(error);
                if forgotten.is_some() {
                    self.expired.cancel();
                }
                self.ended.cancel();
                return Err(match forgotten {
                    Some(unrun) => RequestError::Expired {
                        unrun,
                        unsent: http_client::take_unsent(error),
                    },
                    None if http_client::cannot_connect(error) => {
                        if let Some(told) = self.on_unreachable.get() {
                            told();
                        }
                        RequestError::Unreachable(http_client::with_causes(&*error.error))
                    }
                    None => RequestError::Ended,
                });
            }
        }
        // rmcp reports a request's answer stream that ended before its
        // answer as a closed transport; on an HTTP upstream (one stream
        // per request) whose session goes on, it is that request's loss
        // alone, and nothing is restarted.
        if matches!(answer, Err(ServiceError::TransportClosed))
            && self.direct.is_some()
            && self.is_alive()
        {
            return Err(RequestError::AnswerLost);
        }
        // The session ended while the call waited, and rmcp, stopping,
        // dropped its answer unsent: that reads as a closed transport, but
        // it is the end the wait above would have reported, had it been
        // seen first (the answer is taken first when both are ready).
        if matches!(answer, Err(ServiceError::TransportClosed))
            && !is_direct
            && self.ended.is_cancelled()
        {
            cancel_guard.id = None;
            return Err(match self.expired.is_cancelled() {
                true => RequestError::Expired {
                    unrun: false,
                    unsent: None,
                },
                false => RequestError::Ended,
            });
        }
        // Progress and logs the upstream sent before answering go first.
        self.relay.drain().await;
        Ok(Exchange {
            typed: answer?,
            raw: raw_answer.and_then(TakeRawAnswer::take),
            progress_token,
            inflight,
        })
    }

    /// One page of the upstream's tools, typed and as written (`execution`
    /// and other fields rmcp's `Tool` lacks are only in the latter).
    pub async fn list_tools_page(
        &self,
        cursor: Option<String>,
    ) -> Result<(rmcp::model::ListToolsResult, Option<serde_json::Value>), ServiceError> {
        let params = cursor
            .map(|cursor| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let request = ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest {
            params,
            ..Default::default()
        });
        let handle = self
            .peer
            .send_cancellable_request(request, Default::default())
            .await?;
        let raw_answer = TakeRawAnswer {
            raw: &self.raw,
            id: Some(handle.id.clone()),
        };
        match handle.await_response().await? {
            ServerResult::ListToolsResult(result) => Ok((result, raw_answer.take())),
            // A page rmcp could not read whole (one odd tool fails it):
            // read tool by tool from the page as written.
            _ => {
                let raw = raw_answer.take().ok_or(ServiceError::UnexpectedResponse)?;
                let page = lenient_tools::read_page(&raw, &self.mount)
                    .ok_or(ServiceError::UnexpectedResponse)?;
                Ok((page, Some(raw)))
            }
        }
    }

    /// Cancelled when the connection ends (for watchers that must not keep
    /// the session alive).
    pub fn ended_token(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// After a request timed out (or, for a per-session mount's own
    /// sessions, after a per-session upstream could not reach the server):
    /// is the upstream still there? A ping
    /// unanswered within [`LIVENESS_WAIT`] ends the session, so that the
    /// supervisor (or the next per-session call) starts a new one. A stdio
    /// child that stopped reading its stdin (a synchronous tool blocking a
    /// single-threaded server, a deadlock) otherwise took every later
    /// request, each timing out and holding what it carried, while the
    /// mount looked ready. A slow tool leaves the ping answered. One check
    /// at a time.
    pub(crate) fn check_alive(&self) {
        if self
            .checking_alive
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let peer = self.peer.clone();
        let ended = self.ended.clone();
        let checking = self.checking_alive.clone();
        let unresponsive = self.unresponsive.clone();
        let mount = self.mount.clone();
        tokio::spawn(async move {
            let answered = ping(&peer).await;
            if answered != Ping::Answered && !ended.is_cancelled() {
                match answered {
                    Ping::Unanswered => {
                        tracing::warn!(%mount, "the upstream answers nothing (a request timed out or failed, then a ping); ending its session")
                    }
                    _ => {
                        tracing::warn!(%mount, "a ping could not reach the upstream; ending its session")
                    }
                }
                // Only a ping left unanswered says so: one that failed met
                // a connection that ended (a process that exited).
                if answered == Ping::Unanswered {
                    unresponsive.store(true, std::sync::atomic::Ordering::Release);
                }
                ended.cancel();
            }
            checking.store(false, std::sync::atomic::Ordering::Release);
        });
    }

    /// Whether a liveness check ended the session (see `check_alive`): the
    /// upstream answered nothing, not even a ping.
    pub fn ended_unresponsive(&self) -> bool {
        self.unresponsive.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the session ended because the HTTP upstream no longer knew
    /// it (see [`RequestError::Expired`]): the server is there, a new
    /// session can be opened at once.
    pub fn expired(&self) -> bool {
        self.expired.is_cancelled()
    }

    /// Whether a request this session refused unrun may be sent again on
    /// another: only a Streamable HTTP upstream refuses so (its direct
    /// path hands the request back with the refusal; a legacy SSE
    /// session's 404 ends the session but tells nothing of the request).
    pub fn may_refuse_unrun(&self) -> bool {
        self.direct.is_some()
    }

    /// Resolves when the connection has ended (child exited, HTTP session
    /// gone, or closed by the gateway).
    pub async fn ended(&self) {
        self.ended.cancelled().await
    }

    /// Whether the connection still runs (the child has not exited, the HTTP
    /// session has not failed).
    /// Whether `completion/complete` is known not to exist here (see
    /// `no_completion`).
    pub fn lacks_completion(&self) -> bool {
        self.no_completion
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that the server has no `completion/complete`.
    pub fn found_no_completion(&self) {
        self.no_completion
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_alive(&self) -> bool {
        !self.ended.is_cancelled() && !self.peer.is_transport_closed()
    }

    /// Ends the session: a stdio child gets EOF, then SIGTERM, then SIGKILL;
    /// an HTTP session gets its DELETE. Idempotent: a second close (a
    /// session's end racing its mount's retire) returns when the first has
    /// finished. The session counts as ended from the start: requests
    /// still waiting on it fail then, not once the process has exited (a
    /// server that reads no input while it works sees its end of input
    /// only when signalled, seconds later).
    pub async fn close(&self) {
        self.ended.cancel();
        let _one_close_at_a_time = self.closing.lock().await;
        crate::wait_for_zero::wait_for_zero(
            &self.cancels_sending.count,
            &self.cancels_sending.none_left,
            CANCELS_SEND_WAIT,
        )
        .await;
        let service = self.service.lock().ok().and_then(|mut slot| slot.take());
        if let Some(service) = service {
            if let Err(error) = service.cancel().await {
                tracing::debug!(mount = %self.mount, %error, "upstream session ended with an error");
            }
        }
        // The leader exited (stdin closed, then SIGTERM, then SIGKILL);
        // anything it started that is still running goes too.
        let mut group = match self.group.lock() {
            Ok(mut group) => group.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        // Should the runtime be shutting down, the dropped closure kills
        // the group there and then.
        if let Err(error) = tokio::task::spawn_blocking(move || group.kill()).await {
            tracing::debug!(%error, "killing an upstream's process group failed");
        }
        self.uncount();
        let held = match self.held_until_closed.lock() {
            Ok(mut held) => held.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(held);
    }

    /// Runs `told` (once per request that meets it) when a request finds
    /// the server unreachable. A per-session upstream tells its mount so:
    /// the mount's own discovery session, which no call uses, would
    /// otherwise stay "ready" while its server refuses every connection.
    /// Set once, right after the open.
    pub fn when_unreachable(&self, told: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_unreachable.set(Box::new(told));
    }

    /// Keeps `held` until this session is closed (or dropped).
    pub fn hold_until_closed(&self, held: impl Send + 'static) {
        let mut slot = match self.held_until_closed.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = Some(Box::new(held));
    }

    fn uncount(&self) {
        if self
            .counted
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            metrics().upstream_session_closed(self.mount.as_str());
        }
    }
}

impl Drop for UpstreamSession {
    fn drop(&mut self) {
        self.uncount();
    }
}

impl std::fmt::Debug for UpstreamSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSession")
            .field("mount", &self.mount)
            .field("pid", &self.pid)
            .finish()
    }
}

/// Takes a request's raw answer (or forgets its mark, when dropped unused).
struct TakeRawAnswer<'a> {
    raw: &'a raw::RawAnswers,
    /// `None` once taken.
    id: Option<RequestId>,
}

impl TakeRawAnswer<'_> {
    fn take(mut self) -> Option<serde_json::Value> {
        self.raw.take(&self.id.take()?)
    }
}

impl Drop for TakeRawAnswer<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.raw.take(&id);
        }
    }
}

tokio::task_local! {
    /// Why the requests dropped within [`dropping_because`] were given up,
    /// for the cancels their guards send: a guard sees only that it was
    /// dropped, which a client's going away does too.
    static WHY_DROPPED: &'static str;
}

/// Runs `give_up`, in which requests in flight upstream are dropped, with
/// `reason` as what the upstream is told about each (in place of "cancelled
/// by the client").
pub(crate) fn dropping_because(reason: &'static str, give_up: impl FnOnce()) {
    WHY_DROPPED.sync_scope(reason, give_up);
}

/// Sends the upstream a cancel for a request the gateway stopped waiting for.
struct CancelUpstreamOnDrop<'a> {
    peer: Peer<RoleClient>,
    /// `None` once the request completed.
    id: Option<RequestId>,
    reason: &'static str,
    /// The session's count of cancels being sent (cloned only to send one).
    sending: &'a Arc<CancelsSending>,
}

impl Drop for CancelUpstreamOnDrop<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = WHY_DROPPED
            .try_with(|reason| *reason)
            .unwrap_or(self.reason);
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some(reason.to_owned()),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let sending = self.sending.clone();
            sending
                .count
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            runtime.spawn(async move {
                if let Err(error) = peer.send_notification(notification.into()).await {
                    tracing::debug!(error = %http_client::with_causes(&error), "could not send a cancel upstream");
                }
                crate::wait_for_zero::count_down(&sending.count, &sending.none_left);
            });
        }
    }
}
