//! Reading an upstream's lists into a [`MountCatalog`].
//!
//! Only lists the upstream declared a capability for are requested (asking
//! for others gets "method not found" from strict servers). rmcp's
//! `list_all_*` follow every `nextCursor`, so no page is dropped.

use rmcp::{service::ServiceError, Peer, RoleClient};

use super::ListKind;
use crate::catalog::MountCatalog;

/// Reads every list the upstream offers.
pub async fn discover(peer: &Peer<RoleClient>) -> Result<MountCatalog, ServiceError> {
    let mut catalog = MountCatalog::default();
    for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
        refresh(peer, kind, &mut catalog).await?;
    }
    Ok(catalog)
}

/// Re-reads one list into `catalog`, leaving the others as they are.
pub async fn refresh(
    peer: &Peer<RoleClient>,
    kind: ListKind,
    catalog: &mut MountCatalog,
) -> Result<(), ServiceError> {
    let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
    let declared = |check: fn(&rmcp::model::ServerCapabilities) -> bool| {
        capabilities.as_ref().is_some_and(check)
    };
    match kind {
        ListKind::Tools => {
            catalog.tools = if declared(|c| c.tools.is_some()) {
                peer.list_all_tools().await?
            } else {
                Vec::new()
            };
        }
        ListKind::Prompts => {
            catalog.prompts = if declared(|c| c.prompts.is_some()) {
                peer.list_all_prompts().await?
            } else {
                Vec::new()
            };
        }
        ListKind::Resources => {
            if declared(|c| c.resources.is_some()) {
                catalog.resources = peer.list_all_resources().await?;
                catalog.templates = peer.list_all_resource_templates().await?;
            } else {
                catalog.resources = Vec::new();
                catalog.templates = Vec::new();
            }
        }
    }
    Ok(())
}

/// Copies the `kind` lists of `fresh` into `catalog`, leaving the others.
/// Refreshes of different lists run concurrently; each must write back
/// only its own list, or the slower one would put back a stale copy of the
/// other's.
pub fn replace_kind(catalog: &mut MountCatalog, kind: ListKind, fresh: MountCatalog) {
    match kind {
        ListKind::Tools => catalog.tools = fresh.tools,
        ListKind::Prompts => catalog.prompts = fresh.prompts,
        ListKind::Resources => {
            catalog.resources = fresh.resources;
            catalog.templates = fresh.templates;
        }
    }
}
