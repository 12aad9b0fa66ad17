//! The requests routed to one mount: `tools/call`, `prompts/get`,
//! `resources/read` and `completion/complete`. Each is resolved to its
//! mount by name, URI or reference, sent upstream under the upstream's own
//! name, and its answer qualified for the client.
//!
//! Two ways lead here: rmcp's handler (`handler.rs`) and the quick path
//! that answers before rmcp's handler (`quick_call.rs`). Both run this same
//! work inside the same admission and observation, so a request is routed,
//! limited, timed out, relayed and rewritten the same whichever way it
//! came.

use std::sync::Arc;

use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, CompleteRequest,
        CompleteRequestParams, CompleteResult, GetPromptRequest, GetPromptRequestParams,
        GetPromptResult, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResult,
        Reference, RequestMetaObject, ServerResult,
    },
    ErrorData,
};
use tokio_util::sync::CancellationToken;

use super::{
    handler::{connect, declares, forwarded_meta, unexpected},
    RouteError, SessionState,
};
use crate::{
    catalog::MergedCatalog,
    gateway::{Gateway, Mount, MountPhase},
    naming::MountName,
    rewrite,
    upstream::{Caller, RequestError, UpstreamSession},
};

/// What a client asked of one mount.
pub(crate) enum Routed {
    CallTool(CallToolRequestParams),
    GetPrompt(GetPromptRequestParams),
    ReadResource(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
}

impl Routed {
    /// The request's JSON-RPC method.
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Routed::CallTool(_) => "tools/call",
            Routed::GetPrompt(_) => "prompts/get",
            Routed::ReadResource(_) => "resources/read",
            Routed::Complete(_) => "completion/complete",
        }
    }
}

/// A routed request, and where what it causes downstream goes.
pub(crate) struct RoutedRequest {
    pub request: Routed,
    pub caller: Caller,
    /// Fires when the client cancels the request.
    pub cancel: CancellationToken,
}

/// The answer to `request` in `state`'s session, `meta` being the `_meta`
/// the client sent with it: the upstream's result, qualified, or the
/// gateway's failure as the client should see it.
pub(crate) async fn answer(
    gateway: &Arc<Gateway>,
    state: &Arc<SessionState>,
    request: RoutedRequest,
    meta: &RequestMetaObject,
) -> Result<ServerResult, ErrorData> {
    let RoutedRequest {
        request,
        caller,
        cancel,
    } = request;
    let to = Upstream {
        gateway,
        state,
        caller,
        cancel: &cancel,
        meta,
    };
    let answer = match request {
        // A call's failures are mostly tool errors, decided in `call_tool`.
        Routed::CallTool(params) => {
            return to.call_tool(params).await.map(ServerResult::CallToolResult)
        }
        Routed::GetPrompt(params) => to
            .get_prompt(params)
            .await
            .map(ServerResult::GetPromptResult),
        Routed::ReadResource(params) => to
            .read_resource(params)
            .await
            .map(ServerResult::ReadResourceResult),
        Routed::Complete(params) => to.complete(params).await.map(ServerResult::CompleteResult),
    };
    answer.map_err(RouteError::into_mcp_error)
}

/// What [`Upstream::send`]'s second attempt needs (the caller went with
/// the first).
struct Again<'a> {
    gateway: &'a Arc<Gateway>,
    state: &'a Arc<SessionState>,
    cancel: &'a CancellationToken,
}

impl Again<'_> {
    /// Sends `request` on the mount's next session.
    async fn send(
        self,
        name: &MountName,
        request: ClientRequest,
        caller: Caller,
        tool: Option<&str>,
    ) -> Result<ServerResult, RouteError> {
        let (mount, upstream, _in_flight) = connect(self.gateway, self.state, name).await?;
        upstream
            .request(request, caller, self.cancel, mount.request_limit(tool))
            .await
            .map_err(|error| RouteError::of_sessions_request(self.state, &mount, error))
    }
}

/// Why tool `name`, in none of `catalog`'s lists, is no tool. A fitted
/// name routes only by the lists; one kept from an earlier run, whose
/// mount has not listed its tools yet (down, or still starting), is
/// that mount's being unavailable, as a name as qualified would be, not
/// an unknown tool.
pub(super) fn unlisted_tool(gateway: &Gateway, catalog: &MergedCatalog, name: &str) -> RouteError {
    let unready = catalog
        .may_be_fitted(name)
        .then(|| catalog.namespace_claiming_tool(name))
        .flatten()
        .and_then(|mount| gateway.mount(&mount))
        .map(|mount| (mount.config.name.clone(), mount.status()))
        .filter(|(_, status)| status.phase != MountPhase::Ready);
    match unready {
        Some((mount, status)) => RouteError::MountUnavailable {
            mount,
            cause: format!(
                "its tools are not listed yet ({})",
                status.last_error.as_deref().unwrap_or("starting")
            ),
        },
        None => RouteError::UnknownTool(name.to_owned()),
    }
}

/// Everything a routed request needs on its way upstream.
struct Upstream<'a> {
    gateway: &'a Arc<Gateway>,
    state: &'a Arc<SessionState>,
    caller: Caller,
    cancel: &'a CancellationToken,
    meta: &'a RequestMetaObject,
}

impl Upstream<'_> {
    /// The route `resolve` finds in this session's catalog as it is, or,
    /// if the name is not there, once its per-session mounts know their
    /// lists for this client's profile: a call to a name already listed
    /// does not wait on another mount's discovery for a new profile (up to
    /// `PROFILE_DISCOVERY_WAIT`; until then the catalog shows that mount's
    /// full list).
    async fn route<T>(&self, resolve: impl Fn(&MergedCatalog) -> Option<T>) -> Option<T> {
        if let Some(route) = resolve(&self.state.catalog(self.gateway)) {
            return Some(route);
        }
        resolve(&*self.state.ready_catalog(self.gateway).await)
    }

    /// Sends `request` on `upstream` for the client's request; a call's
    /// limit depends on its tool. An HTTP upstream that no longer knows
    /// the session (it restarted, or expired the session) is sent it once
    /// more on the mount's next session, so that a rolling deploy of the
    /// upstream fails no call: a `tools/call` only if the upstream refused
    /// it unrun (a tool must not run twice), the reads whatever point the
    /// exchange had reached.
    async fn send(
        self,
        mount: &Mount,
        upstream: &UpstreamSession,
        request: ClientRequest,
        tool: Option<&str>,
    ) -> Result<ServerResult, RouteError> {
        let limit = mount.request_limit(tool);
        let is_call = matches!(request, ClientRequest::CallToolRequest(_));
        // Boxed, as what they are kept for is rare: each is held across
        // the exchange, in a future moved whole several times per call.
        let caller = upstream
            .may_refuse_unrun()
            .then(|| Box::new(self.caller.clone()));
        // A call refused unrun comes back with its refusal (the direct
        // path); a read, sent by rmcp's client, is copied beforehand.
        let read = (caller.is_some() && !is_call).then(|| Box::new(request.clone()));
        let answer = upstream
            .request(request, self.caller, self.cancel, limit)
            .await;
        let (request, caller) = match (answer, caller) {
            (Err(RequestError::Expired { unrun, unsent }), Some(caller)) => {
                match (is_call, unrun, unsent, read) {
                    (true, true, Some(unsent), _) => (*unsent, *caller),
                    (false, _, _, Some(read)) => (*read, *caller),
                    _ => {
                        let error = RequestError::Expired {
                            unrun,
                            unsent: None,
                        };
                        return Err(RouteError::of_sessions_request(self.state, mount, error));
                    }
                }
            }
            (answer, _) => {
                return answer
                    .map_err(|error| RouteError::of_sessions_request(self.state, mount, error))
            }
        };
        tracing::info!(mount = %mount.config.name, "the upstream no longer knew the session; sending the request again on a new one");
        // Boxed: inline, this rare path's futures (a connect, a second
        // exchange) made every call's future larger, and it is moved
        // whole several times per call (+6% instructions per call).
        let again = Again {
            gateway: self.gateway,
            state: self.state,
            cancel: self.cancel,
        };
        Box::pin(again.send(&mount.config.name, request, caller, tool)).await
    }

    /// A dead mount is a tool error, an unknown tool a JSON-RPC error.
    async fn call_tool(
        self,
        mut params: CallToolRequestParams,
    ) -> Result<CallToolResult, ErrorData> {
        let name = params.name.to_string();
        let answer = async {
            let (route, listed) = self
                .route(|catalog| catalog.resolve_tool_listed(&name))
                .await
                .ok_or_else(|| {
                    unlisted_tool(self.gateway, &self.state.catalog(self.gateway), &name)
                })?;
            if listed {
                super::observe::names_listed(super::observe::Target::Tool, &name);
            }
            let (mount, upstream, _in_flight) =
                connect(self.gateway, self.state, &route.mount).await?;
            params.name = route.original.to_string().into();
            params.meta = forwarded_meta(self.meta);
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            match self
                .send(&mount, &upstream, request, Some(&route.original))
                .await?
            {
                ServerResult::CallToolResult(mut result) => {
                    rewrite::qualify_tool_result(&mount.config.namespace, &mut result);
                    Ok(result)
                }
                // Read whole, it failed: a block rmcp cannot read is
                // relayed as text rather than losing the whole output.
                ServerResult::CustomResult(written) => {
                    match super::lenient_result::read_leniently(&written.0) {
                        Some((mut result, replaced)) => {
                            tracing::debug!(mount = %mount.config.name, replaced, "content blocks of a tool result the gateway cannot read are relayed as text");
                            rewrite::qualify_tool_result(&mount.config.namespace, &mut result);
                            Ok(result)
                        }
                        None => Err(unexpected::<CallToolResult>(
                            &mount,
                            &ServerResult::CustomResult(written),
                        )),
                    }
                }
                other => Err(unexpected::<CallToolResult>(&mount, &other)),
            }
        }
        .await;
        answer.or_else(|error: RouteError| {
            tracing::debug!(tool = %name, %error, "tools/call failed");
            error.into_tool_answer()
        })
    }

    async fn get_prompt(
        self,
        mut params: GetPromptRequestParams,
    ) -> Result<GetPromptResult, RouteError> {
        let (route, listed) = self
            .route(|catalog| catalog.resolve_prompt_listed(&params.name))
            .await
            .ok_or_else(|| RouteError::UnknownPrompt(params.name.clone()))?;
        if listed {
            super::observe::names_listed(super::observe::Target::Prompt, &params.name);
        }
        let (mount, upstream, _in_flight) = connect(self.gateway, self.state, &route.mount).await?;
        params.name = route.original.to_string();
        params.meta = forwarded_meta(self.meta);
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        match self.send(&mount, &upstream, request, None).await? {
            ServerResult::GetPromptResult(mut result) => {
                rewrite::qualify_prompt_result(&mount.config.namespace, &mut result);
                Ok(result)
            }
            other => Err(unexpected::<GetPromptResult>(&mount, &other)),
        }
    }

    async fn read_resource(
        self,
        mut params: ReadResourceRequestParams,
    ) -> Result<ReadResourceResult, RouteError> {
        super::observe::concerns_resource(&params.uri);
        let route = self
            .route(|catalog| catalog.resolve_uri(&params.uri))
            .await
            .ok_or_else(|| RouteError::UnknownResource(params.uri.clone()))?;
        let (mount, upstream, _in_flight) = connect(self.gateway, self.state, &route.mount).await?;
        params.uri = route.original.to_string();
        params.meta = forwarded_meta(self.meta);
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
        match self.send(&mount, &upstream, request, None).await? {
            ServerResult::ReadResourceResult(mut result) => {
                rewrite::qualify_read_result(&mount.config.namespace, &mut result);
                Ok(result)
            }
            other => Err(unexpected::<ReadResourceResult>(&mount, &other)),
        }
    }

    /// Routed by its reference: a prompt by name, a resource by URI.
    async fn complete(
        self,
        mut params: CompleteRequestParams,
    ) -> Result<CompleteResult, RouteError> {
        let catalog = self.state.ready_catalog(self.gateway).await;
        let route = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let route = catalog
                    .resolve_prompt(&prompt.name)
                    .ok_or_else(|| RouteError::UnknownPrompt(prompt.name.clone()))?;
                prompt.name = route.original.to_string();
                route
            }
            Reference::Resource(resource) => {
                let route = catalog
                    .resolve_uri(&resource.uri)
                    .ok_or_else(|| RouteError::UnknownResource(resource.uri.clone()))?;
                resource.uri = route.original.to_string();
                route
            }
            _ => {
                return Err(RouteError::UnknownResource(
                    "completion reference of an unknown kind".to_owned(),
                ))
            }
        };
        let (mount, upstream, _in_flight) = connect(self.gateway, self.state, &route.mount).await?;
        // 2024-11-05 had `completion/complete` but no capability saying
        // so: such a server is asked, and one without it says -32601.
        let predates_capability = upstream
            .peer()
            .peer_info()
            .is_some_and(|info| info.protocol_version.as_str() < "2025-03-26");
        let undeclared = !declares(&upstream, |c| c.completions.is_some());
        if (undeclared && !predates_capability) || upstream.lacks_completion() {
            // Offering no suggestions is the honest answer for a mount
            // that has no completions.
            return Ok(CompleteResult::default());
        }
        params.meta = forwarded_meta(self.meta);
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        match self.send(&mount, &upstream, request, None).await {
            Ok(ServerResult::CompleteResult(result)) => Ok(result),
            Ok(other) => Err(unexpected::<CompleteResult>(&mount, &other)),
            Err(RouteError::UpstreamError { error, .. })
                if undeclared && error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
            {
                // Not asked again in this upstream session.
                upstream.found_no_completion();
                Ok(CompleteResult::default())
            }
            Err(error) => Err(error),
        }
    }
}
