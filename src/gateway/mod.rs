//! The running gateway: mounts, the merged discovery cache, and the
//! registry of downstream sessions.
//!
//! [`Gateway::new`] builds everything from a [`Config`] without touching the
//! network; [`Gateway::start`] then discovers every mount in the background,
//! each on its own task, so a slow or dead upstream delays only its own
//! tools. The merged catalog is rebuilt whenever one mount's catalog changes
//! and swapped in atomically; readers never lock.

mod mount;
mod sessions;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Weak,
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use rmcp::model::{LoggingMessageNotificationParam, ResourceUpdatedNotificationParam};
use tokio_util::task::TaskTracker;

pub use mount::{gateway_client_capabilities, Mount, MountPhase, MountStatus};
pub use sessions::{notify_list_changed, SessionKey, SessionRegistry};

use crate::{
    catalog::{MergedCatalog, MountCatalog, MountView},
    config::Config,
    naming::MountName,
    upstream::{discovery, ListKind, UpstreamEvents},
};

pub struct Gateway {
    config: Config,
    /// In config order, which decides name collisions.
    mounts: Vec<Arc<Mount>>,
    catalog: ArcSwap<MergedCatalog>,
    generation: AtomicU64,
    sessions: SessionRegistry,
    /// Tracks live downstream sessions (each holds a token) and the tasks
    /// closing their per-session upstreams, so shutdown can wait for both.
    session_tasks: TaskTracker,
}

/// How long shutdown waits for downstream sessions to end and their
/// per-session upstreams to close, before the process exits anyway (stdio
/// children are then killed with the process group on drop).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl Gateway {
    pub fn new(config: Config) -> Arc<Self> {
        Arc::new_cyclic(|gateway: &Weak<Gateway>| {
            let mounts = config
                .mounts
                .iter()
                .map(|mount| {
                    let events = Arc::new(SharedSessionEvents {
                        gateway: gateway.clone(),
                        mount: mount.name.clone(),
                    });
                    Arc::new(Mount::new(mount.clone(), events))
                })
                .collect();
            Gateway {
                config,
                mounts,
                catalog: ArcSwap::from_pointee(MergedCatalog::default()),
                generation: AtomicU64::new(0),
                sessions: SessionRegistry::default(),
                session_tasks: TaskTracker::new(),
            }
        })
    }

    /// Starts discovery of every mount in the background.
    pub fn start(self: &Arc<Self>) {
        self.rebuild_catalog();
        for mount in &self.mounts {
            let gateway = self.clone();
            let mount = mount.clone();
            tokio::spawn(async move { gateway.discover_mount(&mount).await });
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn mounts(&self) -> &[Arc<Mount>] {
        &self.mounts
    }

    pub fn mount(&self, name: &MountName) -> Option<&Arc<Mount>> {
        self.mounts.iter().find(|mount| &mount.config.name == name)
    }

    pub fn sessions(&self) -> &SessionRegistry {
        &self.sessions
    }

    /// The merged catalog every session sees unless its own per-session
    /// upstream diverged.
    pub fn catalog(&self) -> Arc<MergedCatalog> {
        self.catalog.load_full()
    }

    /// True once every mount's first discovery has finished, either way.
    pub fn is_ready(&self) -> bool {
        self.mounts
            .iter()
            .all(|mount| mount.status().phase != MountPhase::Starting)
    }

    /// A merged catalog in which some mounts' catalogs are replaced, for a
    /// session whose per-session upstream announced its own lists.
    pub fn catalog_with(&self, overrides: &HashMap<MountName, Arc<MountCatalog>>) -> MergedCatalog {
        let views: Vec<MountView> = self
            .mounts
            .iter()
            .map(|mount| {
                let mut view = mount.view();
                if let Some(catalog) = overrides.get(&mount.config.name) {
                    view.catalog = catalog.clone();
                }
                view
            })
            .collect();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        MergedCatalog::build(generation, &self.config.server.separator, &views).0
    }

    /// Where downstream sessions register themselves and spawn the closing
    /// of their per-session upstreams.
    pub fn session_tasks(&self) -> &TaskTracker {
        &self.session_tasks
    }

    /// After the HTTP server stopped: waits (bounded) for the downstream
    /// sessions to end and close their per-session upstreams, then closes
    /// every shared upstream session.
    pub async fn shutdown(&self) {
        self.session_tasks.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.session_tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "sessions still closing after the grace period");
        }
        let closing = self.mounts.iter().map(|mount| mount.close());
        futures::future::join_all(closing).await;
    }

    async fn discover_mount(&self, mount: &Mount) {
        let name = &mount.config.name;
        let result = async {
            let session = mount.shared_session().await.map_err(|e| e.to_string())?;
            discovery::discover(session.peer())
                .await
                .map_err(|e| format!("discovery failed: {e}"))
        }
        .await;
        match result {
            Ok(catalog) => {
                tracing::info!(
                    mount = %name,
                    tools = catalog.tools.len(),
                    prompts = catalog.prompts.len(),
                    resources = catalog.resources.len(),
                    templates = catalog.templates.len(),
                    "mount discovered"
                );
                mount.catalog.store(Arc::new(catalog));
                mount.set_status(MountPhase::Ready, None);
                self.rebuild_catalog();
                for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                    self.sessions.notify_list_changed(kind, |_| true);
                }
            }
            Err(error) => {
                tracing::warn!(mount = %name, %error, "mount unavailable");
                mount.set_status(MountPhase::Failed, Some(error));
            }
        }
    }

    /// Re-reads one list of a mount after its shared session said it changed,
    /// then tells every session.
    async fn refresh_mount(&self, name: &MountName, kind: ListKind) {
        let Some(mount) = self.mount(name) else {
            return;
        };
        let Ok(session) = mount.shared_session().await else {
            return;
        };
        let mut catalog = MountCatalog::clone(&mount.catalog.load());
        if let Err(error) = discovery::refresh(session.peer(), kind, &mut catalog).await {
            tracing::warn!(mount = %name, %error, ?kind, "refresh after list_changed failed");
            return;
        }
        mount.catalog.store(Arc::new(catalog));
        self.rebuild_catalog();
        self.sessions.notify_list_changed(kind, |_| true);
    }

    fn rebuild_catalog(&self) {
        let views: Vec<MountView> = self.mounts.iter().map(|mount| mount.view()).collect();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (merged, collisions) =
            MergedCatalog::build(generation, &self.config.server.separator, &views);
        for collision in collisions {
            tracing::warn!(
                kind = collision.kind,
                name = %collision.name,
                kept = %collision.kept,
                dropped = %collision.dropped,
                "name collision: {} {:?} is served by mounts {} and {}; keeping {}",
                collision.kind,
                collision.name,
                collision.kept,
                collision.dropped,
                collision.kept
            );
        }
        self.catalog.store(Arc::new(merged));
    }
}

/// Events of a mount's shared upstream session.
struct SharedSessionEvents {
    gateway: Weak<Gateway>,
    mount: MountName,
}

impl UpstreamEvents for SharedSessionEvents {
    fn list_changed(&self, kind: ListKind) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let mount = self.mount.clone();
        tokio::spawn(async move { gateway.refresh_mount(&mount, kind).await });
    }

    fn logging_message(&self, params: LoggingMessageNotificationParam) {
        // A shared session's log message cannot be tied to one downstream
        // session here; it is logged, never broadcast.
        tracing::debug!(mount = %self.mount, level = ?params.level, data = %params.data, "upstream log message");
    }

    fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let Some(mount) = gateway.mount(&self.mount) else {
            return;
        };
        let uri = mount.config.namespace.qualify_uri(&params.uri);
        gateway.sessions.notify_resource_updated(&uri);
    }
}
