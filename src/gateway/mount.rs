//! One running mount: its config, its shared upstream session, its catalog
//! and its health.
//!
//! Every mount has one shared upstream session, opened at start-up. For a
//! `shared` mount it serves every downstream session; for a `per_session`
//! mount it is only used for discovery, so the catalog is known (and
//! `list_changed` heard) before any client calls the mount.

use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::Serialize;

use crate::{
    catalog::{MountCatalog, MountView},
    config::MountConfig,
    upstream::{self, UpstreamError, UpstreamEvents, UpstreamHandler, UpstreamSession},
};

/// Where a mount is in its life, as shown by `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MountPhase {
    /// First discovery not finished yet.
    Starting,
    /// Discovered; serving.
    Ready,
    /// First discovery failed; calls get an error naming the cause.
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct MountStatus {
    pub phase: MountPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

pub struct Mount {
    pub config: MountConfig,
    pub catalog: ArcSwap<MountCatalog>,
    shared: ArcSwapOption<UpstreamSession>,
    /// Serializes (re)opening the shared session so concurrent first calls
    /// start one upstream, not many.
    opening: tokio::sync::Mutex<()>,
    status: Mutex<MountStatus>,
    events: Arc<dyn UpstreamEvents>,
}

impl Mount {
    pub fn new(config: MountConfig, events: Arc<dyn UpstreamEvents>) -> Self {
        Self {
            config,
            catalog: ArcSwap::from_pointee(MountCatalog::default()),
            shared: ArcSwapOption::empty(),
            opening: tokio::sync::Mutex::new(()),
            status: Mutex::new(MountStatus {
                phase: MountPhase::Starting,
                last_error: None,
            }),
            events,
        }
    }

    pub fn view(&self) -> MountView {
        MountView {
            mount: self.config.name.clone(),
            namespace: self.config.namespace.clone(),
            catalog: self.catalog.load_full(),
        }
    }

    pub fn status(&self) -> MountStatus {
        self.status
            .lock()
            .map(|status| status.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    pub fn set_status(&self, phase: MountPhase, last_error: Option<String>) {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        status.phase = phase;
        status.last_error = last_error;
    }

    /// The live shared session, opening a new one if there is none or the
    /// last one has ended (its child exited, its HTTP session failed).
    pub async fn shared_session(&self) -> Result<Arc<UpstreamSession>, UpstreamError> {
        if let Some(session) = self.shared.load_full().filter(|s| s.is_alive()) {
            return Ok(session);
        }
        let _opening = self.opening.lock().await;
        if let Some(session) = self.shared.load_full().filter(|s| s.is_alive()) {
            return Ok(session);
        }
        let info = upstream::connect::client_config(gateway_client_capabilities());
        let handler = UpstreamHandler::new(info, self.events.clone());
        let session = Arc::new(upstream::open(&self.config, handler).await?);
        tracing::info!(mount = %self.config.name, pid = ?session.pid(), "shared upstream session open");
        self.shared.store(Some(session.clone()));
        Ok(session)
    }

    /// Ends the shared session, if any.
    pub async fn close(&self) {
        if let Some(session) = self.shared.swap(None) {
            session.close().await;
        }
    }
}

/// What the gateway declares on shared sessions: everything it can relay,
/// so capability-gated upstream features are discovered; requests needing
/// a capability the calling client lacks are refused at routing time.
pub fn gateway_client_capabilities() -> rmcp::model::ClientCapabilities {
    // Built from JSON: rmcp's builder marks the handshake-era capabilities
    // deprecated (SEP-2577), but handshake-era upstreams are what we speak to.
    serde_json::from_value(serde_json::json!({
        "roots": {"listChanged": true},
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
    }))
    .unwrap_or_default()
}
