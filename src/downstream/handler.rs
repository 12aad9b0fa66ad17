//! The MCP methods of a downstream session: answer locally or route.
//!
//! Lists are served from the discovery cache (the session's view of it)
//! without touching an upstream. Calls are resolved to a mount through the
//! catalog, un-rewritten to the upstream's own name, sent on the session's
//! upstream for that mount, and the result rewritten on the way back. A
//! client cancel drops the upstream call, which makes rmcp send the
//! upstream its own `notifications/cancelled` with the upstream's id.

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
        CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse, Implementation,
        InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject, ServerCapabilities,
        ServerConfig, ServerResult, SetLevelRequestParams, SubscribeRequestParams,
        UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext},
    transport::streamable_http_server::session::SessionRestoreMarker,
    ErrorData, RoleServer, ServerHandler,
};

use super::{
    quick_call,
    routed::{self, Routed, RoutedRequest},
    DownstreamSession, RouteError, SessionState,
};
use crate::{
    catalog::{Listing, MergedCatalog, PageError},
    config::Isolation,
    gateway::{bounded, CallInFlight, Gateway, Mount, SubscriptionError},
    naming::MountName,
    upstream::{Caller, ClientProfile, UpstreamSession},
};

/// The newest protocol version the gateway speaks downstream. 2026-07-28
/// (no `initialize`, no sessions) is not offered yet, so clients that probe
/// with `server/discover` fall back to the handshake.
const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

impl DownstreamSession {
    /// What the client is told at initialize: how names are formed for each
    /// mount, followed by that upstream's own instructions when known.
    fn instructions(&self) -> String {
        let config = self.gateway.config();
        let separator = config.server.separator.as_str();
        let fitted = match config.server.fit_tool_names {
            true => " (a tool name clients would refuse shortened, with a hash at its end)",
            false => "",
        };
        let mut text = String::from("Junction MCP gateway. Mounted servers:");
        let state = self.state();
        let mounts = self.gateway.mounts();
        for mount in self.gateway.served(state.endpoint(), &mounts) {
            let namespace = mount.config.namespace.as_str();
            let naming = if namespace.is_empty() {
                "names unchanged".to_owned()
            } else {
                format!(
                    "tools and prompts {namespace}{separator}<name>{fitted}, resources {namespace}+<uri>"
                )
            };
            text.push_str(&format!("\n- {} ({naming})", mount.config.name));
            if let Some(own) = mount.instructions() {
                text.push_str(": ");
                text.push_str(own.trim());
            }
        }
        text
    }

    /// The downstream end of `context`'s request, for the relay.
    pub(super) fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        Caller {
            session: self.state().key,
            peer: context.peer.clone(),
            request_id: Some(context.id.clone()),
            progress_token: context.meta.get_progress_token(),
            profile: self.state().profile(),
            log_level: self.state().log_level.clone(),
            request_stream: super::http_session_id(context)
                .and_then(|session| self.gateway.request_streams().queue(session, &context.id)),
            handoff: None,
        }
    }

    /// The route of resource `uri`, its mount, this session's upstream for
    /// it, and the request to be sent there counted in flight (see
    /// [`connect`]).
    async fn resource_upstream(
        &self,
        uri: &str,
    ) -> Result<
        (
            crate::catalog::Route,
            Arc<Mount>,
            Arc<UpstreamSession>,
            CallInFlight,
        ),
        RouteError,
    > {
        let route = self
            .catalog()
            .await
            .resolve_uri(uri)
            .ok_or_else(|| RouteError::UnknownResource(uri.to_owned()))?;
        let (mount, upstream, in_flight) = self.connect(&route.mount).await?;
        Ok((route, mount, upstream, in_flight))
    }

    /// Unsubscribes `uri` here alone if it routes to a per-session mount
    /// whose upstream this session has not opened (or no longer has): it
    /// holds no subscription there, and opening one (a new process) only
    /// to unsubscribe would be waste; or to a mount that is gone. Whether
    /// that was the case.
    fn unsubscribe_without_upstream(&self, uri: &str) -> bool {
        let state = self.state();
        let Some(route) = self.unsubscribe_route(uri) else {
            return false;
        };
        let Some(mount) = self.gateway.mount(&route.mount) else {
            // Subscribed on a mount a reload has removed since (racing
            // the move in `SessionRegistry::reroute`): no upstream
            // holds it any more.
            self.gateway.sessions().unsubscribe(state.key, uri);
            return true;
        };
        let per_session = mount.config.isolation == Isolation::PerSession;
        if !per_session || state.open_upstream(&route.mount).is_some() {
            return false;
        }
        self.gateway.sessions().unsubscribe(state.key, uri);
        true
    }

    /// Where an unsubscribe from `uri` goes: where this session's
    /// subscription to it went, else where `uri` routes now. A reload may
    /// have changed the mount's namespace, or another mount may have
    /// taken the name, since: resolved afresh, the unsubscribe was refused
    /// or went elsewhere, and the upstream stayed subscribed.
    fn unsubscribe_route(&self, uri: &str) -> Option<crate::catalog::Route> {
        let state = self.state();
        self.gateway
            .sessions()
            .subscribed_route(state.key, uri)
            .or_else(|| state.catalog(&self.gateway).resolve_uri(uri))
    }

    /// The session's catalog, after making sure its per-session mounts
    /// were discovered for this client's profile.
    pub(super) async fn catalog(&self) -> Arc<MergedCatalog> {
        self.state().ready_catalog(&self.gateway).await
    }

    /// [`Self::catalog`] to list `listing` from, with the changes
    /// announced so far read.
    async fn listing_catalog(&self, listing: Listing) -> Arc<MergedCatalog> {
        self.state().listing_catalog(&self.gateway, listing).await
    }

    /// Answers a request routed to one mount: the quick path's, if it
    /// started the request and handed it over (admitted and observed
    /// there, only awaited here), else routed here.
    async fn routed(
        &self,
        request: Routed,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        if let Some(running) = context
            .extensions
            .get::<quick_call::HandedOver>()
            .and_then(quick_call::HandedOver::take)
        {
            return running.finish(&context.ct).await;
        }
        let method = request.method();
        self.handle(method, context, async {
            let routed = RoutedRequest {
                request,
                caller: self.caller(context),
                cancel: context.ct.clone(),
            };
            routed::answer(&self.gateway, &self.state(), routed, &context.meta).await
        })
        .await
    }

    /// The mount named `name` and this session's upstream for it.
    pub(super) async fn connect(
        &self,
        name: &MountName,
    ) -> Result<(Arc<Mount>, Arc<UpstreamSession>, CallInFlight), RouteError> {
        connect(&self.gateway, &self.state(), name).await
    }
}

/// The mount named `name`, `state`'s session's upstream for it, and the
/// request about to be sent there counted in flight on the mount: keep it
/// until the answer is taken, so that a reload replacing the mount lets
/// the request finish first.
pub(super) async fn connect(
    gateway: &Gateway,
    state: &Arc<SessionState>,
    name: &MountName,
) -> Result<(Arc<Mount>, Arc<UpstreamSession>, CallInFlight), RouteError> {
    let Some(mount) = gateway.mount(name) else {
        return Err(no_longer_configured(name));
    };
    super::observe::routed_to(&mount.config.name);
    let upstream = state.upstream_for(&mount).await;
    // Counted before the replaced mark is read (`CallsInFlight`).
    let call = mount.call_started();
    match (upstream, call) {
        (Ok(upstream), Some(call)) => return Ok((mount, upstream, call)),
        (Err(error), _) if !mount.is_replaced() && !mount.is_retired() => return Err(error),
        // Not counted (`None`) only once replaced.
        _ => {}
    }
    // A reload replaced the mount while this waited for it (a start, a
    // restart) or before the request was counted: it goes to the mount
    // now serving the name, as one arriving a moment later would.
    let Some(current) = gateway.mount(name).filter(|now| now.id() != mount.id()) else {
        return Err(no_longer_configured(name));
    };
    let upstream = state.upstream_for(&current).await?;
    let Some(call) = current.call_started() else {
        // Replaced again meanwhile: as if it came after that reload too.
        return Err(RouteError::MountUnavailable {
            mount: name.clone(),
            cause: "a config reload is replacing the mount; try again".to_owned(),
        });
    };
    Ok((current, upstream, call))
}

fn no_longer_configured(name: &MountName) -> RouteError {
    RouteError::MountUnavailable {
        mount: name.clone(),
        cause: "the mount is no longer configured".to_owned(),
    }
}

/// The client's `_meta` for the upstream request, minus the progress token
/// (rmcp puts its own token on every outbound request) and any related
/// task: a client names tasks by the gateway's ids, which mean nothing
/// upstream, and passed on as written a shared upstream would read a
/// raw id the client chose, perhaps another session's task.
pub(super) fn forwarded_meta(meta: &RequestMetaObject) -> Option<RequestMetaObject> {
    let mut meta = meta.clone();
    meta.0.remove("progressToken");
    meta.0.remove(crate::upstream::relay::RELATED_TASK);
    (!meta.0.is_empty()).then_some(meta)
}

/// The longest URI a session may subscribe to.
pub const MAX_SUBSCRIBED_URI_BYTES: usize = 16 * 1024;

/// A shared upstream's subscription call failed (see
/// `gateway::subscriptions`).
fn subscription_failed(mount: &Mount, error: SubscriptionError) -> RouteError {
    match error {
        SubscriptionError::Upstream(error) => RouteError::upstream(mount, error.into()),
        timed_out @ SubscriptionError::TimedOut(_) => RouteError::TimedOut {
            mount: mount.config.name.clone(),
            cause: timed_out.to_string(),
        },
        too_many @ SubscriptionError::TooMany => RouteError::LimitExceeded {
            what: too_many.to_string(),
            limit: crate::gateway::MAX_SUBSCRIPTIONS_PER_SESSION,
        },
        SubscriptionError::SessionEnded => RouteError::SessionEnded,
    }
}

/// Whether the upstream declared a server capability at initialize.
pub(super) fn declares(
    upstream: &UpstreamSession,
    check: impl Fn(&ServerCapabilities) -> bool,
) -> bool {
    upstream
        .peer()
        .peer_info()
        .is_some_and(|info| check(&info.capabilities))
}

/// A request handed over by the quick path ended with a result of another
/// method's type: it cannot happen (the handover rides on its request).
fn answered_as_another_method() -> ErrorData {
    ErrorData::internal_error(
        "the request was answered with another method's result",
        None,
    )
}

/// An upstream answered with something that is not a `T`, the result the
/// request asks for: a result of another type, or one that fails to read
/// as a `T` (a content block of a kind rmcp does not know, a missing
/// field), which says why.
pub(super) fn unexpected<T: serde::de::DeserializeOwned>(
    mount: &Mount,
    answer: &ServerResult,
) -> RouteError {
    let expected = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or_default();
    // serde's reason quotes what it could not read (the upstream's data,
    // which may be a whole tool output): the client is told a bounded
    // part of it, the log only what was expected.
    let cause = match answer {
        ServerResult::CustomResult(rmcp::model::CustomResult(written)) => {
            match T::deserialize(written) {
                Err(why) => format!(
                    "the upstream's result could not be read: {}",
                    crate::telemetry::redact::bounded(&why.to_string())
                ),
                Ok(_) => "the upstream answered with an unexpected result type".to_owned(),
            }
        }
        _ => "the upstream answered with an unexpected result type".to_owned(),
    };
    tracing::warn!(mount = %mount.config.name, expected, "an upstream's answer was not relayed: it is not the result asked for");
    RouteError::UpstreamFailed {
        mount: mount.config.name.clone(),
        cause,
    }
}

/// The page `request`'s cursor names, made by `page` from the cache
/// (counted as a cache hit); a bad cursor is the client's error.
fn cached_page<R>(
    request: &Option<PaginatedRequestParams>,
    page: impl FnOnce(Option<&str>) -> Result<R, PageError>,
) -> Result<R, ErrorData> {
    crate::telemetry::metrics().cache_hits.inc();
    let cursor = request.as_ref().and_then(|params| params.cursor.as_deref());
    page(cursor).map_err(|error| ErrorData::invalid_params(error.to_string(), None))
}

/// One page of the tools `catalog` lists.
fn tools_page(
    catalog: &MergedCatalog,
    request: &Option<PaginatedRequestParams>,
) -> Result<ListToolsResult, ErrorData> {
    cached_page(request, |cursor| catalog.tools_page(cursor))
}

impl ServerHandler for DownstreamSession {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        capabilities.experimental = None;
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("junction", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let answer = async {
            // A client's second `initialize` on its session (rmcp passes it
            // on): its capabilities would go nowhere (upstreams, profile
            // and catalog were set by the first), and the answer would not
            // be the session's. A new session is a new `initialize`
            // without a session id.
            let waking = context.extensions.get::<SessionRestoreMarker>();
            if waking.is_none() && self.state().initialize.get().is_some() {
                return Err(ErrorData::invalid_request(
                    "the session is already initialized; to start over, send initialize without an Mcp-Session-Id",
                    None,
                ));
            }
            // rmcp replays `initialize` to wake a session asleep.
            if let Some(waking) = waking {
                let Some(sleeper) = self.gateway.hibernation().wake(&waking.id) else {
                    return Err(ErrorData::invalid_request("the session has ended", None));
                };
                self.state
                    .store(super::SessionState::woken(&self.gateway, sleeper));
            }
            context.peer.set_peer_info(request.clone());
            let state = self.state();
            let _ = state.initialize.set(request.clone());
            let _ = state.client_capabilities.set(request.capabilities.clone());
            // A wake is not passed through `handle`, which reads the
            // headers of every other request.
            if let Some(headers) = super::http_headers(&context) {
                state.note_client_headers(&self.gateway, headers);
            }
            let _ = state.profile.set(ClientProfile::of(&request.capabilities));
            // A session woken keeps the endpoint it was opened on (set
            // from its sleeper), whatever path wakes it.
            let _ = state.endpoint.set(super::served_endpoint(&context));
            *super::lock(&state.peer) = Some(context.peer.clone());
            // Known to the registry from here, not from
            // `notifications/initialized`: rmcp serves requests before it
            // (as the spec allows), and a subscription or log level set
            // then was answered as done and recorded nowhere (the update
            // never came, and the upstream stayed subscribed for good). A
            // session waking is registered again by its replayed
            // `initialized`, which hands it what it missed.
            if context.extensions.get::<SessionRestoreMarker>().is_none() {
                self.gateway.sessions().register(
                    state.key,
                    context.peer.clone(),
                    state.profile(),
                    state.endpoint_name(),
                );
            }
            self.negotiate_initialize(&request)
        };
        // A wake is no client's initialize: not counted or traced as one
        // (with sessions sleeping after a minute idle, wakes outnumbered
        // the new sessions the initialize count stands for).
        match context.extensions.get::<SessionRestoreMarker>() {
            Some(_) => answer.await,
            None => self.handle("initialize", &context, answer).await,
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let state = self.state();
        let rmcp_id = match context.extensions.get::<SessionRestoreMarker>() {
            Some(waking) => Some(waking.id.clone()),
            None => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.headers.get("mcp-session-id"))
                .and_then(|value| value.to_str().ok())
                .map(Arc::from),
        };
        if let Some(id) = rmcp_id {
            let _ = state.rmcp_id.set(id.clone());
            self.gateway.hibernation().initialized(&id, &state);
        }
        self.gateway.sessions().register(
            state.key,
            context.peer.clone(),
            state.profile(),
            state.endpoint_name(),
        );
        tracing::debug!(session = state.key, "downstream session initialized");
    }

    /// The client's roots changed: its per-session upstreams (which asked it
    /// for roots) are told. Shared upstreams are not: their roots requests
    /// are answered per calling client, so they hold no roots to refresh.
    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        let state = self.state();
        let mounts = self.gateway.mounts();
        for mount in self.gateway.served(state.endpoint(), &mounts) {
            if mount.config.isolation != Isolation::PerSession {
                continue;
            }
            // One still opening is told too, once open: it may have asked
            // for the roots already, at its start.
            if let Some(upstream) = self
                .state()
                .open_or_opening_upstream(&mount.config.name)
                .await
            {
                if let Err(error) = upstream.peer().notify_roots_list_changed().await {
                    tracing::debug!(mount = %mount.config.name, error = %crate::upstream::http_client::with_causes(&error), "could not relay roots/list_changed");
                }
            }
        }
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::DiscoverRequestMethod,
        >())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.handle("tools/list", &context, async {
            tools_page(&*self.listing_catalog(Listing::Tools).await, &request)
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.handle("prompts/list", &context, async {
            let catalog = self.listing_catalog(Listing::Prompts).await;
            cached_page(&request, |cursor| catalog.prompts_page(cursor))
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.handle("resources/list", &context, async {
            let catalog = self.listing_catalog(Listing::Resources).await;
            cached_page(&request, |cursor| catalog.resources_page(cursor))
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.handle("resources/templates/list", &context, async {
            let catalog = self.listing_catalog(Listing::ResourceTemplates).await;
            cached_page(&request, |cursor| catalog.templates_page(cursor))
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.routed(Routed::CallTool(request), &context).await? {
            ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
            _ => Err(answered_as_another_method()),
        }
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        match self.routed(Routed::GetPrompt(request), &context).await? {
            ServerResult::GetPromptResult(result) => Ok(GetPromptResponse::Complete(result)),
            _ => Err(answered_as_another_method()),
        }
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.routed(Routed::ReadResource(request), &context).await? {
            ServerResult::ReadResourceResult(result) => Ok(ReadResourceResponse::Complete(result)),
            _ => Err(answered_as_another_method()),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        match self.routed(Routed::Complete(request), &context).await? {
            ServerResult::CompleteResult(result) => Ok(result),
            _ => Err(answered_as_another_method()),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handle("resources/subscribe", &context, async {
            let uri = request.uri.clone();
            super::observe::concerns_resource(&uri);
            let answer = async {
                // Kept for the session's life, several times over (and
                // held upstream): a bound on the count alone let one
                // session hold 1,000 URIs of up to `max_body_size` each.
                if uri.len() > MAX_SUBSCRIBED_URI_BYTES {
                    return Err(RouteError::LimitExceeded {
                        what: format!(
                            "a URI to subscribe to may have at most {MAX_SUBSCRIBED_URI_BYTES} bytes; this one has {}",
                            uri.len()
                        ),
                        limit: MAX_SUBSCRIBED_URI_BYTES,
                    });
                }
                let (route, mount, upstream, _in_flight) = self.resource_upstream(&uri).await?;
                let subscribable = |c: &ServerCapabilities| {
                    c.resources
                        .as_ref()
                        .is_some_and(|r| r.subscribe == Some(true))
                };
                if !declares(&upstream, subscribable) {
                    return Err(RouteError::Unsupported {
                        mount: mount.config.name.clone(),
                        feature: "resource subscriptions",
                    });
                }
                let key = self.state().key;
                let sessions = self.gateway.sessions();
                let meta = forwarded_meta(&context.meta);
                if mount.config.isolation == Isolation::Shared {
                    // Subscribed once for every session: see
                    // `gateway::subscriptions`.
                    let timeout = mount.timeouts().request;
                    return mount
                        .subscriptions
                        .subscribe(sessions, key, &uri, &route, &upstream, meta, timeout)
                        .await
                        .map_err(|error| subscription_failed(&mount, error));
                }
                // A per-session upstream belongs to this session alone.
                // Subscribed already, through this upstream: nothing to
                // ask again (a server refusing a duplicate would have had
                // the working subscription dropped from the registry).
                // (A reopened upstream is subscribed again as it opens.)
                if sessions.subscribed_route(key, &uri).as_ref() == Some(&route) {
                    return Ok(());
                }
                if let Err(refused) = sessions.subscribe(key, &uri, &route) {
                    return Err(subscription_failed(&mount, refused));
                }
                let mut params = SubscribeRequestParams::new(route.original.to_string());
                params.meta = meta;
                let timeout = mount.timeouts().request;
                if let Err(error) =
                    bounded(&upstream, timeout, upstream.peer().subscribe(params)).await
                {
                    sessions.unsubscribe(key, &uri);
                    return Err(subscription_failed(&mount, error));
                }
                Ok(())
            }
            .await;
            answer.map_err(RouteError::into_mcp_error)
        })
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handle("resources/unsubscribe", &context, async {
            let uri = request.uri.clone();
            super::observe::concerns_resource(&uri);
            let answer = async {
                if self.unsubscribe_without_upstream(&uri) {
                    return Ok(());
                }
                let route = match self.unsubscribe_route(&uri) {
                    Some(route) => route,
                    None => return Err(RouteError::UnknownResource(uri.clone())),
                };
                let key = self.state().key;
                let sessions = self.gateway.sessions();
                let meta = forwarded_meta(&context.meta);
                // A shared mount's subscriptions are the mount's to let go
                // of, on whichever upstream session holds them (if any is
                // live: a mount restarting or down holds none).
                if let Some(mount) = self
                    .gateway
                    .mount(&route.mount)
                    .filter(|mount| mount.config.isolation == Isolation::Shared)
                {
                    super::observe::routed_to(&mount.config.name);
                    let timeout = mount.timeouts().request;
                    return mount
                        .subscriptions
                        .unsubscribe(sessions, key, &uri, meta, timeout)
                        .await
                        .map_err(|error| subscription_failed(&mount, error));
                }
                let (mount, upstream, _in_flight) = self.connect(&route.mount).await?;
                sessions.unsubscribe(key, &uri);
                let mut params = UnsubscribeRequestParams::new(route.original.to_string());
                params.meta = meta;
                let timeout = mount.timeouts().request;
                bounded(&upstream, timeout, upstream.peer().unsubscribe(params))
                    .await
                    .map_err(|error| subscription_failed(&mount, error))
            }
            .await;
            answer.map_err(RouteError::into_mcp_error)
        })
        .await
    }

    /// The requests `tasks::as_custom_request` handed here: 2025-11-25
    /// tasks, and `tools/list` once some tool declares an `execution`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let answer = match method.as_str() {
            "tools/call" => self.call_tool_as_task(params, context).await,
            "tasks/get" => self.task_request("tasks/get", params, context).await,
            "tasks/result" => self.task_request("tasks/result", params, context).await,
            "tasks/cancel" => self.task_request("tasks/cancel", params, context).await,
            "tasks/list" => self.list_tasks(params, context).await,
            "tools/list" => {
                let params = params
                    .map(serde_json::from_value::<PaginatedRequestParams>)
                    .transpose()
                    .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
                self.handle("tools/list", &context, async {
                    // One catalog for the page and its tools' `execution`.
                    let catalog = self.listing_catalog(Listing::Tools).await;
                    let result = tools_page(&catalog, &params)?;
                    match super::tasks::with_execution(&result, &catalog.tool_execution) {
                        Some(listed) => Ok(listed),
                        None => serde_json::to_value(result)
                            .map_err(|error| ErrorData::internal_error(error.to_string(), None)),
                    }
                })
                .await
            }
            _ => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            )),
        };
        answer.map(CustomResult)
    }

    /// Sets the level on every upstream this session uses that declares
    /// logging: shared mounts, and the per-session upstreams already open
    /// (one not open yet is not started just for this; one opening is told
    /// once open, unawaited). A shared upstream logs everything
    /// (`sessions::SHARED_LOG_LEVEL`) once any session set a level.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handle("logging/setLevel", &context, async {
            self.state().log_level.set(request.level);
            // A shared upstream serves every session: it logs everything;
            // each session's own level is applied when messages are relayed.
            self.gateway
                .sessions()
                .set_log_level(self.state().key, request.level);
            let shared_level = crate::gateway::SHARED_LOG_LEVEL;
            // Every mount at once, each within its request timeout: one
            // upstream that never answers holds neither the client nor
            // the mounts after it.
            let mounts = self.gateway.mounts();
            let state = self.state();
            let seen = self.gateway.served(state.endpoint(), &mounts);
            let tell = seen.map(|mount| async move {
                let upstream = match mount.config.isolation {
                    // Not waited for: one still starting is told the level
                    // when it starts (`session_started`).
                    Isolation::Shared => mount.live_shared_session().map(|up| (up, shared_level)),
                    Isolation::PerSession => {
                        let open = self.state().open_upstream(&mount.config.name);
                        if open.is_none() {
                            // One still opening may have read the level
                            // before this: it is told once open, without
                            // holding the client's answer for the open.
                            let state = self.state();
                            let mount = mount.clone();
                            tokio::spawn(async move {
                                if let Some(up) =
                                    state.open_or_opening_upstream(&mount.config.name).await
                                {
                                    tell_level(&mount, &up, request.level).await;
                                }
                            });
                        }
                        open.map(|up| (up, request.level))
                    }
                };
                if let Some((upstream, level)) = upstream {
                    tell_level(mount, &upstream, level).await;
                }
            });
            futures::future::join_all(tell).await;
            Ok(())
        })
        .await
    }
}

/// Tells `upstream` (of `mount`) to log at `level`, if it declares logging,
/// within the mount's request timeout.
async fn tell_level(
    mount: &crate::gateway::Mount,
    upstream: &Arc<crate::upstream::UpstreamSession>,
    level: rmcp::model::LoggingLevel,
) {
    if declares(upstream, |c| c.logging.is_some()) {
        let params = SetLevelRequestParams::new(level);
        let timeout = mount.timeouts().request;
        if let Err(error) = bounded(upstream, timeout, upstream.peer().set_level(params)).await {
            tracing::debug!(mount = %mount.config.name, error = %crate::upstream::http_client::with_causes(&error), "logging/setLevel failed upstream");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_progress_token_and_related_task_stay_here() {
        let mut meta = RequestMetaObject::default();
        meta.0.insert("progressToken".into(), serde_json::json!(7));
        meta.0.insert(
            crate::upstream::relay::RELATED_TASK.into(),
            serde_json::json!({"taskId": "1"}),
        );
        assert!(forwarded_meta(&meta).is_none());
        meta.0
            .insert("traceparent".into(), serde_json::json!("00-x"));
        let forwarded = forwarded_meta(&meta).expect("the rest goes on");
        assert_eq!(forwarded.0.keys().collect::<Vec<_>>(), ["traceparent"]);
    }
}
