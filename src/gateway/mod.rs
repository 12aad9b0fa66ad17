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
        Arc, Mutex, Weak,
    },
    time::Duration,
};

use rmcp::model::ResourceUpdatedNotificationParam;
use tokio_util::task::TaskTracker;

pub use mount::{EventsFactory, Mount, MountPhase, MountStatus, ProfileSession};
pub use sessions::{notify_list_changed, SessionKey, SessionRegistry};

use crate::{
    catalog::{MergedCatalog, MountCatalog, MountView},
    coalesce::Coalescer,
    config::Config,
    naming::MountName,
    upstream::{discovery, ClientProfile, ListKind, UpstreamEvents},
};

pub struct Gateway {
    config: Config,
    /// In config order, which decides name collisions.
    mounts: Vec<Arc<Mount>>,
    /// Merged catalogs by client profile, built on first use after a change.
    catalogs: Mutex<HashMap<ClientProfile, Arc<MergedCatalog>>>,
    /// Bumped on every catalog change; cursors carry it.
    generation: AtomicU64,
    sessions: SessionRegistry,
    /// Tracks live downstream sessions (each holds a token) and the tasks
    /// closing their per-session upstreams, so shutdown can wait for both.
    session_tasks: TaskTracker,
    started: std::time::Instant,
    /// One list refresh at a time per mount, profile and list.
    refreshes: Coalescer<(MountName, ClientProfile, ListKind)>,
}

/// How long shutdown waits for downstream sessions to end and their
/// per-session upstreams to close, before the process exits anyway (stdio
/// children are then killed with the process group on drop).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a list call waits for a per-session mount's first discovery
/// for a new client profile before answering with what is known.
pub const PROFILE_DISCOVERY_WAIT: Duration = Duration::from_secs(10);

impl Gateway {
    pub fn new(config: Config) -> Arc<Self> {
        Arc::new_cyclic(|gateway: &Weak<Gateway>| {
            let mounts = config
                .mounts
                .iter()
                .map(|mount| {
                    let gateway = gateway.clone();
                    let name = mount.name.clone();
                    let events: EventsFactory = Box::new(move |profile| {
                        Arc::new(MountSessionEvents {
                            gateway: gateway.clone(),
                            mount: name.clone(),
                            profile,
                        })
                    });
                    Arc::new(Mount::new(mount.clone(), events))
                })
                .collect();
            Gateway {
                config,
                mounts,
                catalogs: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(1),
                sessions: SessionRegistry::default(),
                session_tasks: TaskTracker::new(),
                started: std::time::Instant::now(),
                refreshes: Coalescer::default(),
            }
        })
    }

    /// Starts discovery of every mount in the background.
    pub fn start(self: &Arc<Self>) {
        for mount in &self.mounts {
            let gateway = self.clone();
            let mount = mount.clone();
            tokio::spawn(async move {
                let name = &mount.config.name;
                match mount.discover(ClientProfile::FULL).await {
                    Ok(()) => {
                        mount.set_status(MountPhase::Ready, None);
                        gateway.catalog_changed();
                        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                            gateway.sessions.notify_list_changed(kind, |_| true);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(mount = %name, %error, "mount unavailable");
                        mount.set_status(MountPhase::Failed, Some(error));
                    }
                }
            });
        }
    }

    /// How long this gateway has been running.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
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

    /// True once every mount's first discovery has finished, either way.
    pub fn is_ready(&self) -> bool {
        self.mounts
            .iter()
            .all(|mount| mount.status().phase != MountPhase::Starting)
    }

    /// Makes sure the per-session mounts know their lists for `profile`
    /// (bounded wait); a no-op once done.
    pub async fn prepare(&self, profile: ClientProfile) {
        let pending: Vec<_> = self
            .mounts
            .iter()
            .filter(|mount| {
                let serving = mount.serving_profile(profile);
                serving != ClientProfile::FULL && !mount.is_discovered(serving)
            })
            .map(|mount| async move {
                let serving = mount.serving_profile(profile);
                match tokio::time::timeout(PROFILE_DISCOVERY_WAIT, mount.discover(serving)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(error)) => {
                        tracing::warn!(mount = %mount.config.name, %profile, %error, "discovery for a client profile failed; showing the full list");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(mount = %mount.config.name, %profile, "discovery for a client profile is slow; showing the full list meanwhile");
                        false
                    }
                }
            })
            .collect();
        if pending.is_empty() {
            return;
        }
        if futures::future::join_all(pending)
            .await
            .into_iter()
            .any(|found| found)
        {
            self.catalog_changed();
        }
    }

    /// The merged catalog sessions with `profile` see, unless their own
    /// per-session upstream diverged.
    pub fn catalog(&self, profile: ClientProfile) -> Arc<MergedCatalog> {
        if let Some(catalog) = lock(&self.catalogs).get(&profile) {
            return catalog.clone();
        }
        let catalog = Arc::new(self.build_catalog(profile, &HashMap::new()));
        lock(&self.catalogs)
            .entry(profile)
            .or_insert(catalog)
            .clone()
    }

    /// A merged catalog in which some mounts' catalogs are replaced, for a
    /// session whose per-session upstream announced its own lists.
    pub fn catalog_with(
        &self,
        profile: ClientProfile,
        overrides: &HashMap<MountName, Arc<MountCatalog>>,
    ) -> MergedCatalog {
        self.build_catalog(profile, overrides)
    }

    /// The current catalog generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn build_catalog(
        &self,
        profile: ClientProfile,
        overrides: &HashMap<MountName, Arc<MountCatalog>>,
    ) -> MergedCatalog {
        let views: Vec<MountView> = self
            .mounts
            .iter()
            .map(|mount| MountView {
                mount: mount.config.name.clone(),
                namespace: mount.config.namespace.clone(),
                catalog: overrides
                    .get(&mount.config.name)
                    .cloned()
                    .unwrap_or_else(|| mount.catalog_now(mount.serving_profile(profile))),
            })
            .collect();
        let (merged, collisions) =
            MergedCatalog::build(self.generation(), &self.config.server.separator, &views);
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
        merged
    }

    /// Forgets every merged catalog after a mount's catalog changed.
    fn catalog_changed(&self) {
        let mut catalogs = lock(&self.catalogs);
        self.generation.fetch_add(1, Ordering::AcqRel);
        catalogs.clear();
    }

    /// Where downstream sessions register themselves and spawn the closing
    /// of their per-session upstreams.
    pub fn session_tasks(&self) -> &TaskTracker {
        &self.session_tasks
    }

    /// After the HTTP server stopped: waits (bounded) for the downstream
    /// sessions to end and close their per-session upstreams, then closes
    /// every mount's own sessions.
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

    /// Re-reads one list of a mount's profile session after it said the list
    /// changed, then tells the sessions that see that profile's lists.
    async fn refresh_mount(&self, name: &MountName, profile: ClientProfile, kind: ListKind) {
        let key = (name.clone(), profile, kind);
        if !self.refreshes.start(&key) {
            return;
        }
        loop {
            self.refresh_mount_once(name, profile, kind).await;
            if !self.refreshes.again(&key) {
                break;
            }
        }
    }

    async fn refresh_mount_once(&self, name: &MountName, profile: ClientProfile, kind: ListKind) {
        let Some(mount) = self.mount(name) else {
            return;
        };
        let profile_session = mount.profile_session(profile);
        let Ok(session) = mount.session_for(&profile_session).await else {
            return;
        };
        let mut catalog = MountCatalog::clone(&profile_session.catalog().unwrap_or_default());
        crate::telemetry::metrics()
            .cache_refreshes
            .get_or_create(&mount.labels())
            .inc();
        if let Err(error) = discovery::refresh(session.peer(), kind, &mut catalog).await {
            tracing::warn!(mount = %name, %profile, %error, ?kind, "refresh after list_changed failed");
            return;
        }
        profile_session.store_catalog(catalog);
        self.catalog_changed();
        let mount = mount.clone();
        self.sessions
            .notify_list_changed(kind, |client| mount.serving_profile(client) == profile);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Events of a mount's own upstream sessions (one per profile).
struct MountSessionEvents {
    gateway: Weak<Gateway>,
    mount: MountName,
    profile: ClientProfile,
}

impl UpstreamEvents for MountSessionEvents {
    fn list_changed(&self, kind: ListKind) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let mount = self.mount.clone();
        let profile = self.profile;
        tokio::spawn(async move { gateway.refresh_mount(&mount, profile, kind).await });
    }

    fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let Some(mount) = gateway.mount(&self.mount) else {
            return;
        };
        // Only a shared mount's session has subscribers; a per-session
        // mount's discovery sessions are never subscribed.
        if mount.config.isolation != crate::config::Isolation::Shared {
            return;
        }
        let uri = mount.config.namespace.qualify_uri(&params.uri);
        gateway.sessions.notify_resource_updated(&uri);
    }
}
