//! Lists answered from JSON made once per catalog.
//!
//! rmcp has a handler return a typed result (`ListToolsResult` and the
//! like), then serializes it for every request: for a catalog of 1,000
//! tools that clone and that serialization were most of the gateway's CPU
//! per listing. A catalog never changes (a change makes a new one), so the
//! first page of each list is serialized once
//! (`MergedCatalog::first_page_json`) and [`list`] answers a cursor-less
//! `tools/list`, `prompts/list`, `resources/list` or
//! `resources/templates/list` with it, the request's id put around it.
//!
//! It runs where rmcp hands a session's request to the HTTP session layer
//! (`http/resumable`), after rmcp has checked Host, Origin, headers and
//! the session, and it admits and observes the request as the handler
//! does (`max_concurrent_requests`, span, metrics, cache hits). Everything
//! else goes to rmcp's handler as before: later pages, a session asleep
//! or not yet initialized, and the tools of a catalog with task tools
//! (their `execution` is listed the custom way, `tasks.rs`).

use std::sync::Arc;

use bytes::Bytes;
use rmcp::{
    model::{ClientRequest, JsonRpcRequest, RequestId},
    ErrorData,
};

use super::{
    admission::admit_and_observe,
    observe::{sent_meta, RequestOrigin},
    SessionState,
};
use crate::{catalog::Listing, gateway::Gateway};

/// The whole JSON-RPC answer to `request`, in pieces to be sent in order,
/// if it is a cursor-less list this module answers for `state`'s session;
/// `None` sends it to rmcp.
pub(crate) async fn list(
    gateway: &Gateway,
    state: &Arc<SessionState>,
    request: &JsonRpcRequest<ClientRequest>,
) -> Option<Vec<Bytes>> {
    let (listing, params, extensions) = match &request.request {
        ClientRequest::ListToolsRequest(list) => (Listing::Tools, &list.params, &list.extensions),
        ClientRequest::ListPromptsRequest(list) => {
            (Listing::Prompts, &list.params, &list.extensions)
        }
        ClientRequest::ListResourcesRequest(list) => {
            (Listing::Resources, &list.params, &list.extensions)
        }
        ClientRequest::ListResourceTemplatesRequest(list) => {
            (Listing::ResourceTemplates, &list.params, &list.extensions)
        }
        _ => return None,
    };
    let params = params.as_ref();
    // A profile whose lists are still being read (its first list call)
    // goes rmcp's way: the wait, and what it warns, belong inside the
    // request's span and its measured time.
    // So does a list with an announced change not read yet: the wait for
    // it is the handler's (`SessionState::listing_catalog`).
    if params.is_some_and(|params| params.cursor.is_some())
        || state.is_asleep()
        || !gateway.is_prepared(state.profile(), state.endpoint())
        || gateway.lists_behind(super::announced_as(listing), state)
    {
        return None;
    }
    let catalog = state.catalog(gateway);
    if listing == Listing::Tools && !catalog.tool_execution.is_empty() {
        return None;
    }
    let origin = RequestOrigin {
        id: &request.id,
        headers: extensions
            .get::<axum::http::request::Parts>()
            .map(|parts| &parts.headers),
        meta: sent_meta(params.and_then(|params| params.meta.as_ref()), extensions)
            .map(|meta| &meta.0),
        // Answered at once from the catalog: nothing to cancel.
        cancelled: None,
        session_fingerprint: state.fingerprint(),
    };
    let limit = gateway.config().limits.max_concurrent_requests;
    let method = listing.method();
    let answer = admit_and_observe(&state.requests, limit, method, origin, async {
        crate::telemetry::metrics().cache_hits.inc();
        catalog.first_page_json(listing).ok_or_else(|| {
            ErrorData::internal_error(format!("the {method} page could not be serialized"), None)
        })
    })
    .await;
    Some(match answer {
        Ok(page) => json_rpc_answer(&request.id, "result", page),
        Err(error) => {
            let error = serde_json::to_vec(&error).ok()?;
            json_rpc_answer(&request.id, "error", error.into())
        }
    })
}

/// `{"jsonrpc":"2.0","id":<id>,"<kind>":<value>}`, `value` already JSON, as
/// head, value and tail: the page is shared, not copied.
fn json_rpc_answer(id: &RequestId, kind: &str, value: Bytes) -> Vec<Bytes> {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".to_owned());
    let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"{kind}\":");
    vec![head.into(), value, Bytes::from_static(b"}")]
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ListToolsResult, ServerJsonRpcMessage, ServerResult};
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_answer_is_the_json_rpc_response_rmcp_would_write() {
        let result = ListToolsResult::with_all_items(vec![]);
        let page = serde_json::to_vec(&result).unwrap();
        for id in [
            RequestId::Number(7),
            RequestId::String("a \"quoted\" id".into()),
        ] {
            let ours: Value = serde_json::from_slice(
                &json_rpc_answer(&id, "result", page.clone().into()).concat(),
            )
            .unwrap();
            let rmcp =
                ServerJsonRpcMessage::response(ServerResult::ListToolsResult(result.clone()), id);
            assert_eq!(ours, serde_json::to_value(&rmcp).unwrap());
        }
    }
}
