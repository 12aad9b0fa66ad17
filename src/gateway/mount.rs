//! One running mount: its config, its discovery sessions and catalogs, and
//! its health.
//!
//! A mount keeps one upstream session per client profile it has to know the
//! lists for (see [`ClientProfile`]). The [`ClientProfile::FULL`] session is
//! opened at start-up: for a `shared` mount it is *the* shared session that
//! serves every downstream session; for a `per_session` mount it only
//! discovers. A `per_session` mount opens another discovery session the first
//! time a client with a different profile asks for lists, so each client sees
//! exactly what its own per-session upstream will offer. Discovery sessions
//! stay open so their `list_changed` keeps the cache correct.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use arc_swap::ArcSwapOption;
use serde::Serialize;
use tokio::sync::OnceCell;

use crate::{
    catalog::MountCatalog,
    config::{Isolation, MountConfig},
    telemetry::metrics::{metrics, MountLabels},
    upstream::{
        self, discovery, ClientProfile, Relay, UpstreamError, UpstreamEvents, UpstreamHandler,
        UpstreamSession,
    },
};

/// Where a mount is in its life, as shown by `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MountPhase {
    /// First discovery not finished yet.
    Starting,
    /// Discovered; serving.
    Ready,
    /// First discovery failed; calls try to reconnect and report the cause.
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct MountStatus {
    pub phase: MountPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Makes the event sink of a discovery session for one profile.
pub type EventsFactory = Box<dyn Fn(ClientProfile) -> Arc<dyn UpstreamEvents> + Send + Sync>;

pub struct Mount {
    pub config: MountConfig,
    profiles: Mutex<HashMap<ClientProfile, Arc<ProfileSession>>>,
    status: Mutex<MountStatus>,
    events: EventsFactory,
}

/// The upstream session and catalog of one mount for one client profile.
pub struct ProfileSession {
    profile: ClientProfile,
    catalog: ArcSwapOption<MountCatalog>,
    session: ArcSwapOption<UpstreamSession>,
    /// Serializes (re)opening, so concurrent first calls start one upstream.
    opening: tokio::sync::Mutex<()>,
    /// The outcome of the first discovery; later refreshes go through
    /// `list_changed`.
    first_discovery: OnceCell<Result<(), String>>,
}

impl ProfileSession {
    pub fn catalog(&self) -> Option<Arc<MountCatalog>> {
        self.catalog.load_full()
    }

    pub fn store_catalog(&self, catalog: MountCatalog) {
        self.catalog.store(Some(Arc::new(catalog)));
    }
}

impl Mount {
    pub fn new(config: MountConfig, events: EventsFactory) -> Self {
        Self {
            config,
            profiles: Mutex::new(HashMap::new()),
            status: Mutex::new(MountStatus {
                phase: MountPhase::Starting,
                last_error: None,
            }),
            events,
        }
    }

    /// The profile whose lists (and, for shared mounts, whose session) a
    /// downstream session with `client` profile uses.
    pub fn serving_profile(&self, client: ClientProfile) -> ClientProfile {
        match self.config.isolation {
            Isolation::Shared => ClientProfile::FULL,
            Isolation::PerSession => client,
        }
    }

    pub fn status(&self) -> MountStatus {
        lock(&self.status).clone()
    }

    pub fn set_status(&self, phase: MountPhase, last_error: Option<String>) {
        let mut status = lock(&self.status);
        status.phase = phase;
        status.last_error = last_error;
    }

    pub fn profile_session(&self, profile: ClientProfile) -> Arc<ProfileSession> {
        lock(&self.profiles)
            .entry(profile)
            .or_insert_with(|| {
                Arc::new(ProfileSession {
                    profile,
                    catalog: ArcSwapOption::empty(),
                    session: ArcSwapOption::empty(),
                    opening: tokio::sync::Mutex::new(()),
                    first_discovery: OnceCell::new(),
                })
            })
            .clone()
    }

    /// The catalog known now for `profile`, without waiting. Falls back to
    /// the full profile's catalog while the profile's own is not known.
    pub fn catalog_now(&self, profile: ClientProfile) -> Arc<MountCatalog> {
        let profiles = lock(&self.profiles);
        profiles
            .get(&profile)
            .and_then(|p| p.catalog())
            .or_else(|| profiles.get(&ClientProfile::FULL).and_then(|p| p.catalog()))
            .unwrap_or_default()
    }

    /// Whether `profile`'s first discovery has finished (either way).
    pub fn is_discovered(&self, profile: ClientProfile) -> bool {
        lock(&self.profiles)
            .get(&profile)
            .is_some_and(|p| p.first_discovery.initialized())
    }

    /// Runs the first discovery for `profile` once; later callers wait for
    /// the same outcome.
    pub async fn discover(&self, profile: ClientProfile) -> Result<(), String> {
        let profile_session = self.profile_session(profile);
        profile_session
            .first_discovery
            .get_or_init(|| async {
                let result = async {
                    let session = self
                        .session_for(&profile_session)
                        .await
                        .map_err(|e| e.to_string())?;
                    metrics()
                        .cache_refreshes
                        .get_or_create(&self.labels())
                        .inc();
                    discovery::discover(session.peer())
                        .await
                        .map_err(|e| format!("discovery failed: {e}"))
                }
                .await;
                match result {
                    Ok(catalog) => {
                        tracing::info!(
                            mount = %self.config.name,
                            %profile,
                            tools = catalog.tools.len(),
                            prompts = catalog.prompts.len(),
                            resources = catalog.resources.len(),
                            templates = catalog.templates.len(),
                            "mount discovered"
                        );
                        profile_session.store_catalog(catalog);
                        Ok(())
                    }
                    Err(error) => Err(error),
                }
            })
            .await
            .clone()
    }

    /// The live shared session (full profile), opening a new one if there is
    /// none or the last one ended.
    pub async fn shared_session(&self) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let profile_session = self.profile_session(ClientProfile::FULL);
        self.session_for(&profile_session).await
    }

    /// The live session of a profile, opening one if needed.
    pub async fn session_for(
        &self,
        profile_session: &ProfileSession,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let live = || {
            profile_session
                .session
                .load_full()
                .filter(|session| session.is_alive())
        };
        if let Some(session) = live() {
            return Ok(session);
        }
        let _opening = profile_session.opening.lock().await;
        if let Some(session) = live() {
            return Ok(session);
        }
        if profile_session.session.load().is_some() {
            tracing::warn!(mount = %self.config.name, "upstream session ended; reopening");
            metrics()
                .upstream_restarts
                .get_or_create(&self.labels())
                .inc();
        }
        let profile = profile_session.profile;
        let info = upstream::connect::client_config(profile.capabilities());
        // A mount's own sessions serve many downstream sessions: no owner.
        let relay = Arc::new(Relay::default());
        let handler = UpstreamHandler::new(info, (self.events)(profile), relay);
        let session = Arc::new(Box::pin(upstream::open(&self.config, handler)).await?);
        tracing::info!(mount = %self.config.name, %profile, pid = ?session.pid(), "mount upstream session open");
        profile_session.session.store(Some(session.clone()));
        Ok(session)
    }

    /// The upstream's own `instructions`, from its full-profile session if
    /// that is open (never opens one).
    pub fn instructions(&self) -> Option<String> {
        let session = lock(&self.profiles)
            .get(&ClientProfile::FULL)?
            .session
            .load_full()?;
        session.peer().peer_info()?.instructions.clone()
    }

    pub fn labels(&self) -> MountLabels {
        MountLabels {
            mount: self.config.name.as_str().to_owned(),
        }
    }

    /// Ends every session of this mount.
    pub async fn close(&self) {
        let sessions: Vec<_> = lock(&self.profiles)
            .values()
            .filter_map(|p| p.session.swap(None))
            .collect();
        for session in sessions {
            session.close().await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
