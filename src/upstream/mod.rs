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

use std::sync::Mutex;

use rmcp::{service::RunningService, Peer, RoleClient};

pub use connect::{open, UpstreamError};
pub use handler::{ListKind, UpstreamEvents, UpstreamHandler};

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
