//! Checks a POST body is one well-formed JSON-RPC object before rmcp sees it.
//!
//! rmcp answers unparseable bodies with `415` and plain text; the spec wants
//! `400` with a JSON-RPC error: `-32700` for bytes that are not JSON (or not
//! UTF-8), `-32600` for JSON that is not a single request object (batches
//! are not part of 2025-06-18 and later). [`classify`] checks syntax only:
//! one scan that keeps nothing (strings with escapes use serde_json's
//! scratch buffer).
//!
//! A body that is one JSON object but not a message rmcp can read would also
//! get rmcp's `415`; [`check_shape`] answers it the way JSON-RPC says
//! instead: `-32600` (id `null`) for a malformed message (wrong `jsonrpc`,
//! an `id` that is not a string or an integer, a `method` that is not a
//! string), `-32602` with the request's id for a known method whose params
//! do not fit.
//!
//! The middleware tries [`check_shape`]'s typed read first (the read rmcp
//! makes next, so a body it passes is one rmcp takes) and runs
//! [`classify`] only on a body it refuses, to tell a parse error from an
//! invalid request: a valid body costs one parse here. The most frequent
//! bodies, the routed requests (`tools/call` above all), are told by a
//! plain struct read ([`plain_routed_request`]) instead of rmcp's untagged
//! one, which buffers every value and tries each kind of message in turn;
//! it says yes only to bodies rmcp's read takes as that request (a test
//! holds it to that over the fuzz corpus), and anything else goes the
//! typed way.
//!
//! [`classify`] and [`check_shape`] are the whole decision, pure functions
//! of the bytes (the fuzz target `jsonrpc_message` calls them);
//! [`check_json_body`] is the axum middleware around them and owns the size
//! limit, read live through its [`BodyLimit`] state. The fuzz crate
//! compiles this file by path, so it uses nothing from the rest of the
//! crate. The middleware also bounds the body's size and the time it takes
//! to arrive ([`BodyRules`]).

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::{header, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value};

/// The largest POST body accepted now, in bytes (`[limits] max_body_size`,
/// which a reload may change).
pub type BodyLimit = Arc<dyn Fn() -> usize + Send + Sync>;

/// What a POST body must keep to: its size limit, and the time it has to
/// arrive once its request's head has (`[server] request_read_timeout`):
/// a client sending it a byte at a time would otherwise hold the request,
/// its admission and its buffer for ever.
#[derive(Clone)]
pub struct BodyRules {
    pub limit: BodyLimit,
    pub read_timeout: Duration,
    /// What the rest of the gateway notes from a body that passed, as
    /// request extensions (this file uses nothing from the crate).
    pub annotate: fn(&[u8], &axum::http::HeaderMap, &mut axum::http::Extensions),
    /// Makes one answer of a batch's answers (`http::batch`); `None`
    /// refuses every batch.
    pub batches: Option<BatchAnswer>,
}

/// Turns the answers to a batch's messages, each checked and run as if
/// posted alone and given with the message's `id` (`null` if it has
/// none), into the answer to the batch.
pub type BatchAnswer = Arc<
    dyn Fn(
            Vec<(Value, futures::future::BoxFuture<'static, Response>)>,
        ) -> futures::future::BoxFuture<'static, Response>
        + Send
        + Sync,
>;

/// The most messages a batch may hold. Each is run at once, as a POST of
/// its own on the session would be, and its answer is held until the
/// client reads it: without a bound one body of `max_body_size` could
/// start some 90,000 `tools/list`s and hold as many copies of the list.
/// The session's `max_concurrent_requests` applies to each message too.
pub const MAX_BATCH_MESSAGES: usize = 64;

/// The largest body a POST outside a session may have: an `initialize`
/// (every other request needs a session). Real ones are under a few KiB;
/// what one carries (`capabilities`, `clientInfo`) is kept for the
/// session's life as parsed JSON, many times its size in memory, so a
/// `max_body_size` initialize would hold hundreds of MiB per session.
pub const SESSIONLESS_BODY_LIMIT: usize = 64 * 1024;

/// After refusing an oversized body, how much more of it is read and
/// dropped, and for how long, so that the client gets to read the 413
/// instead of a connection reset (a server that closes while the client
/// still sends makes most clients report a broken pipe, not the answer).
const DRAIN_BYTES: usize = 64 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// JSON-RPC `Parse error`.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC `Invalid Request`.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC `Invalid params`.
const INVALID_PARAMS: i64 = -32602;

/// Why one JSON object is not a message the gateway can take.
#[derive(Debug, PartialEq)]
pub enum ShapeRejection {
    /// Not a well-formed JSON-RPC message: `-32600`, id `null`.
    Invalid(String),
    /// A request for a method rmcp knows, whose params do not fit it:
    /// `-32602`, answered to the request's id.
    Params { id: Value, message: String },
}

/// Whether one JSON object (as passed by [`classify`]) is a message rmcp
/// can read; if not, why, in JSON-RPC's terms.
#[allow(dead_code)] // the tests' and the fuzz target's; the middleware reads `shape`
pub fn check_shape(body: &[u8]) -> Result<(), ShapeRejection> {
    shape(body).map(|_| ())
}

/// A body [`check_shape`] found to be a well-formed routed request by its
/// plain read ([`plain_routed_request`]), as read (a request extension):
/// for `call_bypass.rs` to take past rmcp's `handle_post`.
#[derive(Clone)]
pub struct PlainRequest(pub rmcp::model::JsonRpcRequest<rmcp::model::ClientRequest>);

/// What [`check_shape`] decides, and whether by the plain read.
fn shape(body: &[u8]) -> Result<Plain, ShapeRejection> {
    if let Some(request) = plain_routed_request(body) {
        return Ok(Plain(Some(request)));
    }
    check_typed(body).map(|()| Plain(None))
}

/// The request, if a body passed as a plain routed request.
struct Plain(Option<rmcp::model::JsonRpcRequest<rmcp::model::ClientRequest>>);

/// [`check_shape`] for a body that is no plain routed request.
fn check_typed(body: &[u8]) -> Result<(), ShapeRejection> {
    use rmcp::model::{ClientRequest, JsonRpcMessage, RequestOptionalParam};
    let typed = match serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body) {
        // rmcp reads a known method whose params do not fit as a custom
        // request (and would then answer "method not found").
        Ok(JsonRpcMessage::Request(request)) => match &request.request {
            ClientRequest::CustomRequest(custom) => {
                match params_problem(&custom.method, custom.params.clone()) {
                    Some(problem) => {
                        return Err(ShapeRejection::Params {
                            id: serde_json::to_value(&request.id).unwrap_or(Value::Null),
                            message: format!("invalid params for {}: {problem}", custom.method),
                        })
                    }
                    None => return Ok(()),
                }
            }
            // rmcp reads a list's params flattened into an `Option`, which
            // takes params that do not fit (a `cursor` that is not text)
            // for none: the first page, which the client did not ask for.
            ClientRequest::ListToolsRequest(RequestOptionalParam { params: None, .. })
            | ClientRequest::ListPromptsRequest(RequestOptionalParam { params: None, .. })
            | ClientRequest::ListResourcesRequest(RequestOptionalParam { params: None, .. })
            | ClientRequest::ListResourceTemplatesRequest(RequestOptionalParam {
                params: None,
                ..
            }) => {
                #[derive(serde::Deserialize)]
                struct Raw {
                    method: String,
                    params: Option<Value>,
                }
                let Ok(Raw { method, params }) = serde_json::from_slice::<Raw>(body) else {
                    return Ok(());
                };
                match params_problem(&method, params) {
                    Some(problem) => {
                        return Err(ShapeRejection::Params {
                            id: serde_json::to_value(&request.id).unwrap_or(Value::Null),
                            message: format!("invalid params for {method}: {problem}"),
                        })
                    }
                    None => return Ok(()),
                }
            }
            _ => return Ok(()),
        },
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    let invalid = |message: String| Err(ShapeRejection::Invalid(message));
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(body) else {
        return invalid("invalid request: not a JSON-RPC message".to_owned());
    };
    if message.get("jsonrpc") != Some(&Value::from("2.0")) {
        return invalid("invalid request: `jsonrpc` must be \"2.0\"".to_owned());
    }
    // A member given twice is read by one reader one way and by another
    // the other: not a request anyone can answer as its client meant.
    if let Err(error) = serde_json::from_slice::<Members>(body) {
        if error.to_string().starts_with("duplicate field") {
            return invalid(format!("invalid request: {error}"));
        }
    }
    let id = message.get("id");
    match id {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(number)) if number.is_i64() => {}
        Some(other) => {
            return invalid(format!(
                "invalid request: `id` must be a string or an integer, not {}",
                json_kind(other)
            ))
        }
    }
    match message.get("method") {
        Some(Value::String(method)) => {
            match message.get("params") {
                None | Some(Value::Object(_)) => {}
                Some(other) => {
                    return invalid(format!(
                        "invalid request: `params` must be an object, not {}",
                        json_kind(other)
                    ))
                }
            }
            // rmcp reads any method it does not know as a custom one, so a
            // well-formed request it cannot read is a known method whose
            // params do not fit.
            match id {
                Some(id) => Err(ShapeRejection::Params {
                    id: id.clone(),
                    message: format!("invalid params for {method}: {typed}"),
                }),
                None => invalid(format!(
                    "invalid request: invalid params for {method}: {typed}"
                )),
            }
        }
        Some(other) => invalid(format!(
            "invalid request: `method` must be a string, not {}",
            json_kind(other)
        )),
        None if message.contains_key("result") || message.contains_key("error") => invalid(
            format!("invalid request: not a valid JSON-RPC response: {typed}"),
        ),
        None => invalid(
            "invalid request: a JSON-RPC message needs a `method`, or a `result` or `error`"
                .to_owned(),
        ),
    }
}

/// A JSON-RPC message's members, read only to find one given twice.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Members {
    jsonrpc: serde::de::IgnoredAny,
    id: Option<serde::de::IgnoredAny>,
    method: Option<serde::de::IgnoredAny>,
    params: Option<serde::de::IgnoredAny>,
    result: Option<serde::de::IgnoredAny>,
    error: Option<serde::de::IgnoredAny>,
}

/// Whether `body` is a well-formed routed request, by a plain struct read
/// (see [`plain_routed_request`]).
#[cfg(test)]
fn is_plain_routed_request(body: &[u8]) -> bool {
    plain_routed_request(body).is_some()
}

/// `body` as a routed request (`tools/call`, `prompts/get`,
/// `resources/read`, `completion/complete`: the requests the session layer
/// answers by routing them to a mount), if it is a well-formed one, by a
/// plain struct read: the params are read by rmcp's own types
/// (`CallToolRequestParams` and so on, `_meta` then taken out of them into
/// the request's extensions as rmcp takes it), the envelope and the
/// request around them by a struct instead of rmcp's untagged message enum
/// and its `flatten`s. Unknown fields are ignored, as rmcp does; a duplicate field, or
/// anything else odd, is a no (and the body goes the typed way).
pub fn plain_routed_request(
    body: &[u8],
) -> Option<rmcp::model::JsonRpcRequest<rmcp::model::ClientRequest>> {
    use rmcp::model::{
        CallToolRequestMethod, CallToolRequestParams, ClientRequest, CompleteRequestMethod,
        CompleteRequestParams, GetPromptRequestMethod, GetPromptRequestParams, JsonRpcRequest,
        ReadResourceRequestMethod, ReadResourceRequestParams,
    };
    // Built once: a `Finder` is dearer to build than to run on a call's body.
    static CALL_HINT: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"tools/call\""));
    fn as_client<R>(
        read: Option<JsonRpcRequest<R>>,
        kind: fn(R) -> ClientRequest,
    ) -> Option<JsonRpcRequest<ClientRequest>> {
        read.map(|read| JsonRpcRequest::new(read.id, kind(read.request)))
    }
    // Calls, the most frequent, are read at once where the name is in the
    // body at all (a hint only: the read decides), without a first pass
    // to find the method.
    if CALL_HINT.find(body).is_some() {
        if let Some(call) = plain_request::<CallToolRequestMethod, CallToolRequestParams>(body) {
            return as_client(Some(call), ClientRequest::CallToolRequest);
        }
    }
    match method_of(body)?.as_ref() {
        // Written with an escape (`tools\/call`), which the hint misses.
        "tools/call" => as_client(
            plain_request::<CallToolRequestMethod, CallToolRequestParams>(body),
            ClientRequest::CallToolRequest,
        ),
        "prompts/get" => as_client(
            plain_request::<GetPromptRequestMethod, GetPromptRequestParams>(body),
            ClientRequest::GetPromptRequest,
        ),
        "resources/read" => as_client(
            plain_request::<ReadResourceRequestMethod, ReadResourceRequestParams>(body),
            ClientRequest::ReadResourceRequest,
        ),
        "completion/complete" => as_client(
            plain_request::<CompleteRequestMethod, CompleteRequestParams>(body),
            ClientRequest::CompleteRequest,
        ),
        _ => None,
    }
}

/// The `method` of a JSON object, read without keeping anything else.
fn method_of(body: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
    }
    serde_json::from_slice::<Method>(body)
        .ok()
        .map(|read| read.method)
}

/// `body` as a request of method `M` with params `P` (one of rmcp's
/// `Request<M, P>`, whose method type takes its one method only), read as
/// rmcp reads it: `params._meta` goes to the request's extensions, the
/// rest to `P`. Read field by field in one pass: rmcp's own read buffers
/// the whole message, then the params again (two `flatten`s), which cost
/// more than the rest of the read together (callgrind).
fn plain_request<M, P>(
    body: &[u8],
) -> Option<rmcp::model::JsonRpcRequest<rmcp::model::Request<M, P>>>
where
    M: serde::de::DeserializeOwned + Default,
    P: serde::de::DeserializeOwned + rmcp::model::RequestParamsMeta,
{
    #[derive(serde::Deserialize)]
    #[serde(bound = "M: serde::de::DeserializeOwned, P: serde::de::DeserializeOwned")]
    struct Envelope<M, P> {
        #[allow(dead_code)] // read to be checked
        jsonrpc: rmcp::model::JsonRpcVersion2_0,
        id: rmcp::model::RequestId,
        #[allow(dead_code)] // read to be checked: `M` takes one method only
        method: M,
        params: P,
        // rmcp takes a message by the keys it has: with either of these,
        // even `null`, it is no request.
        #[serde(default, deserialize_with = "present")]
        result: bool,
        #[serde(default, deserialize_with = "present")]
        error: bool,
    }
    fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| true)
    }
    let Envelope {
        id,
        mut params,
        result,
        error,
        ..
    } = serde_json::from_slice::<Envelope<M, P>>(body).ok()?;
    if result || error {
        return None;
    }
    // Where rmcp keeps it: a `_meta` in the params is read into the
    // request's extensions, never left in the params.
    let meta = params.meta_mut().take();
    let mut request = rmcp::model::Request::<M, P>::new(params);
    if let Some(meta) = meta {
        request.extensions.insert(meta);
    }
    Some(rmcp::model::JsonRpcRequest::new(id, request))
}

/// For a method of the handshake-era protocol that rmcp reads into typed
/// params, why `params` does not fit them; `None` for any other method
/// (a custom method rmcp passes on as it is).
fn params_problem(method: &str, params: Option<Value>) -> Option<String> {
    use rmcp::model::*;
    fn fit<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Option<String> {
        let params = params.unwrap_or_else(|| Value::Object(Default::default()));
        serde_json::from_value::<T>(params)
            .err()
            .map(|error| error.to_string())
    }
    match method {
        "initialize" => fit::<InitializeRequestParams>(params),
        "tools/call" => fit::<CallToolRequestParams>(params),
        "prompts/get" => fit::<GetPromptRequestParams>(params),
        "resources/read" => fit::<ReadResourceRequestParams>(params),
        "resources/subscribe" => fit::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => fit::<UnsubscribeRequestParams>(params),
        "completion/complete" => fit::<CompleteRequestParams>(params),
        "logging/setLevel" => fit::<SetLevelRequestParams>(params),
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            fit::<PaginatedRequestParams>(params)
        }
        _ => None,
    }
    // A known method whose params fit but which rmcp still read as custom
    // is left to rmcp.
}

/// 2^63: the first integer past `i64`, exactly a float.
const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;

/// What kind of JSON `value` is, as an error message names it.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(number) if number.is_i64() => "an integer",
        Value::Number(number) => match number.as_f64() {
            // Past `i64` (a `u64`), or beyond u64, which serde_json reads
            // as a float.
            _ if !number.is_f64() => "an integer beyond the signed 64-bit range (-2^63 to 2^63-1)",
            Some(float) if float.fract() == 0.0 && !(-TWO_TO_63..TWO_TO_63).contains(&float) => {
                "an integer beyond the signed 64-bit range (-2^63 to 2^63-1)"
            }
            Some(float) if float.fract() == 0.0 => {
                "a number written with a fraction or an exponent (`1.0`, `1e3`)"
            }
            _ => "a fraction",
        },
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a body is refused before rmcp sees it.
#[derive(Debug, thiserror::Error)]
pub enum BodyRejection {
    /// Not JSON (or not UTF-8).
    #[error("parse error: {0}")]
    Parse(#[source] serde_json::Error),
    /// `[]`: JSON-RPC answers an empty batch as an invalid request.
    #[error("invalid request: an empty JSON-RPC batch")]
    EmptyBatch,
    /// A JSON array: a batch, which 2025-06-18 and later dropped (and
    /// which 2025-03-26 sessions may send: see `batch_to_split`).
    #[error("invalid request: JSON-RPC batches are only taken from 2025-03-26 sessions; send one message per POST")]
    Batch,
    /// JSON, but not an object (a string, number, `null`, …).
    #[error("invalid request: the body must be one JSON-RPC message object")]
    NotObject,
}

impl BodyRejection {
    /// The JSON-RPC error code the client gets.
    pub fn code(&self) -> i64 {
        match self {
            BodyRejection::Parse(_) => PARSE_ERROR,
            BodyRejection::Batch | BodyRejection::EmptyBatch | BodyRejection::NotObject => {
                INVALID_REQUEST
            }
        }
    }
}

/// Whether `body` may go on to rmcp: one JSON value, and that value an
/// object. Checks syntax only, not the JSON-RPC shape (rmcp does that).
pub fn classify(body: &[u8]) -> Result<(), BodyRejection> {
    serde_json::from_slice::<Scanned>(body).map_err(BodyRejection::Parse)?;
    match body.iter().find(|byte| !byte.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        Some(b'[') if body.trim_ascii()[1..].trim_ascii_start().starts_with(b"]") => {
            Err(BodyRejection::EmptyBatch)
        }
        Some(b'[') => Err(BodyRejection::Batch),
        _ => Err(BodyRejection::NotObject),
    }
}

/// Any JSON value, read and dropped. Unlike `IgnoredAny` it reads strings
/// and numbers as serde_json does for a kept value, so what it accepts is
/// exactly what rmcp can parse: `IgnoredAny` lets invalid UTF-8 inside a
/// string, a lone surrogate escape (`"\ud800"`) and a number out of `f64`
/// range (`1e400`) through, and rmcp then answers `415` in plain text.
struct Scanned;

impl<'de> Deserialize<'de> for Scanned {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScanVisitor)
    }
}

struct ScanVisitor;

impl<'de> Visitor<'de> for ScanVisitor {
    type Value = Scanned;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_str<E>(self, _: &str) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_unit<E>(self) -> Result<Scanned, E> {
        Ok(Scanned)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scanned, A::Error> {
        while seq.next_element::<Scanned>()?.is_some() {}
        Ok(Scanned)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scanned, A::Error> {
        while map.next_key::<Scanned>()?.is_some() {
            map.next_value::<Scanned>()?;
        }
        Ok(Scanned)
    }
}

pub async fn check_json_body(
    State(rules): State<BodyRules>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let configured = (rules.limit)();
    let (limit, named) = match parts.headers.contains_key("mcp-session-id") {
        false if SESSIONLESS_BODY_LIMIT < configured => (
            SESSIONLESS_BODY_LIMIT,
            "the most a request outside a session, such as initialize, may have",
        ),
        _ => (configured, "max_body_size"),
    };
    let bytes = match read_body(body, limit, rules.read_timeout).await {
        BodyRead::Whole(bytes) => bytes,
        // Either leaves the body unread (all of it past what is drained),
        // so the connection closes after the answer.
        BodyRead::TooLarge => {
            return closing_after(rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                INVALID_REQUEST,
                format!("request body exceeds {limit} bytes ({named})"),
            ))
        }
        BodyRead::TooSlow => {
            return closing_after(rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "request body not received within {:?} (request_read_timeout)",
                    rules.read_timeout
                ),
            ));
        }
    };
    if let Some(answer) = rules.batches.clone() {
        match batch_to_split(&parts.headers, &bytes) {
            Split::NotTaken => {}
            Split::TooLong(count) => {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    INVALID_REQUEST,
                    format!("invalid request: a batch of {count} messages; at most {MAX_BATCH_MESSAGES} are taken in one"),
                )
            }
            Split::HoldsInitialize => {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    INVALID_REQUEST,
                    "invalid request: initialize may not be sent in a batch".to_owned(),
                )
            }
            Split::Messages(messages) => {
                let answers = messages
                    .into_iter()
                    .map(|(id, message)| {
                        let run =
                            check_message(rules.clone(), parts.clone(), message, next.clone());
                        (id, Box::pin(run) as futures::future::BoxFuture<'static, Response>)
                    })
                    .collect();
                return answer(answers).await;
            }
        }
    }
    check_message(rules, parts, bytes, next).await
}

/// What [`batch_to_split`] made of a body.
enum Split {
    /// Not a batch, or not one this session may send: checked as one
    /// message (and a batch refused).
    NotTaken,
    /// A batch of more than [`MAX_BATCH_MESSAGES`].
    TooLong(usize),
    /// A batch with an `initialize` in it, which the spec forbids: each
    /// would open a session whose id the merged answer could not carry.
    HoldsInitialize,
    /// Each message with its `id` (`null` if none), as the client wrote it.
    Messages(Vec<(Value, Bytes)>),
}

/// The messages of a batch the session may send: one negotiated
/// 2025-03-26, the only version whose clients may batch (and whose servers
/// must take batches). A client that sends no `MCP-Protocol-Version` is
/// taken to speak it, as the later versions say. Only for a session: an
/// `initialize` may not be batched.
fn batch_to_split(headers: &axum::http::HeaderMap, body: &[u8]) -> Split {
    if body.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'[') {
        return Split::NotTaken;
    }
    // Read as rmcp reads it: an id that is not text names no session,
    // and each message would be taken for a new session's.
    if headers
        .get("mcp-session-id")
        .is_none_or(|id| id.to_str().is_err())
    {
        return Split::NotTaken;
    }
    match headers.get("mcp-protocol-version") {
        None => {}
        Some(version) if version.as_bytes() == b"2025-03-26" => {}
        Some(_) => return Split::NotTaken,
    }
    // Each message's bytes as written, so that what rmcp reads of it (an
    // id past u64, a key given twice) is what it would read posted alone.
    let Ok(BoundedBatch { messages, count }) = serde_json::from_slice::<BoundedBatch>(body) else {
        return Split::NotTaken;
    };
    if count == 0 {
        return Split::NotTaken;
    }
    if count > MAX_BATCH_MESSAGES {
        return Split::TooLong(count);
    }
    let mut with_ids = Vec::with_capacity(messages.len());
    for message in messages {
        let head = serde_json::from_str::<BatchedHead>(message.get()).unwrap_or_default();
        if head.method.as_deref() == Some("initialize") {
            return Split::HoldsInitialize;
        }
        // Only a request is answered: a response the client sends (to a
        // server request) has an id of the server's numbering.
        let id = head.method.and(head.id).unwrap_or(Value::Null);
        with_ids.push((id, Bytes::copy_from_slice(message.get().as_bytes())));
    }
    Split::Messages(with_ids)
}

/// What a batched message's answer needs of it, read without building the
/// rest (its params are skipped, not kept).
#[derive(Default, serde::Deserialize)]
struct BatchedHead {
    method: Option<String>,
    id: Option<Value>,
}

/// A batch's first [`MAX_BATCH_MESSAGES`] messages as written, and how
/// many it has: the rest are counted without being kept (a 4 MiB body of
/// `0,` would otherwise be two million entries before the bound is seen).
struct BoundedBatch<'a> {
    messages: Vec<&'a serde_json::value::RawValue>,
    count: usize,
}

impl<'de> Deserialize<'de> for BoundedBatch<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BatchVisitor;
        impl<'de> Visitor<'de> for BatchVisitor {
            type Value = BoundedBatch<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a JSON-RPC batch")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut messages = Vec::new();
                while messages.len() < MAX_BATCH_MESSAGES {
                    match seq.next_element()? {
                        Some(message) => messages.push(message),
                        None => {
                            let count = messages.len();
                            return Ok(BoundedBatch { messages, count });
                        }
                    }
                }
                let mut count = messages.len();
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    count += 1;
                }
                Ok(BoundedBatch { messages, count })
            }
        }
        deserializer.deserialize_seq(BatchVisitor)
    }
}

/// Checks one message and passes it on, or answers why not.
async fn check_message(
    rules: BodyRules,
    parts: axum::http::request::Parts,
    bytes: Bytes,
    next: Next,
) -> Response {
    // One typed read decides for every well-formed message (it is the read
    // rmcp makes next); only a body it refuses is looked at more closely.
    let plain_request = match shape(&bytes) {
        Ok(Plain(plain)) => plain,
        // A valid request with a JSON-RPC error answer: 200, so clients
        // hand the error to the caller like any other. Not without the
        // session it needs: that is rmcp's 400 first, whatever the params
        // (only an `initialize` goes without one).
        Err(ShapeRejection::Params { id, message }) => {
            if !parts.headers.contains_key("mcp-session-id") && !is_initialize(&bytes) {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Extension(BodyRefused),
                    "Bad Request: Session ID is required",
                )
                    .into_response();
            }
            return rpc_error(StatusCode::OK, id, INVALID_PARAMS, message);
        }
        Err(ShapeRejection::Invalid(message)) => {
            let (code, message) = match classify(&bytes) {
                Err(rejection) => (rejection.code(), rejection.to_string()),
                Ok(()) => (INVALID_REQUEST, message),
            };
            return rpc_error(StatusCode::BAD_REQUEST, Value::Null, code, message);
        }
    };
    let mut parts = parts;
    (rules.annotate)(&bytes, &parts.headers, &mut parts.extensions);
    if let Some(request) = plain_request {
        parts.extensions.insert(PlainRequest(request));
    }
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.headers_mut().remove(header::CONTENT_LENGTH);
    next.run(request).await
}

/// What became of reading a POST body.
enum BodyRead {
    Whole(Bytes),
    /// Over the limit; the rest was read and dropped (bounded by
    /// [`DRAIN_BYTES`] and [`DRAIN_TIME`]).
    TooLarge,
    /// Not all there by the deadline.
    TooSlow,
}

/// The whole body if it is at most `limit` bytes and arrives within
/// `read_timeout`.
async fn read_body(body: Body, limit: usize, read_timeout: Duration) -> BodyRead {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    // Polled only while a chunk is not there yet: a body that came with
    // its head (nearly every one) never arms a timer.
    let deadline = tokio::time::sleep(read_timeout);
    let mut deadline = std::pin::pin!(deadline);
    loop {
        let chunk = tokio::select! {
            biased;
            chunk = stream.next() => chunk,
            () = &mut deadline => return BodyRead::TooSlow,
        };
        let Some(chunk) = chunk else {
            break;
        };
        let Ok(chunk) = chunk else {
            // The client went away mid-body: nothing to answer.
            return BodyRead::Whole(Bytes::new());
        };
        if bytes.len() + chunk.len() > limit {
            drain(&mut stream).await;
            return BodyRead::TooLarge;
        }
        bytes.extend_from_slice(&chunk);
    }
    BodyRead::Whole(Bytes::from(bytes))
}

/// Reads what is left of a body and drops it (at most [`DRAIN_BYTES`], for
/// at most [`DRAIN_TIME`]), so that the client, still sending, reads the
/// answer given early rather than a reset connection.
async fn drain(stream: &mut axum::body::BodyDataStream) {
    let drain = async {
        let mut drained = 0;
        while let Some(Ok(chunk)) = stream.next().await {
            drained += chunk.len();
            if drained > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
}

/// [`drain`] for a body not yet read at all: one answered before it is.
pub async fn discard(body: Body) {
    drain(&mut body.into_data_stream()).await;
}

/// Marks an answer this middleware wrote itself: the body never reached
/// rmcp, nor its session check.
#[derive(Clone, Copy, Debug)]
pub struct BodyRefused;

/// Whether `body` is an `initialize` request. Read only on rare paths: a
/// request refused for its params, a POST naming no session
/// (`admission.rs`).
pub fn is_initialize(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|message| message.get("method") == Some(&Value::from("initialize")))
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: String) -> Response {
    (
        status,
        axum::Extension(BodyRefused),
        axum::Json(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": code, "message": message },
        })),
    )
        .into_response()
}

/// `response`, saying `Connection: close`: for an answer given before the
/// request's body was read whole (a refusal on its head, an oversized or
/// slow body, a draining gateway). hyper cannot take another request from
/// behind an unread body and closes the connection after the answer, but
/// says nothing of it; a client that reused the connection would find it
/// closed under its next request ("server disconnected without sending a
/// response").
pub(super) fn closing_after(mut response: axum::response::Response) -> axum::response::Response {
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `expected`: `None` for accepted, else the JSON-RPC code and the start
    /// of the message the client gets.
    fn check(body: &[u8], expected: Option<(i64, &str)>) {
        let actual = classify(body)
            .err()
            .map(|rejection| (rejection.code(), rejection.to_string()));
        match (actual, expected) {
            (None, None) => {}
            (Some((code, message)), Some((expected_code, prefix))) => {
                assert_eq!(code, expected_code, "{message}");
                assert!(message.starts_with(prefix), "{message:?}");
            }
            (actual, expected) => panic!(
                "{:?}: got {actual:?}, expected {expected:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    #[test]
    fn one_object_passes() {
        check(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, None);
        check(b" \t\r\n{} \n", None);
        check(
            br#"{"a":"\u00e9\ud83d\ude00","b":[1,-2,3.5e10,null,true]}"#,
            None,
        );
        check("{\"a\":\"é😀\"}".as_bytes(), None);
        check(br#"{"big":18446744073709551616}"#, None);
    }

    #[test]
    fn bytes_that_are_not_json_are_parse_errors() {
        for body in [
            &b"{not json"[..],
            b"",
            b"   ",
            b"{\"a\":1} x",
            b"{}{}",
            b"\xef\xbb\xbf{}",
            b"{\"a\":1,\xff}",
            // What `IgnoredAny` let through and rmcp then refused with 415.
            b"{\"a\":\"\xff\"}",
            b"{\"a\":\"\xc3\x28\"}",
            br#"{"a":"\ud800"}"#,
            br#"{"\udc00":1}"#,
            br#"{"a":1e400}"#,
            br#"{"a":-1e400}"#,
        ] {
            check(body, Some((-32700, "parse error: ")));
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        check(
            deep.as_bytes(),
            Some((-32700, "parse error: recursion limit")),
        );
    }

    #[test]
    fn json_that_is_not_one_object_is_an_invalid_request() {
        check(
            b"[]",
            Some((-32600, "invalid request: an empty JSON-RPC batch")),
        );
        check(
            b" [ \n ] ",
            Some((-32600, "invalid request: an empty JSON-RPC batch")),
        );
        check(
            b" [{\"jsonrpc\":\"2.0\"}]",
            Some((-32600, "invalid request: JSON-RPC batches")),
        );
        for body in [&b"null"[..], b"1", b"\"x\"", b"true"] {
            check(
                body,
                Some((-32600, "invalid request: the body must be one")),
            );
        }
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    fn invalid(body: &str, prefix: &str) {
        match check_shape(body.as_bytes()) {
            Err(ShapeRejection::Invalid(message)) => {
                assert!(message.starts_with(prefix), "{body}: {message:?}")
            }
            other => panic!("{body}: got {other:?}"),
        }
    }

    #[test]
    fn messages_rmcp_reads_pass() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":-9,"method":"vendor/anything","params":{"k":[1]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert_eq!(check_shape(body.as_bytes()), Ok(()), "{body}");
        }
    }

    #[test]
    fn malformed_messages_are_invalid_requests() {
        invalid("{}", "invalid request: `jsonrpc` must be");
        invalid(
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            "invalid request: `jsonrpc`",
        );
        for id in ["1.5", "null", "true", "[1]", "{}", "18446744073709551615"] {
            invalid(
                &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
                "invalid request: `id` must be a string or an integer",
            );
        }
        invalid(
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            "invalid request: `method` must be",
        );
        invalid(
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#,
            "invalid request: `params` must be",
        );
        invalid(
            r#"{"jsonrpc":"2.0","id":1}"#,
            "invalid request: a JSON-RPC message needs",
        );
    }

    #[test]
    fn known_methods_with_unfit_params_are_invalid_params_for_that_id() {
        for params in [
            r#"{"name":"x","arguments":5}"#,
            r#"{"name":"x","arguments":["a"]}"#,
            r#"{"name":5}"#,
            r#"{}"#,
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{params}}}"#);
            match check_shape(body.as_bytes()) {
                Err(ShapeRejection::Params { id, message }) => {
                    assert_eq!(id, Value::from("r1"));
                    assert!(
                        message.starts_with("invalid params for tools/call"),
                        "{message}"
                    );
                }
                other => panic!("{body}: got {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod plain_routed_request_tests {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcRequest};

    use super::*;

    /// What rmcp's own read makes of `body`, if a routed request.
    fn rmcp_reads_a_routed_request(body: &[u8]) -> Option<JsonRpcRequest<ClientRequest>> {
        match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
            Ok(JsonRpcMessage::Request(request))
                if matches!(
                    request.request,
                    ClientRequest::CallToolRequest(_)
                        | ClientRequest::GetPromptRequest(_)
                        | ClientRequest::ReadResourceRequest(_)
                        | ClientRequest::CompleteRequest(_)
                ) =>
            {
                Some(request)
            }
            _ => None,
        }
    }

    /// The request read by [`plain_routed_request`] is the one rmcp reads:
    /// the same kind, JSON, id, params and `_meta` (which rmcp keeps in the
    /// request's extensions, not in its params).
    fn assert_read_as_rmcp_reads_it(ours: JsonRpcRequest<ClientRequest>, body: &[u8]) {
        use rmcp::model::GetMeta;
        let text = String::from_utf8_lossy(body);
        let rmcp = rmcp_reads_a_routed_request(body)
            .unwrap_or_else(|| panic!("rmcp does not read it as a routed request: {text}"));
        assert_eq!(ours.id, rmcp.id, "{text}");
        // The kind and its params (extensions print as nothing more).
        assert_eq!(
            format!("{:?}", ours.request),
            format!("{:?}", rmcp.request),
            "{text}"
        );
        assert_eq!(
            format!("{:?}", ours.request.get_meta()),
            format!("{:?}", rmcp.request.get_meta()),
            "{text}"
        );
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&rmcp).unwrap(),
            "{text}"
        );
    }

    /// Bodies around the shortcut's edges, then the fuzz corpus.
    fn bodies() -> Vec<Vec<u8>> {
        let mut bodies: Vec<Vec<u8>> = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"x":1}}}"#,
            r#"{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{"name":"t","_meta":{"progressToken":7}}}"#,
            r#"{"id":1,"params":{"name":"t"},"method":"tools/call","jsonrpc":"2.0","extra":true}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":{"ttl":1000}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"tools/call"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"a__greet","arguments":{"who":"tools/call"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","_meta":{"progressToken":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","arguments":{"n":1}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","method":"prompts/get","params":{"name":"p"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"a+file:///x","_meta":{"k":[1]}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":5}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"u"},"result":null}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a__greet"},"argument":{"name":"who","value":"w"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"a+file:///{x}"},"argument":{"name":"x","value":""},"context":{"arguments":{"y":"1"}}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":{"type":"ref/nothing"},"argument":{"name":"x","value":""}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts\/get","params":{"name":"p"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p"},"params":{"name":"q"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","name":"q"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","other":{"x":[]}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"a":1},"name":"t","_meta":{"b":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":1,"x":{"y":[1.5,null]}},"arguments":{"n":-1e300},"name":"t"}}"#,
            r#"{"params":{"name":"t","_meta":{}},"jsonrpc":"2.0","method":"tools/call","id":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1,"a":2}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"u","_meta":{"progressToken":"p"},"extra":1}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"_meta":null,"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"v"}}}"#,
            r#"{"jsonrpc":"2.0","id":1.0,"method":"resources/read","params":{"uri":"u"}}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"resources/read","params":{"uri":"u"}}"#,
            r#"{"jsonrpc":"2.0","id":-5,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"v"},"_meta":{"progressToken":"t"}}}"#,
            r#"["prompts/get"]"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"prompts/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#,
        ]
        .iter()
        .map(|body| body.as_bytes().to_vec())
        .collect();
        let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/jsonrpc_message");
        for entry in std::fs::read_dir(corpus).expect("the fuzz corpus") {
            bodies.push(std::fs::read(entry.unwrap().path()).unwrap());
        }
        bodies
    }

    #[test]
    fn the_shortcut_passes_only_what_rmcp_reads_as_that_request() {
        let mut taken = std::collections::BTreeMap::<String, usize>::new();
        for body in bodies() {
            if let Some(request) = plain_routed_request(&body) {
                *taken
                    .entry(request.request.method().to_owned())
                    .or_default() += 1;
                assert_read_as_rmcp_reads_it(request, &body);
            }
        }
        for (method, at_least) in [
            ("tools/call", 6),
            ("prompts/get", 3),
            ("resources/read", 1),
            ("completion/complete", 2),
        ] {
            let read = taken.get(method).copied().unwrap_or(0);
            assert!(
                read >= at_least,
                "the shortcut took {read} {method}: {taken:?}"
            );
        }
    }

    /// Every routed request rmcp reads, the shortcut reads too (else the
    /// bypass would miss it for nothing): over the same bodies.
    #[test]
    fn the_shortcut_misses_no_routed_request_rmcp_reads() {
        for body in bodies() {
            if rmcp_reads_a_routed_request(&body).is_some() {
                assert!(
                    is_plain_routed_request(&body),
                    "{}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
    }

    #[test]
    fn a_batch_is_split_as_written_and_counted_past_its_bound() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("mcp-session-id", "s".parse().unwrap());
        let body = br#"[{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}, {"jsonrpc":"2.0","id":5,"result":{}}]"#;
        let Split::Messages(messages) = batch_to_split(&headers, body) else {
            panic!("not split");
        };
        assert_eq!(
            &messages[0].1[..],
            br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#,
            "as written"
        );
        assert!(messages[0].0.is_number(), "a request's id");
        assert_eq!(messages[1].0, Value::Null, "a response is answered nothing");
        let long = format!("[{}0]", "0,".repeat(99));
        assert!(matches!(
            batch_to_split(&headers, long.as_bytes()),
            Split::TooLong(100)
        ));
        let initialize = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}]"#;
        assert!(matches!(
            batch_to_split(&headers, initialize),
            Split::HoldsInitialize
        ));
        headers.insert("mcp-protocol-version", "2025-11-25".parse().unwrap());
        assert!(matches!(batch_to_split(&headers, body), Split::NotTaken));
        let mut not_text = axum::http::HeaderMap::new();
        not_text.insert(
            "mcp-session-id",
            axum::http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert!(matches!(batch_to_split(&not_text, body), Split::NotTaken));
    }

    #[test]
    fn numbers_are_named_for_what_they_are() {
        let kind = |text: &str| json_kind(&serde_json::from_str(text).unwrap());
        let beyond = "an integer beyond the signed 64-bit range (-2^63 to 2^63-1)";
        assert_eq!(kind("18446744073709551616"), beyond, "u64::MAX + 1");
        assert_eq!(kind("-1e19"), beyond);
        assert_eq!(kind("1e30"), beyond);
        assert_eq!(kind("1.5"), "a fraction");
        assert_eq!(
            kind("1.0"),
            "a number written with a fraction or an exponent (`1.0`, `1e3`)"
        );
        assert_eq!(kind("true"), "a boolean");
        // Where an integer is no more valid than a string (`method`,
        // `params`), one in range is named as such.
        assert_eq!(kind("5"), "an integer");
        assert_eq!(kind("-5"), "an integer");
        assert_eq!(kind("9223372036854775808"), beyond, "i64::MAX + 1");
    }

    /// A member given twice makes an invalid request, not invalid params.
    #[test]
    fn a_member_given_twice_is_an_invalid_request() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"ping"}"#;
        match check_shape(body) {
            Err(ShapeRejection::Invalid(message)) => {
                assert!(message.contains("duplicate field `method`"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// rmcp takes a list's misfitting params for none; the guard does not.
    #[test]
    fn a_list_cursor_that_is_not_text_is_refused() {
        for method in [
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
        ] {
            let body = |params: &str| {
                format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}"{params}}}"#).into_bytes()
            };
            assert!(
                matches!(
                    check_shape(&body(r#","params":{"cursor":5}"#)),
                    Err(ShapeRejection::Params { id, .. }) if id == 7
                ),
                "{method}"
            );
            assert_eq!(check_shape(&body(r#","params":{"cursor":"p2"}"#)), Ok(()));
            assert_eq!(check_shape(&body(r#","params":{}"#)), Ok(()));
            assert_eq!(check_shape(&body("")), Ok(()));
        }
    }

    #[test]
    fn check_shape_decides_as_before_with_the_shortcut() {
        for body in bodies() {
            if is_plain_routed_request(&body) {
                assert_eq!(check_shape(&body), Ok(()));
            }
        }
        // A body the shortcut refuses is still read the typed way.
        for unfitting in [
            &br#"{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"arguments":{}}}"#[..],
            br#"{"jsonrpc":"2.0","id":"r1","method":"prompts/get","params":{"arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":"r1","method":"resources/read","params":{"uri":5}}"#,
        ] {
            assert!(!is_plain_routed_request(unfitting));
            assert!(matches!(
                check_shape(unfitting),
                Err(ShapeRejection::Params { .. })
            ));
        }
    }
}
