//! One `tools/call`: resolve the tool to its mount, call the upstream under
//! the tool's own name, qualify the result for the client.
//!
//! Two ways lead here: rmcp's handler (`handler.rs`) and the quick path
//! that answers a call before rmcp's handler (`quick_call.rs`). Both run
//! this same work inside the same admission and observation, so a call is
//! routed, limited, timed out, relayed and rewritten the same whichever way
//! it came.

use std::sync::Arc;

use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, RequestMetaObject,
        ServerResult,
    },
    ErrorData,
};
use tokio_util::sync::CancellationToken;

use super::{
    handler::{connect, forwarded_meta, unexpected},
    RouteError, SessionState,
};
use crate::{gateway::Gateway, rewrite, upstream::Caller};

/// A client's `tools/call`, and where what it causes downstream goes.
pub(crate) struct ToolCall {
    pub params: CallToolRequestParams,
    pub caller: Caller,
    /// Fires when the client cancels the call.
    pub cancel: CancellationToken,
}

/// The answer to `call` in `state`'s session, `meta` being the `_meta` the
/// client sent with it: the upstream's result, qualified, or the gateway's
/// failure as the client should see it (a tool error for a dead mount, a
/// JSON-RPC error for an unknown tool).
pub(crate) async fn call_tool(
    gateway: &Arc<Gateway>,
    state: &Arc<SessionState>,
    call: ToolCall,
    meta: &RequestMetaObject,
) -> Result<CallToolResult, ErrorData> {
    let ToolCall {
        mut params,
        caller,
        cancel,
    } = call;
    let name = params.name.to_string();
    let answer = async {
        gateway.prepare(state.profile()).await;
        let route = state
            .catalog(gateway)
            .resolve_tool(&name)
            .ok_or_else(|| RouteError::UnknownTool(name.clone()))?;
        let (mount, upstream) = connect(gateway, state, &route.mount).await?;
        params.name = route.original.to_string().into();
        params.meta = forwarded_meta(meta);
        let limit = mount.request_limit(Some(&route.original));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let response = upstream
            .request(request, caller, &cancel, limit)
            .await
            .map_err(|error| RouteError::upstream(&mount.config, error))?;
        match response {
            ServerResult::CallToolResult(mut result) => {
                rewrite::qualify_tool_result(&mount.config.namespace, &mut result);
                Ok(result)
            }
            _ => Err(unexpected(&mount)),
        }
    }
    .await;
    answer.or_else(|error: RouteError| {
        tracing::debug!(tool = %name, %error, "tools/call failed");
        error.into_tool_answer()
    })
}
