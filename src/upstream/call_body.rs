//! The body of a `tools/call` posted to an upstream, written without
//! rmcp's detour through a JSON tree.
//!
//! rmcp writes a request's params by turning them into a
//! `serde_json::Value` first (arguments copied key by key), taking any
//! `_meta` out of that tree, merging it with the `_meta` kept in the
//! request's extensions, and writing the tree: ~8k instructions of a
//! proxied call, for a few hundred bytes (callgrind). The params' own
//! `Serialize` writes their `_meta` first and the rest in the same order
//! rmcp's tree has them, so with the extensions' `_meta` moved into the
//! params for the time of the write, the params write themselves to the
//! same bytes. Taken only where that is all there is to merge (no `_meta`
//! of the params' own, no legacy `MetaObject` extension); anything else,
//! and every other request, is written by rmcp as before. A test holds
//! the bytes to rmcp's.

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcVersion2_0, MetaObject, RequestId,
    RequestMetaObject,
};
use serde::Serialize;

/// `message` as the JSON rmcp writes for it.
pub(super) fn request_body(message: &mut ClientJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    if let JsonRpcMessage::Request(request) = message {
        if let ClientRequest::CallToolRequest(call) = &mut request.request {
            let plain = call.params.meta.is_none() && call.extensions.get::<MetaObject>().is_none();
            if plain {
                // Lent to the params for the write, then put back: a call
                // refused for an unknown session is sent again as it was.
                call.params.meta = call.extensions.remove::<RequestMetaObject>();
                let written = write_call(&request.id, &call.method, &call.params);
                if let Some(meta) = call.params.meta.take() {
                    call.extensions.insert(meta);
                }
                return written;
            }
        }
    }
    serde_json::to_vec(message)
}

/// A request's envelope around params that write themselves whole.
fn write_call<M: Serialize, P: Serialize>(
    id: &RequestId,
    method: &M,
    params: &P,
) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Envelope<'a, M, P> {
        jsonrpc: JsonRpcVersion2_0,
        id: &'a RequestId,
        method: &'a M,
        params: &'a P,
    }
    let mut body = Vec::with_capacity(256);
    serde_json::to_writer(
        &mut body,
        &Envelope {
            jsonrpc: JsonRpcVersion2_0,
            id,
            method,
            params,
        },
    )?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, GetExtensions, GetMeta, JsonObject, NumberOrString,
        ProgressToken, ReadResourceRequest, ReadResourceRequestParams,
    };
    use serde_json::json;

    use super::*;

    fn object(value: serde_json::Value) -> JsonObject {
        value.as_object().expect("an object").clone()
    }

    fn call(name: &str, arguments: Option<serde_json::Value>) -> CallToolRequest {
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments.map(object);
        CallToolRequest::new(params)
    }

    /// Requests of every shape the gateway sends or could: metas in the
    /// extensions, the params, both, a legacy one; odd arguments.
    fn requests() -> Vec<ClientJsonRpcMessage> {
        let mut calls = Vec::new();
        calls.push(call("echo", Some(json!({"message": "hello"}))));
        calls.push(call("echo", None));
        calls.push(call(
            "t\u{e9}\"\\\n",
            Some(json!({"n": 1.5, "big": u64::MAX, "neg": -3, "nested": {"a": [1, null, true, {"b": "c"}]}, "z": "\u{1f600}\u{0}"})),
        ));
        // As `direct_call` marks it: through the `ClientRequest`.
        let mut with_token =
            ClientRequest::CallToolRequest(call("echo", Some(json!({"message": "m"}))));
        with_token
            .get_meta_mut()
            .set_progress_token(ProgressToken(NumberOrString::String("junction-7".into())));
        let ClientRequest::CallToolRequest(with_token) = with_token else {
            unreachable!()
        };
        calls.push(with_token);
        let mut with_client_meta = call("echo", Some(json!({})));
        with_client_meta.extensions_mut().insert(RequestMetaObject::from(object(
            json!({"traceparent": "00-abc-def-01", "custom/key": {"x": [1, 2]}, "progressToken": 5}),
        )));
        calls.push(with_client_meta);
        let mut params_meta = call("echo", None);
        params_meta.params.meta = Some(RequestMetaObject::from(object(json!({"a": 1, "b": 2}))));
        calls.push(params_meta.clone());
        params_meta
            .extensions_mut()
            .insert(RequestMetaObject::from(object(json!({"b": 3, "c": 4}))));
        calls.push(params_meta);
        let mut legacy = call("echo", None);
        legacy.extensions_mut().insert(MetaObject(object(
            json!({"legacy": true, "progressToken": 1}),
        )));
        calls.push(legacy.clone());
        legacy
            .extensions_mut()
            .insert(RequestMetaObject::from(object(json!({"progressToken": 2}))));
        calls.push(legacy);
        let mut with_state = call("echo", Some(json!({"k": "v"})));
        with_state.params.request_state = Some("opaque".into());
        calls.push(with_state);
        let ids = [
            RequestId::String("junction-1".into()),
            RequestId::Number(42),
            RequestId::String("q\"uote".into()),
        ];
        let mut messages: Vec<ClientJsonRpcMessage> = calls
            .into_iter()
            .enumerate()
            .map(|(n, call)| {
                ClientJsonRpcMessage::request(
                    ClientRequest::CallToolRequest(call),
                    ids[n % ids.len()].clone(),
                )
            })
            .collect();
        messages.push(ClientJsonRpcMessage::request(
            ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
                ReadResourceRequestParams::new("file:///x"),
            )),
            RequestId::Number(1),
        ));
        messages
    }

    #[test]
    fn the_body_is_what_rmcp_writes() {
        for mut message in requests() {
            let rmcp = serde_json::to_vec(&message).unwrap();
            let ours = request_body(&mut message).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&rmcp)
            );
            // And the request is left as it was, for a second sending.
            assert_eq!(serde_json::to_vec(&message).unwrap(), rmcp);
        }
    }

    #[test]
    fn the_meta_is_lent_and_given_back() {
        let mut with_token = ClientRequest::CallToolRequest(call("echo", None));
        with_token
            .get_meta_mut()
            .set_progress_token(ProgressToken(NumberOrString::Number(3)));
        let mut message = ClientJsonRpcMessage::request(with_token, RequestId::Number(1));
        request_body(&mut message).unwrap();
        let JsonRpcMessage::Request(request) = &message else {
            panic!("a request");
        };
        let ClientRequest::CallToolRequest(call) = &request.request else {
            panic!("a call");
        };
        assert!(call.params.meta.is_none());
        let meta = call.extensions.get::<RequestMetaObject>().expect("kept");
        assert_eq!(
            meta.get_progress_token(),
            Some(ProgressToken(NumberOrString::Number(3)))
        );
    }
}
