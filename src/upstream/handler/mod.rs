//! The rmcp client handler of an upstream session.
//!
//! It declares the client capabilities the session was opened with (so
//! capability-gated upstream tools appear), relays what concerns one
//! downstream request or session (progress, log messages, sampling,
//! elicitation, roots) to the caller the [`Relay`] attributes it to, and
//! hands what concerns the mount as a whole (list changes, resource updates)
//! to an [`UpstreamEvents`] implementation.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use rmcp::{
    model::{
        CancelledNotificationParam, ClientConfig, ClientResult, CreateMessageRequestParams,
        CreateMessageResult, CustomNotification, CustomRequest, ElicitRequest, ElicitRequestParams,
        ElicitResult, ErrorCode, GetExtensions, GetMeta, ListRootsRequest, ListRootsResult,
        LoggingMessageNotificationParam, MetaObject, Notification, NotificationMetaObject,
        ProgressNotificationParam, ResourceUpdatedNotificationParam, ServerNotification,
        ServerRequest,
    },
    service::{NotificationContext, OriginatingRequestId, RequestContext, ServiceError},
    ClientHandler, ErrorData, RoleClient,
};

use super::relay::{
    related_task, set_related_task, Arrival, Caller, Relay, TaskOwner, Unattributed,
};
use crate::telemetry::{metrics, Relayed};

mod as_written;
use as_written::{sampling_request, unreadable};

/// Which list an upstream said has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Prompts,
    /// Resources and resource templates (one notification covers both).
    Resources,
}

/// Where an upstream session's mount-wide events go. Implementations must
/// not block: they run on the upstream connection's task.
pub trait UpstreamEvents: Send + Sync + 'static {
    fn list_changed(&self, kind: ListKind);
    fn resource_updated(&self, params: ResourceUpdatedNotificationParam);
    /// A (re)started session's lists were read and these kinds differ from
    /// what was known before (every kind on the first start).
    fn catalog_replaced(&self, _kinds: &[ListKind]) {}
    /// The session is live: started for the first time, or replacing one
    /// that ended.
    fn session_started(&self, _session: Arc<super::UpstreamSession>) {}
    /// A notification for downstream session `session` alone that no
    /// request of it waits for (an elicitation's completion): sent now, or
    /// when the session wakes if it sleeps.
    fn tell_session(&self, session: u64, notification: ServerNotification);
    /// Whether the session ends once its HTTP server has been unreachable
    /// for a while (`http_client`'s `saw_get`): yes for the mount's own
    /// sessions, so that the supervisor reconnects and the mount shows
    /// `degraded`; a client's own session says no.
    fn ends_when_unreachable(&self) -> bool {
        true
    }
}

/// Bound on an upstream session's requests (sampling, elicitation, roots)
/// waiting for one client session at once. They have no timeout of their
/// own (a person may take minutes to answer an elicitation), so without a
/// bound an upstream could keep any number open against a client, each a
/// task and an entry on both sides; past it the upstream is refused. Per
/// client session, not per upstream session: on a shared mount a client
/// that leaves its requests unanswered must not use up the places of the
/// others.
pub const CLIENT_REQUESTS_MAX: usize = 32;

#[derive(Clone)]
pub struct UpstreamHandler {
    info: ClientConfig,
    events: Arc<dyn UpstreamEvents>,
    relay: Arc<Relay>,
    /// Requests waiting for each client session ([`CLIENT_REQUESTS_MAX`]),
    /// by `Caller::session`; only sessions with some waiting have an entry.
    client_requests: WaitingBySession,
}

/// How many requests wait for each client session.
type WaitingBySession = Arc<Mutex<HashMap<u64, usize>>>;

/// One request's place among those waiting for its client session.
struct WaitingPlace {
    waiting: WaitingBySession,
    session: u64,
}

impl WaitingPlace {
    fn take(waiting: &WaitingBySession, session: u64) -> Option<Self> {
        let mut by_session = waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = by_session.entry(session).or_default();
        if *count >= CLIENT_REQUESTS_MAX {
            return None;
        }
        *count += 1;
        Some(Self {
            waiting: waiting.clone(),
            session,
        })
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let mut by_session = self
            .waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let std::collections::hash_map::Entry::Occupied(mut count) =
            by_session.entry(self.session)
        {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

impl UpstreamHandler {
    pub fn new(info: ClientConfig, events: Arc<dyn UpstreamEvents>, relay: Arc<Relay>) -> Self {
        Self {
            info,
            events,
            relay,
            client_requests: Default::default(),
        }
    }

    /// See [`UpstreamEvents::ends_when_unreachable`].
    pub fn ends_when_unreachable(&self) -> bool {
        self.events.ends_when_unreachable()
    }

    pub fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }

    /// The caller a server→client request goes to, or the error the
    /// upstream gets instead.
    async fn target(&self, context: &RequestContext<RoleClient>) -> Result<Caller, ErrorData> {
        self.target_if_any(context)
            .await?
            .ok_or_else(serving_no_client)
    }

    /// Like [`Self::target`], but `None` for a request made, outside any
    /// of the gateway's requests, to a session that serves no client (a
    /// `per_session` mount's own, which only lists): such a request is for
    /// nobody, and not a routing failure worth a warning.
    async fn target_if_any(
        &self,
        context: &RequestContext<RoleClient>,
    ) -> Result<Option<Caller>, ErrorData> {
        if !self.relay.first_sent(&context.id) {
            tracing::debug!(id = %context.id, "refusing a request the upstream sent before (replayed on a resumed stream?)");
            return Err(ErrorData::invalid_request(
                format!("request id {} was used before in this session", context.id),
                None,
            ));
        }
        let related_task = related_task(&context.meta.0);
        let caller = match self
            .relay
            .attribute_request(&context.extensions, related_task)
            .await
        {
            Ok(caller) => caller,
            Err(Unattributed::Nobody | Unattributed::RequestEnded)
                if self.relay.serves_no_client() =>
            {
                tracing::debug!(
                    "an upstream request outside any call, to a session that only lists"
                );
                return Ok(None);
            }
            Err(why) => {
                let sessions = match why {
                    Unattributed::Ambiguous(sessions) => Some(sessions),
                    _ => None,
                };
                tracing::warn!(%why, sessions, "refusing an upstream request that cannot be routed to one client");
                return Err(ErrorData::internal_error(
                    format!("the gateway cannot route this request: {why}"),
                    None,
                ));
            }
        };
        caller.on_its_stream().await;
        Ok(Some(caller))
    }

    /// Sends a request to the caller's client on the stream of the request
    /// that caused it, and returns the answer; an upstream cancel cancels it
    /// downstream.
    async fn forward(
        &self,
        caller: &Caller,
        mut request: ServerRequest,
        context: &RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        let Some(_place) = WaitingPlace::take(&self.client_requests, caller.session) else {
            tracing::debug!(
                "refusing an upstream request: {CLIENT_REQUESTS_MAX} already wait for its client"
            );
            return Err(ErrorData::internal_error(
                format!(
                    "too many requests from this server are waiting for this client (at most {CLIENT_REQUESTS_MAX})"
                ),
                None,
            ));
        };
        if let Some(id) = &caller.request_id {
            request
                .extensions_mut()
                .insert(OriginatingRequestId(id.clone()));
        }
        // Registered before the cancel is looked at: rmcp cancels the
        // context before it hands the cancel to `on_cancelled`, which
        // waits for this guard; so either that sees it, or this sees the
        // cancel and sends nothing.
        let _forwarding = self.relay.forwarding(context.id.clone());
        if context.ct.is_cancelled() {
            return Err(cancelled_by_the_server());
        }
        // The upstream request this one belongs to waits on the client
        // too: its idle timeout must not run out under a person answering.
        let _awaiting_client = self.relay.awaiting_client(caller);
        // Sent from a fresh task: rmcp tags a request sent from inside a
        // handler with that handler's request id (here: the upstream's),
        // which would override the downstream id set above.
        let peer = caller.peer.clone();
        let handle = tokio::spawn(async move {
            peer.send_cancellable_request(request, Default::default())
                .await
        })
        .await
        .map_err(|error| ErrorData::internal_error(format!("relay task failed: {error}"), None))?
        .map_err(relay_error)?;
        let downstream_id = handle.id.clone();
        tokio::select! {
            answer = handle.await_response() => answer.map_err(relay_error),
            _ = context.ct.cancelled() => {
                send_cancel(caller, downstream_id).await;
                Err(cancelled_by_the_server())
            }
        }
    }
}

/// The answer to a sampling or elicitation request made to a session that
/// serves no client (see `UpstreamHandler::target_if_any`).
fn serving_no_client() -> ErrorData {
    ErrorData::internal_error(
        "no client is behind this session: the gateway opened it only to list what the server offers",
        None,
    )
}

fn cancelled_by_the_server() -> ErrorData {
    ErrorData::internal_error("cancelled by the server", None)
}

/// An error from the client is the client's answer and goes back verbatim
/// (e.g. -32042 with its data); anything else is the gateway's failure.
fn relay_error(error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(error) => error,
        other => ErrorData::internal_error(format!("the client did not answer: {other}"), None),
    }
}

/// Tells the client the upstream cancelled its request `request_id`, on
/// the stream the request went out on (rmcp would route it by the
/// client's own request ids, which this is not one of, to the `GET`
/// stream: a client without one never learnt of it).
async fn send_cancel(caller: &Caller, request_id: rmcp::model::RequestId) {
    let notification =
        rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
            Some(request_id),
            Some("the upstream server cancelled its request".to_owned()),
        ));
    if let Err(error) = caller.send_on_its_stream(notification.into()).await {
        tracing::debug!(%error, "could not relay a cancellation");
    }
}

fn missing_capability(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("the client session this request belongs to did not declare {what}"),
        None,
    )
}

/// Why a client with `profile` cannot be asked an elicitation in URL
/// mode (`url_mode`) or form mode, if it cannot. A client with
/// elicitation, but not in this mode, answers -32602 itself (2025-11-25
/// elicitation, error handling), which tells the server it may fall back
/// to the other mode; one without elicitation at all, -32601.
fn unsupported_elicitation(profile: super::ClientProfile, url_mode: bool) -> Option<ErrorData> {
    let (supported, other_mode, mode) = match url_mode {
        true => (
            profile.elicitation_url,
            profile.elicitation_form,
            "URL-mode elicitation",
        ),
        false => (
            profile.elicitation_form,
            profile.elicitation_url,
            "form-mode elicitation",
        ),
    };
    match (supported, other_mode) {
        (true, _) => None,
        (false, true) => Some(ErrorData::invalid_params(
            format!("the client session this request belongs to did not declare {mode}"),
            None,
        )),
        (false, false) => Some(missing_capability("elicitation")),
    }
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        mut params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let caller = self.target(&context).await?;
        if !caller.profile.sampling {
            return Err(missing_capability("sampling"));
        }
        metrics().count_relayed(Relayed::Sampling);
        params.meta = self.passed_meta(&context);
        let request = sampling_request(params)?;
        match self.forward(&caller, request, &context).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(unexpected_answer()),
        }
    }

    async fn create_elicitation(
        &self,
        mut params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let caller = self.target(&context).await?;
        let url_id = match &params {
            ElicitRequestParams::UrlElicitationParams { elicitation_id, .. } => {
                Some(elicitation_id.clone())
            }
            _ => None,
        };
        if let Some(refused) = unsupported_elicitation(caller.profile, url_id.is_some()) {
            return Err(refused);
        }
        if let Some(id) = url_id {
            self.relay.remember_elicitation(id, caller.session);
        }
        metrics().count_relayed(Relayed::Elicitation);
        set_elicit_meta(&mut params, self.passed_meta(&context));
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.forward(&caller, request, &context).await? {
            ClientResult::ElicitResult(mut result) => {
                // The client names the task as it knows it; the upstream
                // knows it by its own id.
                if let Some(meta) = result.meta.as_mut() {
                    self.relay
                        .name_task_as_upstream(caller.session, &mut meta.0);
                }
                Ok(result)
            }
            _ => Err(unexpected_answer()),
        }
    }

    /// A session that serves no client has no roots: it is told so, where
    /// an error made servers that ask at their start (server-everything,
    /// the filesystem server) log a failure for each client profile.
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let Some(caller) = self.target_if_any(&context).await? else {
            return Ok(ListRootsResult::default());
        };
        if !caller.profile.roots {
            return Err(missing_capability("roots"));
        }
        metrics().count_relayed(Relayed::Roots);
        let mut request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        if let Some(meta) = self.passed_meta(&context) {
            *request.get_meta_mut() = meta;
        }
        match self.forward(&caller, request, &context).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(unexpected_answer()),
        }
    }

    /// A request rmcp could not read into its model. A sampling request
    /// whose messages hold content it does not know (a newer kind, one the
    /// spec does not allow there) is relayed as written: the client is the
    /// one to accept or refuse it (rmcp's default answered -32601 with the
    /// method as its message, from a gateway that declared sampling). An
    /// elicitation or roots request it could not read is refused as
    /// invalid, saying why; any other method is not found.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        match request.method.as_str() {
            "sampling/createMessage" => self.relay_sampling_as_written(request, &context).await,
            "elicitation/create" => Err(unreadable::<ElicitRequestParams>(&request)),
            "roots/list" => Err(unreadable::<Option<rmcp::model::RequestMetaObject>>(
                &request,
            )),
            method => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            )),
        }
    }

    /// rmcp has cancelled the request's context (`forward` relays the
    /// cancel); this only holds the notification's place until that is
    /// done, so that an answer written right after it waits for it.
    async fn on_cancelled(
        &self,
        params: CancelledNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let _relayed = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        if let Some(id) = &params.request_id {
            self.relay.cancel_relayed(id).await;
        }
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let relayed = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        // The upstream token is the one rmcp chose; the client knows its own.
        let found = match self.relay.progress(&params.progress_token) {
            Some(caller) => Some(caller),
            None => {
                self.relay.settle().await;
                self.relay.progress(&params.progress_token)
            }
        };
        let Some(caller) = found else {
            tracing::debug!(token = ?params.progress_token, "progress for no request in flight");
            return;
        };
        let Some(token) = caller.progress_token.clone() else {
            return;
        };
        params.progress_token = token;
        metrics().count_relayed(Relayed::Progress);
        caller.on_its_stream().await;
        relayed.my_turn().await;
        let mut message = ServerNotification::ProgressNotification(Notification::new(params));
        if let Some(meta) = self.passed_notification_meta(notification_meta(&context)) {
            *message.get_meta_mut() = meta;
        }
        // Without the request's queue, rmcp routes progress to the stream
        // of the request that registered the token.
        if let Err(error) = caller.send_on_its_stream(message).await {
            tracing::debug!(%error, "could not relay progress");
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let relayed = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        let related_task = related_task(&notification_meta(&context).0);
        let attributed = self
            .relay
            .attribute_notification(&context.extensions, related_task)
            .await;
        match attributed {
            Ok(caller) if !caller.log_level.admits(params.level) => {
                tracing::debug!(level = ?params.level, "log message below the client's level");
            }
            Ok(caller) => {
                metrics().count_relayed(Relayed::Log);
                // On the stream of the request it came with, if that is
                // still open; else on the session's `GET` stream.
                caller.on_its_stream().await;
                relayed.my_turn().await;
                let mut message =
                    ServerNotification::LoggingMessageNotification(Notification::new(params));
                if let Some(meta) = self.passed_notification_meta(notification_meta(&context)) {
                    *message.get_meta_mut() = meta;
                }
                // A call given up on (timed out, cancelled) still counts
                // here while its session sleeps and wakes with a new peer:
                // its lines go to the session, which keeps them asleep.
                if caller.peer.is_transport_closed() {
                    self.events.tell_session(caller.session, message);
                } else if let Err(error) = caller.send_on_its_stream(message).await {
                    tracing::debug!(%error, "could not relay a log message");
                }
            }
            // Never broadcast: a shared session's unattributed log line
            // stays in the gateway's own log.
            Err(why) => tracing::debug!(
                level = ?params.level,
                logger = ?params.logger,
                data = %params.data,
                %why,
                "upstream log message not relayed"
            ),
        }
    }

    async fn on_custom_notification(
        &self,
        mut notification: CustomNotification,
        context: NotificationContext<RoleClient>,
    ) {
        // Relayed with its `_meta` (see `notification_meta`), as its
        // client gets it.
        if let Some(meta) = self.passed_notification_meta(notification_meta(&context)) {
            *notification.get_meta_mut() = meta;
        }
        if notification.method == "notifications/elicitation/complete" {
            let id = notification
                .params
                .as_ref()
                .and_then(|params| params.get("elicitationId"))
                .and_then(|id| id.as_str())
                .map(str::to_owned);
            let Some(session) = id.and_then(|id| self.relay.take_elicitation(&id)) else {
                tracing::debug!("elicitation/complete for an unknown elicitation");
                return;
            };
            metrics().count_relayed(Relayed::ElicitationComplete);
            // To the session, not the peer of the request that got the
            // elicitation: the client may take minutes in its browser, and
            // the session may sleep and wake with a new peer meanwhile.
            let relayed = ServerNotification::CustomNotification(notification);
            self.events.tell_session(session, relayed);
            return;
        }
        if notification.method == "notifications/tasks/status" {
            return self.relay_task_status(notification).await;
        }
        tracing::debug!(method = %notification.method, "unknown upstream notification not relayed");
    }

    // Each counted (`ordered::waits_for_relay`) until it is announced: an
    // answer written after it waits for that, so a list the client asks
    // for after the answer waits for the list read again.
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let _handled = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        self.events.list_changed(ListKind::Tools);
    }

    async fn on_prompt_list_changed(&self, context: NotificationContext<RoleClient>) {
        let _handled = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        self.events.list_changed(ListKind::Prompts);
    }

    async fn on_resource_list_changed(&self, context: NotificationContext<RoleClient>) {
        let _handled = RelayedOnDrop(&self.relay, context.extensions.get().copied());
        self.events.list_changed(ListKind::Resources);
    }

    async fn on_resource_updated(
        &self,
        mut params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        // Relayed with its `_meta` (see `notification_meta`), as its
        // clients get it.
        let meta = params
            .meta
            .take()
            .unwrap_or_else(|| notification_meta(&context).clone());
        params.meta = self.passed_notification_meta(&meta);
        self.events.resource_updated(params);
    }
}

/// A notification's `_meta`. rmcp 3.11 moves a notification's extensions
/// into its context before its `_meta` (requests are done the other way
/// round), so `context.meta` is always empty and the `_meta` is among the
/// extensions.
fn notification_meta(context: &NotificationContext<RoleClient>) -> &NotificationMetaObject {
    context
        .extensions
        .get::<NotificationMetaObject>()
        .unwrap_or(&context.meta)
}

/// Marks a notification counted by `OrderedTransport` as handled, on every
/// path out of its handler.
struct RelayedOnDrop<'a>(&'a Relay, Option<Arrival>);

impl RelayedOnDrop<'_> {
    /// Waits until the notifications that arrived before this one have
    /// been relayed (see `Relay::wait_turn`).
    async fn my_turn(&self) {
        if let Some(arrival) = self.1 {
            self.0.wait_turn(arrival).await;
        }
    }
}

impl Drop for RelayedOnDrop<'_> {
    fn drop(&mut self) {
        self.0.notification_relayed(self.1);
    }
}

impl UpstreamHandler {
    /// An upstream message's `_meta` as its client gets it: minus a
    /// progress token (one the client never issued means nothing to it),
    /// with a related task under the id the client knows it by; `None`
    /// when nothing is left.
    fn passed(&self, meta: &MetaObject) -> Option<MetaObject> {
        let mut meta = meta.clone();
        meta.remove("progressToken");
        rename_related_task(&self.relay, &mut meta);
        (!meta.is_empty()).then_some(meta)
    }

    /// The upstream request's `_meta`, as its client gets it.
    fn passed_meta(
        &self,
        context: &RequestContext<RoleClient>,
    ) -> Option<rmcp::model::RequestMetaObject> {
        self.passed(&context.meta.0)
            .map(rmcp::model::RequestMetaObject)
    }

    /// An upstream notification's `_meta`, as its client gets it.
    fn passed_notification_meta(
        &self,
        meta: &NotificationMetaObject,
    ) -> Option<NotificationMetaObject> {
        self.passed(&meta.0).map(NotificationMetaObject)
    }

    /// `notifications/tasks/status`: to the session that created the task,
    /// under its id there. One that arrives before the task's creation is
    /// answered waits (briefly) for it; a task no session here created is
    /// nobody's. One that ends the task follows the progress and logs that
    /// arrived before it.
    async fn relay_task_status(&self, notification: CustomNotification) {
        let upstream_id = notification
            .params
            .as_ref()
            .and_then(|params| params.get("taskId"))
            .and_then(|id| id.as_str());
        let Some(upstream_id) = upstream_id else {
            tracing::debug!("task status without a task id");
            return;
        };
        let terminal = matches!(
            notification
                .params
                .as_ref()
                .and_then(|params| params.get("status"))
                .and_then(|status| status.as_str()),
            Some("completed" | "failed" | "cancelled")
        );
        if terminal {
            // Progress the upstream sent before ending the task goes first:
            // rmcp hands each notification to a task of its own, so this
            // one can run before the last progress is relayed, which would
            // then find no task to reach its client through.
            self.relay.drain().await;
            self.relay.task_ended(upstream_id);
        }
        match self.relay.task_status_owner(upstream_id, &notification) {
            Some(owner) => send_task_status(&self.relay, &owner, notification).await,
            None => tracing::debug!("task status for a task not (yet) created by a client session"),
        }
    }
}

/// Sends a task status notification to the task's owner, with the task
/// (and any related task) under the owner's id.
pub async fn send_task_status(
    relay: &Relay,
    owner: &TaskOwner,
    mut notification: CustomNotification,
) {
    if let Some(params) = notification.params.as_mut().and_then(|p| p.as_object_mut()) {
        params.insert("taskId".to_owned(), owner.task_id.clone().into());
    }
    let meta = &mut notification.get_meta_mut().0;
    rename_related_task(relay, meta);
    if meta.is_empty() {
        notification.extensions.remove::<NotificationMetaObject>();
    }
    metrics().count_relayed(Relayed::TaskStatus);
    let relayed = ServerNotification::CustomNotification(notification);
    if let Err(error) = owner.caller.peer.send_notification(relayed).await {
        tracing::debug!(%error, "could not relay a task status");
    }
}

/// A related task named in `meta`, under the id its owner knows it by.
fn rename_related_task(relay: &Relay, meta: &mut serde_json::Map<String, serde_json::Value>) {
    if let Some(owner) = related_task(meta).and_then(|id| relay.task_owner(id)) {
        set_related_task(meta, &owner.task_id);
    }
}

fn set_elicit_meta(params: &mut ElicitRequestParams, meta: Option<rmcp::model::RequestMetaObject>) {
    match params {
        ElicitRequestParams::FormElicitationParams { meta: slot, .. }
        | ElicitRequestParams::UrlElicitationParams { meta: slot, .. } => *slot = meta,
        _ => {}
    }
}

fn unexpected_answer() -> ErrorData {
    ErrorData::internal_error("the client answered with an unexpected result type", None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ClientProfile;

    /// A client with elicitation in the other mode only is answered
    /// -32602 (the server may fall back); one without elicitation -32601.
    #[test]
    fn an_elicitation_in_a_mode_the_client_lacks_is_invalid_params() {
        let form_only = ClientProfile {
            elicitation_form: true,
            ..ClientProfile::default()
        };
        let url_only = ClientProfile {
            elicitation_url: true,
            ..ClientProfile::default()
        };
        let code = |profile, url_mode| unsupported_elicitation(profile, url_mode).map(|e| e.code);
        assert_eq!(code(form_only, false), None);
        assert_eq!(code(form_only, true), Some(ErrorCode::INVALID_PARAMS));
        assert_eq!(code(url_only, true), None);
        assert_eq!(code(url_only, false), Some(ErrorCode::INVALID_PARAMS));
        let none = ClientProfile::default();
        assert_eq!(code(none, true), Some(ErrorCode::METHOD_NOT_FOUND));
        assert_eq!(code(ClientProfile::FULL, true), None);
    }
}
