//! A POST body, as far as the gateway takes it without an upstream.
//!
//! 1. The middleware's two pure checks never panic. `json_guard::classify`
//!    must agree with serde_json: it accepts exactly the bodies that parse
//!    as one JSON object, and refuses arrays as batches (`[]` as an empty
//!    one) and other values as not objects. `json_guard::check_shape` passes exactly what rmcp reads
//!    (except a known method with unfitting params, which it answers with
//!    `-32602`), and never a body `classify` refuses (the middleware skips
//!    `classify` for a body `check_shape` passes).
//! 2. A body that rmcp reads as a `ClientJsonRpcMessage` must serialize
//!    again, that JSON must not be refused as invalid by the guard (another
//!    Junction may be the upstream) and read back, and from then on
//!    round-trip unchanged.
//! 3. A body `json_guard::plain_routed_request` reads (for the bypass of
//!    rmcp's `handle_post`) is one rmcp reads as the same request: the
//!    same kind, params, `_meta`, id and JSON.
//! 4. The parts the gateway reads from a request: the trace context in
//!    `_meta`, and the tool, prompt or URI it routes through the catalog; a
//!    route must qualify back to the name the client sent.

#![no_main]

use std::sync::OnceLock;

use junction::{
    catalog::{MergedCatalog, MountView},
    naming::{MountName, Namespace, Naming},
    telemetry::context,
};
use junction_fuzz::{check_route, view, Kind};
use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage, Reference};
use serde_json::Value;

// The module is private to `junction::http`; compile the same file here.
// The allowances are the crate's own (`src/lib.rs`) and the middleware's,
// which nothing here calls.
#[path = "../../src/http/json_guard.rs"]
#[allow(dead_code, deprecated)]
mod json_guard;

use json_guard::{BodyRejection, ShapeRejection};

/// Three mounts: two namespaced, one pass-through that also lists a name
/// that looks namespaced.
fn catalog() -> &'static (MergedCatalog, Vec<MountView>) {
    static CATALOG: OnceLock<(MergedCatalog, Vec<MountView>)> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let mount = |name: &str| MountName::new(name).unwrap();
        let namespace = |name: &str| Namespace::new(name).unwrap();
        let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let views = vec![
            view(
                mount("everything"),
                namespace("everything"),
                &names(&["echo", "add", "demo://resource/1", "test://{id}"]),
            ),
            view(
                mount("fs"),
                namespace("files"),
                &names(&["read", "file:///a"]),
            ),
            view(
                mount("local"),
                namespace(""),
                &names(&["echo", "plain://x", "files+file:///b"]),
            ),
        ];
        let (merged, _collisions) = MergedCatalog::build(1, &Naming::default(), &views);
        (merged, views)
    })
}

fuzz_target!(|body: &[u8]| {
    let shape = json_guard::check_shape(body);
    let verdict = json_guard::classify(body);
    let parsed = serde_json::from_slice::<Value>(body);
    match (&verdict, &parsed) {
        (Ok(()), Ok(Value::Object(_))) => {}
        (Err(BodyRejection::Parse(_)), Err(_)) => {}
        (Err(BodyRejection::Batch), Ok(Value::Array(batch))) if !batch.is_empty() => {}
        (Err(BodyRejection::EmptyBatch), Ok(Value::Array(batch))) if batch.is_empty() => {}
        (Err(BodyRejection::NotObject), Ok(value)) if !value.is_object() && !value.is_array() => {}
        _ => panic!("classify says {verdict:?}, serde_json says {parsed:?}"),
    }
    let typed = serde_json::from_slice::<ClientJsonRpcMessage>(body);
    match (&shape, &typed) {
        (Ok(()), Ok(_)) | (Err(ShapeRejection::Invalid(_)), Err(_)) => {}
        (Err(ShapeRejection::Params { id, .. }), Ok(JsonRpcMessage::Request(request)))
            if matches!(request.request, ClientRequest::CustomRequest(_)) =>
        {
            assert_eq!(Some(id), serde_json::to_value(&request.id).ok().as_ref());
        }
        (Err(ShapeRejection::Params { id, .. }), Err(_)) => {
            assert!(id.is_string() || id.is_i64(), "-32602 to id {id}");
        }
        _ => panic!("check_shape says {shape:?}, rmcp says {typed:?}"),
    }
    if shape.is_ok() || typed.is_ok() {
        assert!(verdict.is_ok(), "{verdict:?}, but rmcp reads the body");
    }

    if let Some(plain) = json_guard::plain_routed_request(body) {
        let Ok(JsonRpcMessage::Request(rmcp)) = &typed else {
            panic!("the plain read takes a body rmcp reads as {typed:?}");
        };
        assert_eq!(plain.id, rmcp.id);
        assert_eq!(
            format!("{:?}", plain.request),
            format!("{:?}", rmcp.request)
        );
        assert_eq!(
            format!("{:?}", plain.request.get_meta()),
            format!("{:?}", rmcp.request.get_meta())
        );
        assert_eq!(
            serde_json::to_value(&plain).ok(),
            serde_json::to_value(rmcp).ok()
        );
    }

    let Ok(message) = typed else {
        return;
    };
    let bytes = serde_json::to_vec(&message).expect("a message rmcp read serializes");
    if let Err(rejection) = json_guard::classify(&bytes) {
        panic!("the guard refuses rmcp's own serialization: {rejection}");
    }
    if let Err(ShapeRejection::Invalid(message)) = json_guard::check_shape(&bytes) {
        panic!("the guard refuses rmcp's own serialization: {message}");
    }
    let again: ClientJsonRpcMessage = serde_json::from_slice(&bytes).unwrap_or_else(|error| {
        panic!(
            "rmcp cannot read back what it wrote ({error}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    // One round trip may change a message: with a duplicate key, rmcp reads
    // a known method as a custom one (keeping every param), and reads that
    // back as the known one (dropping unknown params). After that it must
    // be stable.
    let second = serde_json::to_value(&again).expect("serializes");
    let third: ClientJsonRpcMessage =
        serde_json::from_value(second.clone()).expect("reads back again");
    let third = serde_json::to_value(&third).expect("serializes");
    assert_eq!(
        second, third,
        "the message still changes after a round trip"
    );

    let JsonRpcMessage::Request(request) = &message else {
        return;
    };
    context::adopt_parent(
        &tracing::Span::none(),
        Some(&request.request.get_meta().0),
        None,
    );
    let (merged, views) = catalog();
    match &request.request {
        ClientRequest::CallToolRequest(call) => {
            check_route(merged, views, Kind::Tool, &call.params.name);
        }
        ClientRequest::GetPromptRequest(get) => {
            check_route(merged, views, Kind::Prompt, &get.params.name);
        }
        ClientRequest::ReadResourceRequest(read) => {
            check_route(merged, views, Kind::Uri, &read.params.uri);
        }
        ClientRequest::SubscribeRequest(subscribe) => {
            check_route(merged, views, Kind::Uri, &subscribe.params.uri);
        }
        ClientRequest::UnsubscribeRequest(unsubscribe) => {
            check_route(merged, views, Kind::Uri, &unsubscribe.params.uri);
        }
        ClientRequest::CompleteRequest(complete) => match &complete.params.r#ref {
            Reference::Prompt(prompt) => {
                check_route(merged, views, Kind::Prompt, &prompt.name);
            }
            Reference::Resource(resource) => {
                check_route(merged, views, Kind::Uri, &resource.uri);
            }
            _ => {}
        },
        _ => {}
    }
});
