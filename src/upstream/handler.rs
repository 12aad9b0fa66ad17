//! The rmcp client handler of an upstream session.
//!
//! It declares the client capabilities the session was opened with (so
//! capability-gated upstream tools appear) and turns what the upstream
//! sends into calls on [`UpstreamEvents`], which the gateway implements
//! differently for a mount's shared session and for a per-session one.

use std::sync::Arc;

use rmcp::{
    model::{ClientConfig, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam},
    service::NotificationContext,
    ClientHandler, RoleClient,
};

/// Which list an upstream said has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    /// Resources and resource templates (one notification covers both).
    Resources,
}

/// Where an upstream session's events go. Implementations must not block:
/// they run on the upstream connection's task.
pub trait UpstreamEvents: Send + Sync + 'static {
    fn list_changed(&self, kind: ListKind);
    fn logging_message(&self, params: LoggingMessageNotificationParam);
    fn resource_updated(&self, params: ResourceUpdatedNotificationParam);
}

#[derive(Clone)]
pub struct UpstreamHandler {
    info: ClientConfig,
    events: Arc<dyn UpstreamEvents>,
}

impl UpstreamHandler {
    pub fn new(info: ClientConfig, events: Arc<dyn UpstreamEvents>) -> Self {
        Self { info, events }
    }
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.list_changed(ListKind::Tools);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.list_changed(ListKind::Prompts);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.list_changed(ListKind::Resources);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.logging_message(params);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.resource_updated(params);
    }
}
