//! The registry of live downstream sessions: who to tell when something
//! changes.
//!
//! A session registers its peer once initialized and unregisters when it
//! ends. Resource subscriptions are kept here, by client-visible URI with
//! the route to the upstream's own, so an update from a shared upstream
//! reaches exactly the sessions subscribed to it and no other, and so
//! `subscriptions.rs` can tell what a shared upstream must hold. A session
//! asleep has no peer; what it misses meanwhile is told when it wakes.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
};

use rmcp::{
    model::{
        LoggingLevel, NotificationMetaObject, ResourceUpdatedNotification,
        ResourceUpdatedNotificationParam, ServerNotification,
    },
    Peer, RoleServer,
};

use super::outbox::Outbox;
use crate::{
    catalog::{Claimed, Route},
    naming::MountName,
    upstream::{ClientProfile, ListKind},
};

/// Identifies one downstream session inside this process.
pub type SessionKey = u64;

#[derive(Default)]
pub struct SessionRegistry {
    next_key: AtomicU64,
    /// Sessions alive or being created, against `[limits] max_sessions`.
    tickets: Arc<AtomicUsize>,
    /// A std mutex: held only to copy peers out, never across an await.
    sessions: Mutex<HashMap<SessionKey, SessionEntry>>,
    /// Which sessions want each upstream URI of each mount, and under
    /// which client-visible URI each subscribed: what every session's
    /// subscriptions say, inverted (changed only with `sessions` held,
    /// taken after it), so that neither asking whether anyone still wants
    /// a URI nor relaying its update looks through every session.
    wanted: Mutex<Wanted>,
}

/// Upstream URI (with its mount) → the sessions subscribed to it, each
/// with the URI it subscribed under. That URI is the one it is told of:
/// after a reload changed the mount's namespace, a session subscribed
/// under the old one still has the update it asked for, under the name it
/// asked with.
type Wanted = HashMap<(MountName, Arc<str>), HashSet<(SessionKey, Arc<str>)>>;

/// Most resources one session may be subscribed to at once: each is kept
/// and, on a shared mount, held upstream.
pub const MAX_SUBSCRIPTIONS_PER_SESSION: usize = 1000;

/// The level a shared upstream is told to log at once any session has set
/// one: everything. It serves sessions that set different levels, sessions
/// that set none (which get every level, as the SDKs' servers send them),
/// and sessions still to come; each session's own level is applied when
/// its messages are relayed (`relay::LogLevelSetting`). The most verbose
/// level any session had set cut off the others' messages below it, and
/// outlived the session that set it.
pub const SHARED_LOG_LEVEL: LoggingLevel = LoggingLevel::Debug;

struct SessionEntry {
    /// `None` while the session sleeps: nothing can reach it then.
    peer: Option<Outbox>,
    profile: ClientProfile,
    /// The endpoint the session was opened on (`None`: the main one).
    endpoint: Option<Arc<str>>,
    log_level: Option<LoggingLevel>,
    /// Client-visible URI → the mount and the upstream's own URI.
    subscriptions: HashMap<String, Route>,
    /// What the session was to be told while it slept, told when it wakes.
    missed: Missed,
}

/// The notifications a sleeping session missed. An awake session without a
/// `GET` stream has them kept by rmcp for its next `GET`; asleep it has no
/// rmcp session to keep them, so they are kept here, as what they are about
/// (bounded by the lists and the session's subscriptions), or as they are:
/// log lines and progress (`chatter`) apart from the rest (`told`), so
/// that a chatty upstream's lines never push out an elicitation's
/// completion, each the latest [`MISSED_KEPT_OF_EACH`].
#[derive(Default)]
struct Missed {
    lists: Vec<ListKind>,
    /// Each subscribed URI updated, with the `_meta` of its latest update
    /// if that was of the URI itself (not of a resource under it).
    updated: Vec<(String, Option<NotificationMetaObject>)>,
    /// Log lines and progress that found their request's stream closed.
    chatter: VecDeque<ServerNotification>,
    /// Anything else: an elicitation's completion, a task's status.
    told: VecDeque<ServerNotification>,
    /// How many older ones of either went to keep to the bound.
    dropped: usize,
}

impl Missed {
    /// A `kind` list changed (kept once).
    fn list_changed(&mut self, kind: ListKind) {
        if !self.lists.contains(&kind) {
            self.lists.push(kind);
        }
    }

    /// `uri` was updated (kept once, with the latest `meta`).
    fn updated(&mut self, uri: &str, meta: Option<NotificationMetaObject>) {
        match self.updated.iter_mut().find(|(missed, _)| missed == uri) {
            Some((_, kept)) => *kept = meta,
            None => self.updated.push((uri.to_owned(), meta)),
        }
    }

    /// Keeps `notification` for session `key`'s waking: a list change or
    /// an update as what it is about (once), anything else as it is.
    fn keep(&mut self, key: SessionKey, notification: ServerNotification) {
        let kind = match &notification {
            ServerNotification::ToolListChangedNotification(_) => Some(ListKind::Tools),
            ServerNotification::PromptListChangedNotification(_) => Some(ListKind::Prompts),
            ServerNotification::ResourceListChangedNotification(_) => Some(ListKind::Resources),
            _ => None,
        };
        if let Some(kind) = kind {
            self.list_changed(kind);
            return;
        }
        let kept = match &notification {
            ServerNotification::ResourceUpdatedNotification(updated) => {
                self.updated(&updated.params.uri, updated.params.meta.clone());
                return;
            }
            ServerNotification::LoggingMessageNotification(_)
            | ServerNotification::ProgressNotification(_) => &mut self.chatter,
            _ => &mut self.told,
        };
        // The latest are kept, as a `GET` stream's resume keeps them:
        // a resumed client sees a gap before them, not after.
        if kept.len() == MISSED_KEPT_OF_EACH {
            kept.pop_front();
            if self.dropped == 0 {
                tracing::debug!(
                    session = key,
                    "a sleeping session's kept notifications are full; the oldest go"
                );
            }
            self.dropped += 1;
        }
        kept.push_back(notification);
    }

    fn is_empty(&self) -> bool {
        self.lists.is_empty()
            && self.updated.is_empty()
            && self.chatter.is_empty()
            && self.told.is_empty()
    }

    /// How many messages telling all this takes.
    fn len(&self) -> usize {
        self.lists.len() + self.updated.len() + self.chatter.len() + self.told.len()
    }
}

/// Bound on each kind of the other notifications kept while a session
/// sleeps (`Missed`): past it the oldest are dropped (and the loss logged
/// as the session wakes) rather than let one sleeper grow without limit.
/// The two together are what rmcp keeps for a `GET` that opens after the
/// wake.
const MISSED_KEPT_OF_EACH: usize = crate::http::RMCP_EVENTS_KEPT / 2;

/// A place under `max_sessions`, held by a session from before it is
/// created until it ends; dropping it frees the place.
pub struct SessionTicket(Arc<AtomicUsize>);

impl Drop for SessionTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What became of a mount in a reload, for [`SessionRegistry::reroute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountNow {
    Removed,
    /// Added or changed: its upstream sessions are new, and subscribe to
    /// what sessions want of it.
    Starting {
        shared: bool,
    },
    /// Kept as it was, its upstream sessions with it.
    Running {
        shared: bool,
    },
}

/// What [`SessionRegistry::reroute`] did.
#[derive(Debug, Default)]
pub struct Rerouted {
    pub moved: usize,
    pub ended: usize,
    /// Routes taken off shared mounts still running, whose upstreams may
    /// hold them: to let go of there.
    pub let_go: Vec<Route>,
}

impl SessionRegistry {
    /// Takes a place for a new session, or `None` when `limit` are taken.
    pub fn reserve(&self, limit: usize) -> Option<SessionTicket> {
        let before = self.tickets.fetch_add(1, Ordering::AcqRel);
        let ticket = SessionTicket(self.tickets.clone());
        (before < limit).then_some(ticket)
    }

    /// Sessions alive or being created.
    pub fn reserved(&self) -> usize {
        self.tickets.load(Ordering::Acquire)
    }

    pub fn next_key(&self) -> SessionKey {
        self.next_key.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A session initialized on `endpoint` (`None`: the main one), or
    /// woken with a new peer (keeping its log level and subscriptions).
    pub fn register(
        &self,
        key: SessionKey,
        peer: Peer<RoleServer>,
        profile: ClientProfile,
        endpoint: Option<Arc<str>>,
    ) {
        let mut sessions = self.lock();
        if let Some(entry) = sessions.get_mut(&key) {
            let missed = std::mem::take(&mut entry.missed);
            entry.peer = Some(Outbox::new(peer.clone()));
            drop(sessions);
            tell_missed(peer, missed);
            return;
        }
        crate::telemetry::metrics().downstream_sessions.inc();
        sessions.insert(
            key,
            SessionEntry {
                peer: Some(Outbox::new(peer)),
                profile,
                endpoint,
                log_level: None,
                subscriptions: HashMap::new(),
                missed: Missed::default(),
            },
        );
    }

    /// The session sleeps: its peer goes (see `downstream::hibernation`).
    pub fn set_asleep(&self, key: SessionKey) {
        if let Some(entry) = self.lock().get_mut(&key) {
            entry.peer = None;
        }
    }

    /// Sends `notification` to session `key` alone, or keeps it until the
    /// session wakes if it sleeps. For what concerns the session rather than
    /// a request of it: the peer of the request that caused it may be gone
    /// (the session slept and woke with a new one since).
    pub fn tell(&self, key: SessionKey, notification: ServerNotification) {
        let mut sessions = self.lock();
        let Some(entry) = sessions.get_mut(&key) else {
            tracing::debug!(session = key, "a notification for a session that has ended");
            return;
        };
        let Some(outbox) = entry.peer.clone() else {
            entry.missed.keep(key, notification);
            return;
        };
        drop(sessions);
        outbox.send(key, notification);
    }

    /// The session ended; returns what it was subscribed to, so the
    /// upstreams no one else wants it from can be told.
    pub fn unregister(&self, key: SessionKey) -> Vec<Route> {
        let mut sessions = self.lock();
        let Some(entry) = sessions.remove(&key) else {
            return Vec::new();
        };
        let mut wanted = self.wanted();
        for (uri, route) in &entry.subscriptions {
            unwant(&mut wanted, key, uri, route);
        }
        drop((wanted, sessions));
        crate::telemetry::metrics().downstream_sessions.dec();
        entry.subscriptions.into_values().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// How many sessions each endpoint has (the main one left out).
    pub fn by_endpoint(&self) -> HashMap<Arc<str>, usize> {
        let mut counts: HashMap<Arc<str>, usize> = HashMap::new();
        for entry in self.lock().values() {
            if let Some(endpoint) = &entry.endpoint {
                *counts.entry(endpoint.clone()).or_default() += 1;
            }
        }
        counts
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a session's log level.
    pub fn set_log_level(&self, key: SessionKey, level: LoggingLevel) {
        if let Some(entry) = self.lock().get_mut(&key) {
            entry.log_level = Some(level);
        }
    }

    /// What a new shared upstream session is told to log at: once some
    /// session here has set a level, [`SHARED_LOG_LEVEL`]; before, nothing
    /// (the upstream's own default).
    pub fn shared_log_level(&self) -> Option<LoggingLevel> {
        self.lock()
            .values()
            .any(|entry| entry.log_level.is_some())
            .then_some(SHARED_LOG_LEVEL)
    }

    /// Records that session `key` is subscribed to `uri` (client-visible),
    /// which `route` leads to. Refused when the session has ended or
    /// already holds [`MAX_SUBSCRIPTIONS_PER_SESSION`] others.
    pub fn subscribe(
        &self,
        key: SessionKey,
        uri: &str,
        route: &Route,
    ) -> Result<(), super::SubscriptionError> {
        let mut sessions = self.lock();
        // Registered at `initialize`: gone means the session has ended,
        // and nothing would ever let an upstream subscription made for it
        // go.
        let Some(entry) = sessions.get_mut(&key) else {
            return Err(super::SubscriptionError::SessionEnded);
        };
        if !entry.subscriptions.contains_key(uri)
            && entry.subscriptions.len() >= MAX_SUBSCRIPTIONS_PER_SESSION
        {
            return Err(super::SubscriptionError::TooMany);
        }
        let mut wanted = self.wanted();
        if let Some(before) = entry.subscriptions.insert(uri.to_owned(), route.clone()) {
            unwant(&mut wanted, key, uri, &before);
        }
        want(&mut wanted, key, uri, route);
        Ok(())
    }

    /// Drops session `key`'s subscription to `uri`, if it had one.
    pub fn unsubscribe(&self, key: SessionKey, uri: &str) -> Option<Route> {
        let mut sessions = self.lock();
        let route = sessions
            .get_mut(&key)
            .and_then(|entry| entry.subscriptions.remove(uri))?;
        unwant(&mut self.wanted(), key, uri, &route);
        Some(route)
    }

    /// After a reload, where each subscription goes; `mount_now` says what
    /// became of the mount it is held on, `route_now` where its
    /// client-visible URI leads now for a session of an endpoint
    /// (`claimed`: by a list, a template or a namespace, not only as the
    /// first pass-through mount's fallback), `served` whether an endpoint
    /// still serves a mount.
    ///
    /// - On a mount its session's endpoint no longer serves (a reload
    ///   changed or removed the endpoint): as on a removed mount.
    /// - On a removed mount: it moves where its URI leads if that is the
    ///   same upstream URI on a mount the reload starts (a renamed mount:
    ///   its first session subscribes to what sessions want), and ends
    ///   otherwise: it would never be told of again, nor could it be
    ///   unsubscribed, and it would count against the session's bound.
    /// - On a shared mount still configured: if its URI is now claimed by
    ///   another mount (namespaces swapped, pass-through mounts
    ///   reordered), it moves there on the same terms, and ends otherwise:
    ///   left, it would be told of another resource than the one its URI
    ///   now reads. Else it stays (a namespace changed: it is still told
    ///   of its resource, under the URI it subscribed with).
    /// - On a per-session mount still configured: it stays; its route came
    ///   from the session's own lists, which only the session knows.
    pub fn reroute(
        &self,
        route_now: impl Fn(Option<&str>, &str) -> Option<(Route, Claimed)>,
        mount_now: impl Fn(&MountName) -> MountNow,
        served: impl Fn(Option<&str>, &MountName) -> bool,
    ) -> Rerouted {
        let mut sessions = self.lock();
        let mut wanted = self.wanted();
        let mut rerouted = Rerouted::default();
        for (key, entry) in sessions.iter_mut() {
            let endpoint = entry.endpoint.as_deref();
            entry.subscriptions.retain(|uri, route| {
                let actual = mount_now(&route.mount);
                let held_on = match served(endpoint, &route.mount) {
                    true => actual,
                    false => MountNow::Removed,
                };
                // Made through a pass-through mount (its URI is the
                // upstream's own): the fallback decides where it leads as
                // much as a claim does.
                let pass_through = *route.original == **uri;
                let per_session = matches!(
                    held_on,
                    MountNow::Starting { shared: false } | MountNow::Running { shared: false }
                );
                let now = match (held_on, route_now(endpoint, uri)) {
                    (MountNow::Removed, now) => now.map(|(now, _)| now),
                    (_, Some((now, _))) if now == *route => return true,
                    // A per-session route came from the session's own
                    // lists, which only it knows; a namespace is everyone's.
                    (_, Some((now, Claimed::Namespace))) if per_session => Some(now),
                    _ if per_session => return true,
                    (_, Some((now, Claimed::Listed | Claimed::Namespace))) => Some(now),
                    (_, Some((now, Claimed::Fallback))) if pass_through => Some(now),
                    // A namespace changed: still its mount's resource.
                    _ => return true,
                };
                unwant(&mut wanted, *key, uri, route);
                // A running shared upstream holds it until told (a
                // per-session one is the session's, and ends with it).
                if actual == (MountNow::Running { shared: true }) {
                    rerouted.let_go.push(route.clone());
                }
                let moves = |now: &Route| {
                    now.original == route.original
                        && matches!(mount_now(&now.mount), MountNow::Starting { .. })
                };
                match now.filter(moves) {
                    Some(now) => {
                        want(&mut wanted, *key, uri, &now);
                        *route = now;
                        rerouted.moved += 1;
                        true
                    }
                    None => {
                        rerouted.ended += 1;
                        false
                    }
                }
            });
        }
        rerouted
    }

    /// Whether some session is subscribed to the upstream URI `original` of
    /// `mount`.
    pub fn wants(&self, mount: &MountName, original: &str) -> bool {
        let _sessions = self.lock();
        self.wanted()
            .contains_key(&(mount.clone(), Arc::from(original)))
    }

    /// The upstream URIs of `mount` some session is subscribed to.
    pub fn wanted_on(&self, mount: &MountName) -> HashSet<String> {
        let _sessions = self.lock();
        self.wanted()
            .keys()
            .filter(|(on, _)| on == mount)
            .map(|(_, original)| original.to_string())
            .collect()
    }

    /// Where session `key`'s subscription to `uri` (client-visible) went
    /// when it was made, if it holds one.
    pub fn subscribed_route(&self, key: SessionKey, uri: &str) -> Option<Route> {
        self.lock().get(&key)?.subscriptions.get(uri).cloned()
    }

    /// The upstream URIs of `mount` session `key` is subscribed to.
    pub fn subscriptions_on(&self, key: SessionKey, mount: &MountName) -> Vec<String> {
        self.lock()
            .get(&key)
            .map(|entry| {
                entry
                    .subscriptions
                    .values()
                    .filter(|route| route.mount == *mount)
                    .map(|route| route.original.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The client-visible URIs under which session `key` is told that the
    /// upstream URI `original` of `mount` changed (see [`told_of`]).
    pub fn subscribed_as(
        &self,
        key: SessionKey,
        mount: &MountName,
        original: &str,
    ) -> Vec<Arc<str>> {
        let _sessions = self.lock();
        told_of(&self.wanted(), mount, original, Some(key))
            .into_iter()
            .map(|told| told.told)
            .collect()
    }

    /// Tells every session whose client profile passes `filter` that a list
    /// changed.
    pub fn notify_list_changed(
        &self,
        kind: ListKind,
        filter: impl Fn(ClientProfile, Option<&str>) -> bool,
    ) {
        let outboxes: Vec<_> = self
            .lock()
            .iter_mut()
            .filter(|(_, entry)| filter(entry.profile, entry.endpoint.as_deref()))
            .filter_map(|(key, entry)| {
                if entry.peer.is_none() {
                    entry.missed.list_changed(kind);
                }
                Some((*key, entry.peer.clone()?))
            })
            .collect();
        for (key, outbox) in outboxes {
            crate::telemetry::metrics().count_relayed(crate::telemetry::Relayed::ListChanged);
            outbox.send(key, list_changed(kind));
        }
    }

    /// Tells the sessions subscribed to the upstream URI `original` of
    /// `mount` (or to one it lies under: see [`told_of`]) that it changed,
    /// each under the URI it subscribed with, with the upstream's `_meta`.
    /// Two pass-through mounts can offer the same URI; a session
    /// subscribed through one (the one the URI routes to) is not told of
    /// the other's updates.
    pub fn notify_resource_updated(
        &self,
        mount: &MountName,
        original: &str,
        meta: Option<NotificationMetaObject>,
    ) {
        let mut sessions = self.lock();
        let subscribers = told_of(&self.wanted(), mount, original, None);
        let mut peers = Vec::with_capacity(subscribers.len());
        for Told {
            key,
            told,
            subscribed,
        } in subscribers
        {
            let Some(entry) = sessions.get_mut(&key) else {
                continue;
            };
            match &entry.peer {
                Some(outbox) => peers.push((key, outbox.clone(), told)),
                // Told on waking that what it subscribed to changed: kept
                // once per subscription, however many sub-resources did
                // (whose `_meta` is about another URI).
                None => {
                    let own_meta = (told == subscribed).then(|| meta.clone()).flatten();
                    entry.missed.updated(&subscribed, own_meta);
                }
            }
        }
        drop(sessions);
        for (key, outbox, uri) in peers {
            crate::telemetry::metrics().count_relayed(crate::telemetry::Relayed::ResourceUpdated);
            let mut params = ResourceUpdatedNotificationParam::new(uri.to_string());
            params.meta = meta.clone();
            outbox.send(
                key,
                ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(
                    params,
                )),
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, SessionEntry>> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Who wants what; only with `sessions` held.
    fn wanted(&self) -> std::sync::MutexGuard<'_, Wanted> {
        self.wanted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whom to tell that `updated`, an upstream URI of `mount`, changed (only
/// session `only`, if given): each session, the client-visible URI to name
/// (`told`), and the URI it subscribed with (`subscribed`, which a sleeping
/// session is told instead: one entry per subscription at most).
///
/// Subscribers of `updated` itself are told under their URI. So are, as
/// the spec lets a server name the sub-resource that changed, those of a
/// URI it lies under, past a `/` (`file:///dir` for `file:///dir/a.txt`,
/// never inside a URI's `scheme://`), with the rest of `updated` appended
/// to theirs (a namespace only prefixes an upstream URI, or inserts itself
/// after `ui://`, so the rest carries over). On a shared upstream
/// (`only: None`) parents are told only when no session wants `updated`
/// itself: an upstream that matches URIs exactly sent it for that
/// session, and one session must not learn what another subscribed to.
/// Looked up parent by parent: an update costs the depth of its URI, not
/// the count of subscriptions.
fn told_of(
    wanted: &Wanted,
    mount: &MountName,
    updated: &str,
    only: Option<SessionKey>,
) -> Vec<Told> {
    let mut told: Vec<Told> = Vec::new();
    let mut seen: HashSet<(SessionKey, Arc<str>)> = HashSet::new();
    let mut tell = |subscribers: &HashSet<(SessionKey, Arc<str>)>, rest: &str| {
        for (key, uri) in subscribers {
            if only.is_some_and(|only| only != *key) {
                continue;
            }
            let named: Arc<str> = match rest {
                "" => uri.clone(),
                rest => Arc::from(format!("{uri}{rest}")),
            };
            if seen.insert((*key, named.clone())) {
                told.push(Told {
                    key: *key,
                    told: named,
                    subscribed: uri.clone(),
                });
            }
        }
    };
    let exact = wanted.get(&(mount.clone(), Arc::from(updated)));
    if let Some(subscribers) = exact {
        tell(subscribers, "");
    }
    if only.is_none() && exact.is_some() {
        return told;
    }
    // Past the `//` that opens an authority, if the URI has one.
    let from = updated.find("://").map_or(0, |at| at + 3);
    for (at, _) in updated.match_indices('/').filter(|(at, _)| *at >= from) {
        for parent in [&updated[..at], &updated[..=at]] {
            if parent.len() == updated.len() {
                continue;
            }
            if let Some(subscribers) = wanted.get(&(mount.clone(), Arc::from(parent))) {
                tell(subscribers, &updated[parent.len()..]);
            }
        }
    }
    told
}

/// One session to tell of an update (see [`told_of`]).
#[derive(Debug, PartialEq)]
struct Told {
    key: SessionKey,
    /// The URI the update names to it.
    told: Arc<str>,
    /// The URI it subscribed with.
    subscribed: Arc<str>,
}

/// Session `key` wants `route`'s upstream URI, subscribed as `uri`.
fn want(wanted: &mut Wanted, key: SessionKey, uri: &str, route: &Route) {
    wanted
        .entry((route.mount.clone(), route.original.clone()))
        .or_default()
        .insert((key, Arc::from(uri)));
}

/// Session `key` no longer wants `route`'s upstream URI as `uri`.
fn unwant(wanted: &mut Wanted, key: SessionKey, uri: &str, route: &Route) {
    let at = (route.mount.clone(), route.original.clone());
    if let Some(subscribers) = wanted.get_mut(&at) {
        subscribers.remove(&(key, Arc::from(uri)));
        if subscribers.is_empty() {
            wanted.remove(&at);
        }
    }
}

/// Tells a session that just woke what it missed asleep.
fn tell_missed(peer: Peer<RoleServer>, missed: Missed) {
    if missed.is_empty() {
        return;
    }
    if missed.dropped > 0 {
        tracing::warn!(
            lost = missed.dropped,
            kept = MISSED_KEPT_OF_EACH,
            "a session woke having missed more messages than are kept: the oldest are lost"
        );
    }
    // Told before the session's `GET` opens, into what rmcp keeps for it
    // (its latest `RMCP_EVENTS_KEPT`): what matters least goes first, to
    // be the first pushed out; what nothing else would tell again (an
    // elicitation's completion, a task's status) last.
    if missed.len() > crate::http::RMCP_EVENTS_KEPT {
        tracing::warn!(
            telling = missed.len(),
            kept = crate::http::RMCP_EVENTS_KEPT,
            "a session woke with more to be told than its next GET stream finds kept: log lines go first, then list changes and updates"
        );
    }
    tokio::spawn(async move {
        for notification in missed.chatter {
            send_missed(&peer, notification).await;
        }
        for kind in missed.lists {
            notify_list_changed(peer.clone(), kind).await;
        }
        for (uri, meta) in missed.updated {
            let mut params = ResourceUpdatedNotificationParam::new(uri);
            params.meta = meta;
            if let Err(error) = peer.notify_resource_updated(params).await {
                tracing::debug!(%error, "could not send a missed resources/updated");
            }
        }
        for notification in missed.told {
            send_missed(&peer, notification).await;
        }
    });
}

async fn send_missed(peer: &Peer<RoleServer>, notification: ServerNotification) {
    if let Err(error) = peer.send_notification(notification).await {
        tracing::debug!(%error, "could not send a missed notification");
    }
}

/// The notification that a `kind` list changed.
fn list_changed(kind: ListKind) -> ServerNotification {
    match kind {
        ListKind::Tools => ServerNotification::ToolListChangedNotification(Default::default()),
        ListKind::Prompts => ServerNotification::PromptListChangedNotification(Default::default()),
        ListKind::Resources => {
            ServerNotification::ResourceListChangedNotification(Default::default())
        }
    }
}

pub async fn notify_list_changed(peer: Peer<RoleServer>, kind: ListKind) {
    if let Err(error) = peer.send_notification(list_changed(kind)).await {
        tracing::debug!(%error, ?kind, "could not send list_changed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl rmcp::ServerHandler for Nothing {}

    /// A registry with `N` sessions registered (awake, default profile),
    /// and the peer they share kept alive.
    struct Registered<const N: usize> {
        registry: SessionRegistry,
        keys: [SessionKey; N],
        _service: rmcp::service::RunningService<rmcp::RoleServer, Nothing>,
        _other_end: tokio::io::DuplexStream,
    }

    fn registered<const N: usize>() -> Registered<N> {
        let (transport, other_end) = tokio::io::duplex(64);
        let service = rmcp::service::serve_directly(Nothing, transport, None);
        let registry = SessionRegistry::default();
        let keys = std::array::from_fn(|_| registry.next_key());
        for key in keys {
            registry.register(key, service.peer().clone(), ClientProfile::default(), None);
        }
        Registered {
            registry,
            keys,
            _service: service,
            _other_end: other_end,
        }
    }

    /// After a reload: a removed mount's subscriptions move where their
    /// URIs now lead to the same upstream URI on a starting mount, and end
    /// otherwise; a running shared mount's move or end only when another
    /// mount claims their URIs (and are let go of there); a namespace
    /// change, a pass-through fallback and per-session mounts leave them.
    /// A reload that takes a mount off an endpoint ends the subscriptions
    /// its sessions held there (the shared upstream let go of), and only
    /// theirs; where a URI leads is asked of each session's endpoint.
    #[tokio::test]
    async fn a_reload_ends_subscriptions_on_a_mount_an_endpoint_no_longer_serves() {
        let Registered {
            registry,
            keys: [main],
            _service: service,
            _other_end,
        } = registered::<1>();
        let narrow = registry.next_key();
        registry.register(
            narrow,
            service.peer().clone(),
            ClientProfile::default(),
            Some(Arc::from("ide")),
        );
        let files = MountName::new("files").unwrap();
        let route = Route {
            mount: files.clone(),
            original: "file:///notes".into(),
        };
        for key in [main, narrow] {
            assert!(registry.subscribe(key, "file:///notes", &route).is_ok());
        }
        let rerouted = registry.reroute(
            |endpoint, _| match endpoint {
                None => Some((route.clone(), Claimed::Listed)),
                Some(_) => None,
            },
            |_| MountNow::Running { shared: true },
            |endpoint, _| endpoint.is_none(),
        );
        assert_eq!((rerouted.moved, rerouted.ended), (0, 1));
        assert_eq!(rerouted.let_go, std::slice::from_ref(&route));
        assert_eq!(
            registry.subscribed_route(main, "file:///notes"),
            Some(route)
        );
        assert_eq!(registry.subscribed_route(narrow, "file:///notes"), None);
        assert!(
            registry.wants(&files, "file:///notes"),
            "the main session's"
        );
    }

    #[tokio::test]
    async fn a_reload_moves_or_ends_subscriptions_whose_uri_leads_elsewhere() {
        let Registered {
            registry,
            keys: [key],
            _service,
            _other_end,
        } = registered::<1>();
        let [gone, renamed, kept, running, private] =
            ["gone", "renamed", "kept", "running", "private"]
                .map(|name| MountName::new(name).unwrap());
        let on = |mount: &MountName, original: &str| Route {
            mount: mount.clone(),
            original: original.into(),
        };
        let subscribe = |mount: &MountName, uri: &str| {
            let original = &uri[uri.find('+').unwrap() + 1..];
            assert!(registry.subscribe(key, uri, &on(mount, original)).is_ok());
        };
        for uri in ["x+demo://a", "x+demo://b", "x+demo://c"] {
            subscribe(&gone, uri);
        }
        for uri in [
            "k+demo://d",
            "k+demo://e",
            "k+demo://f",
            "k+demo://g",
            "k+demo://h",
        ] {
            subscribe(&kept, uri);
        }
        subscribe(&private, "p+demo://i");
        subscribe(&private, "p+demo://k");
        // Made through a pass-through mount: its URI is the upstream's.
        assert!(registry
            .subscribe(key, "demo://j", &on(&kept, "demo://j"))
            .is_ok());
        let claimed = |route: Route| Some((route, Claimed::Listed));
        let rerouted = registry.reroute(
            |_, uri| match uri {
                "x+demo://a" => claimed(on(&renamed, "demo://a")),
                // Routed elsewhere, to another upstream URI: not the same.
                "x+demo://b" => claimed(on(&renamed, "x+demo://b")),
                "k+demo://d" => claimed(on(&kept, "demo://d")),
                "k+demo://e" => claimed(on(&renamed, "demo://e")),
                // A running mount's upstream would never be told.
                "k+demo://f" => claimed(on(&running, "demo://f")),
                // Its namespace changed: still its mount's resource.
                "k+demo://g" => None,
                // Only the first pass-through mount's fallback.
                "k+demo://h" => Some((on(&running, "k+demo://h"), Claimed::Fallback)),
                // Where a pass-through subscription leads now.
                "demo://j" => Some((on(&renamed, "demo://j"), Claimed::Fallback)),
                // A per-session route: lists are the session's own...
                "p+demo://i" => claimed(on(&running, "demo://i")),
                // ...a namespace is everyone's.
                "p+demo://k" => Some((on(&renamed, "demo://k"), Claimed::Namespace)),
                _ => None,
            },
            |mount| match mount.as_str() {
                "gone" => MountNow::Removed,
                "renamed" => MountNow::Starting { shared: true },
                "private" => MountNow::Running { shared: false },
                _ => MountNow::Running { shared: true },
            },
            |_, _| true,
        );
        assert_eq!((rerouted.moved, rerouted.ended), (4, 3));
        let mut let_go = rerouted.let_go;
        let_go.sort_by(|a, b| a.original.cmp(&b.original));
        assert_eq!(
            let_go,
            [
                on(&kept, "demo://e"),
                on(&kept, "demo://f"),
                on(&kept, "demo://j")
            ]
        );
        let mut moved_to = registry.subscriptions_on(key, &renamed);
        moved_to.sort();
        assert_eq!(moved_to, ["demo://a", "demo://e", "demo://j", "demo://k"]);
        let mut stayed = registry.subscriptions_on(key, &kept);
        stayed.sort();
        assert_eq!(stayed, ["demo://d", "demo://g", "demo://h"]);
        assert_eq!(registry.subscriptions_on(key, &private), ["demo://i"]);
        assert!(registry.subscriptions_on(key, &gone).is_empty());
        assert!(registry.wanted_on(&gone).is_empty());
        assert!(registry.wants(&renamed, "demo://a"));
        assert!(!registry.wants(&kept, "demo://f"));
        assert_eq!(
            registry.subscribed_route(key, "x+demo://a"),
            Some(on(&renamed, "demo://a"))
        );
        assert_eq!(registry.subscribed_route(key, "x+demo://c"), None);
    }

    /// An update names a resource under a subscribed one only past a path
    /// separator (and past a URI's `scheme://`); a session subscribed to
    /// both is told once; on a shared upstream a parent's subscribers are
    /// not told of an update some session wants exactly.
    #[test]
    fn a_sub_resource_is_one_past_a_path_separator() {
        let mount = MountName::new("m").unwrap();
        let mut wanted = Wanted::new();
        let mut subscribe = |key: SessionKey, original: &str| {
            let route = Route {
                mount: mount.clone(),
                original: original.into(),
            };
            want(&mut wanted, key, &format!("m+{original}"), &route);
        };
        subscribe(1, "file:///dir");
        subscribe(1, "file:///dir/a");
        subscribe(2, "file:///dir/");
        subscribe(3, "file:");
        let told = |updated: &str, only: Option<SessionKey>| -> Vec<(SessionKey, String, String)> {
            let mut told: Vec<_> = told_of(&wanted, &mount, updated, only)
                .into_iter()
                .map(|told| (told.key, told.told.to_string(), told.subscribed.to_string()))
                .collect();
            told.sort();
            told
        };
        let own = |key, told: &str, subscribed: &str| (key, told.to_owned(), subscribed.to_owned());
        // Wanted exactly by session 1: nobody else is told.
        assert_eq!(
            told("file:///dir/a", None),
            [own(1, "m+file:///dir/a", "m+file:///dir/a")]
        );
        assert_eq!(
            told("file:///dir/b/c", None),
            [
                own(1, "m+file:///dir/b/c", "m+file:///dir"),
                own(2, "m+file:///dir/b/c", "m+file:///dir/"),
            ]
        );
        // Its own upstream: the session's every subscription counts.
        assert_eq!(
            told("file:///dir/a", Some(1)),
            [own(1, "m+file:///dir/a", "m+file:///dir/a")]
        );
        assert!(
            told("file:///dirt", None).is_empty(),
            "not past a separator"
        );
        assert!(told("file:///dir", Some(2)).is_empty(), "the parent itself");
        let other = MountName::new("n").unwrap();
        assert!(told_of(&wanted, &other, "file:///dir/b", None).is_empty());
    }

    /// A subscription belongs to the mount the URI routed to: the same
    /// URI's update from another mount is not the session's.
    #[tokio::test]
    async fn an_update_is_for_the_sessions_subscribed_on_its_mount() {
        let Registered {
            registry,
            keys: [key],
            _service,
            _other_end,
        } = registered::<1>();
        let (first, second) = (
            MountName::new("first").unwrap(),
            MountName::new("second").unwrap(),
        );
        let route = Route {
            mount: first.clone(),
            original: "demo://x".into(),
        };
        assert!(registry.subscribe(key, "demo://x", &route).is_ok());
        let as_uris = |uris: Vec<Arc<str>>| -> Vec<String> {
            uris.iter().map(|uri| uri.to_string()).collect()
        };
        assert_eq!(
            as_uris(registry.subscribed_as(key, &first, "demo://x")),
            ["demo://x"]
        );
        assert!(registry.subscribed_as(key, &second, "demo://x").is_empty());
        assert!(registry.subscribed_as(key, &first, "demo://y").is_empty());
        // Subscribed again under another name (the mount's namespace
        // changed by a reload): told under both.
        let renamed = |uri: &str| Route {
            mount: first.clone(),
            original: uri.into(),
        };
        assert!(registry
            .subscribe(key, "new+demo://x", &renamed("demo://x"))
            .is_ok());
        let mut both = as_uris(registry.subscribed_as(key, &first, "demo://x"));
        both.sort();
        assert_eq!(both, ["demo://x", "new+demo://x"]);
        // The same name again, and one name moved to another upstream URI.
        assert!(registry.subscribe(key, "demo://x", &route).is_ok());
        assert!(registry
            .subscribe(key, "new+demo://x", &renamed("demo://z"))
            .is_ok());
        assert_eq!(
            as_uris(registry.subscribed_as(key, &first, "demo://x")),
            ["demo://x"]
        );
        assert_eq!(
            as_uris(registry.subscribed_as(key, &first, "demo://z")),
            ["new+demo://x"]
        );
    }

    /// What sessions want is counted as they subscribe, unsubscribe and
    /// end; one session holds at most [`MAX_SUBSCRIPTIONS_PER_SESSION`].
    #[tokio::test]
    async fn wanted_uris_are_counted_and_a_session_holds_a_bounded_number() {
        let Registered {
            registry,
            keys: [one, two],
            _service,
            _other_end,
        } = registered::<2>();
        let mount = MountName::new("m").unwrap();
        let route = |original: &str| Route {
            mount: mount.clone(),
            original: original.into(),
        };
        assert!(registry.subscribe(one, "m+a", &route("a")).is_ok());
        assert!(registry.subscribe(two, "m+a", &route("a")).is_ok());
        assert!(registry.subscribe(two, "m+b", &route("b")).is_ok());
        let wanted = |registry: &SessionRegistry| {
            let mut uris: Vec<String> = registry.wanted_on(&mount).into_iter().collect();
            uris.sort();
            uris
        };
        assert_eq!(wanted(&registry), ["a", "b"]);
        assert!(registry.unsubscribe(one, "m+a").is_some());
        assert!(registry.wants(&mount, "a"), "the other session still does");
        assert_eq!(registry.unregister(two).len(), 2);
        assert!(!registry.wants(&mount, "a") && !registry.wants(&mount, "b"));
        assert!(wanted(&registry).is_empty());

        for n in 0..MAX_SUBSCRIPTIONS_PER_SESSION {
            assert!(registry
                .subscribe(one, &format!("m+{n}"), &route(&n.to_string()))
                .is_ok());
        }
        assert!(
            matches!(
                registry.subscribe(one, "m+more", &route("more")),
                Err(crate::gateway::SubscriptionError::TooMany)
            ),
            "over the bound"
        );
        assert!(!registry.wants(&mount, "more"));
        assert!(
            registry.subscribe(one, "m+0", &route("0")).is_ok(),
            "one held, again"
        );
        assert_eq!(
            registry.wanted_on(&mount).len(),
            MAX_SUBSCRIPTIONS_PER_SESSION
        );
        registry.unregister(one);
        assert!(
            matches!(
                registry.subscribe(one, "m+0", &route("0")),
                Err(crate::gateway::SubscriptionError::SessionEnded)
            ),
            "a session that ended holds nothing"
        );
        assert!(registry.wanted_on(&mount).is_empty());
    }

    /// Log lines a session missed asleep, however many, push out none of
    /// what it must be told (an elicitation's completion); at the wake
    /// they go first, to be the first rmcp lets go of, then the list
    /// changes, and the completion last.
    #[tokio::test]
    async fn a_sleeping_sessions_log_lines_push_out_nothing_it_must_be_told() {
        use tokio::io::AsyncBufReadExt;
        let Registered {
            registry,
            keys: [key],
            _service: service,
            _other_end: other_end,
        } = registered::<1>();
        registry.set_asleep(key);
        let log_line = |n: usize| {
            ServerNotification::LoggingMessageNotification(
                rmcp::model::LoggingMessageNotification::new(
                    rmcp::model::LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        serde_json::json!(format!("line {n}")),
                    ),
                ),
            )
        };
        registry.tell(
            key,
            ServerNotification::CustomNotification(rmcp::model::CustomNotification::new(
                "notifications/elicitation/complete",
                Some(serde_json::json!({ "elicitationId": "e" })),
            )),
        );
        for n in 0..crate::http::RMCP_EVENTS_KEPT * 2 {
            registry.tell(key, log_line(n));
        }
        registry.tell(
            key,
            ServerNotification::ToolListChangedNotification(Default::default()),
        );
        registry.register(key, service.peer().clone(), ClientProfile::default(), None);
        let mut lines = tokio::io::BufReader::new(other_end).lines();
        let mut methods = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while methods.last().map(String::as_str) != Some("notifications/elicitation/complete") {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .expect("the wake's notifications within 10 s")
                .expect("read")
                .expect("a line");
            let message: serde_json::Value = serde_json::from_str(&line).expect("JSON");
            methods.push(message["method"].as_str().unwrap_or_default().to_owned());
        }
        let logs = methods
            .iter()
            .filter(|method| *method == "notifications/message")
            .count();
        assert_eq!(logs, MISSED_KEPT_OF_EACH, "{methods:?}");
        assert_eq!(
            &methods[logs..],
            [
                "notifications/tools/list_changed",
                "notifications/elicitation/complete"
            ],
            "{methods:?}"
        );
    }

    /// A session asleep keeps what it was told for itself, up to a bound;
    /// one that ended keeps nothing.
    #[tokio::test]
    async fn a_sleeping_session_keeps_what_it_is_told_up_to_a_bound() {
        let Registered {
            registry,
            keys: [key],
            _service,
            _other_end,
        } = registered::<1>();
        registry.set_asleep(key);
        let told = || {
            ServerNotification::CustomNotification(rmcp::model::CustomNotification::new(
                "notifications/elicitation/complete",
                Some(serde_json::json!({ "elicitationId": "e" })),
            ))
        };
        for _ in 0..MISSED_KEPT_OF_EACH + 5 {
            registry.tell(key, told());
        }
        let kept = |registry: &SessionRegistry| {
            registry
                .lock()
                .get(&key)
                .map_or(0, |entry| entry.missed.told.len())
        };
        assert_eq!(kept(&registry), MISSED_KEPT_OF_EACH);
        // The latest are kept.
        registry.tell(
            key,
            ServerNotification::CustomNotification(rmcp::model::CustomNotification::new(
                "notifications/latest",
                None,
            )),
        );
        let last = registry
            .lock()
            .get(&key)
            .and_then(|entry| entry.missed.told.back().cloned());
        assert!(
            matches!(&last, Some(ServerNotification::CustomNotification(n)) if n.method == "notifications/latest"),
            "{last:?}"
        );
        registry.unregister(key);
        registry.tell(key, told());
        assert_eq!(kept(&registry), 0);
    }
}
