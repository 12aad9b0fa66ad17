//! Upstream sessions: one MCP client connection to one upstream server.
//!
//! [`connect`] turns a mount's transport config into a running rmcp client
//! (a stdio child in its own process group, or Streamable HTTP);
//! [`handler`] is what that client does with what the upstream sends;
//! [`discovery`] reads the upstream's lists. Nothing here knows about
//! downstream sessions: events go out through [`UpstreamEvents`].

pub mod connect;
pub mod discovery;
pub mod handler;
pub mod http_client;
pub mod ordered;
pub mod process_group;
pub mod profile;
pub mod relay;

use std::sync::{Arc, Mutex};

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
pub use handler::{ListKind, UpstreamEvents, UpstreamHandler};
pub use profile::ClientProfile;
pub use relay::{Caller, LogLevelSetting, Relay};

use crate::naming::MountName;

/// A live upstream session. Dropping it ends the session (the child process
/// is killed); [`UpstreamSession::close`] ends it gracefully.
pub struct UpstreamSession {
    mount: MountName,
    peer: Peer<RoleClient>,
    /// Taken out by `close`; a std mutex because it is never held across an
    /// await.
    service: Mutex<Option<RunningService<RoleClient, UpstreamHandler>>>,
    /// The child's pid for stdio upstreams, for logs and tests.
    pid: Option<u32>,
    /// Attributes what the upstream sends to the downstream caller.
    relay: Arc<Relay>,
    /// Kills a stdio upstream's process group when this session goes away.
    group: Mutex<process_group::ProcessGroupGuard>,
}

impl UpstreamSession {
    pub fn mount(&self) -> &MountName {
        &self.mount
    }

    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Sends `request` upstream on behalf of `caller` and waits for the
    /// answer. While it is in flight, what the upstream sends about it is
    /// relayed to the caller. If `cancel` fires, or this future is dropped,
    /// the upstream gets `notifications/cancelled` with its own request id.
    pub async fn request(
        &self,
        request: ClientRequest,
        caller: Caller,
        cancel: &CancellationToken,
    ) -> Result<ServerResult, ServiceError> {
        let method = request.method().to_owned();
        let span = tracing::info_span!(
            "mcp.upstream.request",
            otel.name = %format!("{method} {}", self.mount),
            otel.kind = "client",
            mcp.method.name = %method,
            junction.mount = %self.mount,
            rpc.jsonrpc.error_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let answer = self
            .request_in_span(request, caller, cancel)
            .instrument(span.clone())
            .await;
        if let Err(error) = &answer {
            if let ServiceError::McpError(error) = error {
                span.record("rpc.jsonrpc.error_code", error.code.0);
            }
            span.record("otel.status_code", "ERROR");
        }
        metrics()
            .upstream_duration
            .get_or_create(&UpstreamLabels {
                mount: self.mount.as_str().to_owned(),
                method,
            })
            .observe(started.elapsed().as_secs_f64());
        answer
    }

    async fn request_in_span(
        &self,
        mut request: ClientRequest,
        caller: Caller,
        cancel: &CancellationToken,
    ) -> Result<ServerResult, ServiceError> {
        // The upstream continues the client's trace (W3C, in `_meta`).
        crate::telemetry::context::inject_into(&mut request.get_meta_mut().0);
        let handle = self
            .peer
            .send_cancellable_request(request, Default::default())
            .await?;
        let _inflight =
            self.relay
                .register(handle.id.clone(), handle.progress_token.clone(), caller);
        let mut cancel_guard = CancelUpstreamOnDrop {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answer = tokio::select! {
            answer = handle.await_response() => answer,
            _ = cancel.cancelled() => {
                return Err(ServiceError::Cancelled {
                    reason: Some("cancelled by the client".to_owned()),
                });
            }
        };
        cancel_guard.id = None;
        // Progress and logs the upstream sent before answering go first.
        self.relay.drain().await;
        answer
    }

    /// Whether the connection still runs (the child has not exited, the HTTP
    /// session has not failed).
    pub fn is_alive(&self) -> bool {
        !self.peer.is_transport_closed()
    }

    /// Ends the session: a stdio child gets EOF, then SIGTERM, then SIGKILL;
    /// an HTTP session gets its DELETE. Idempotent.
    pub async fn close(&self) {
        let service = self.service.lock().ok().and_then(|mut slot| slot.take());
        if let Some(service) = service {
            if let Err(error) = service.cancel().await {
                tracing::debug!(mount = %self.mount, %error, "upstream session ended with an error");
            }
        }
        // The leader exited (stdin closed, then SIGTERM, then SIGKILL);
        // anything it started that is still running goes too.
        if let Ok(mut group) = self.group.lock() {
            group.kill();
        }
    }
}

impl Drop for UpstreamSession {
    fn drop(&mut self) {
        metrics().upstream_session_closed(self.mount.as_str());
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

/// Sends the upstream a cancel for a request the gateway stopped waiting for.
struct CancelUpstreamOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once the request completed.
    id: Option<RequestId>,
}

impl Drop for CancelUpstreamOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some("cancelled by the client".to_owned()),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = peer.send_notification(notification.into()).await {
                    tracing::debug!(%error, "could not send a cancel upstream");
                }
            });
        }
    }
}
