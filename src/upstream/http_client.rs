//! The HTTP client of Streamable HTTP upstreams: reqwest, plus trace context.
//!
//! rmcp's transport sends each message with headers fixed at connect time;
//! this wrapper adds the W3C `traceparent`/`tracestate` of the message being
//! posted (taken from its `_meta`, where the upstream request span put it)
//! as HTTP headers too, so HTTP-level tracing in front of the upstream sees
//! the same trace. Everything else is reqwest's own implementation.

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, GetMeta, JsonRpcMessage},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;

#[derive(Clone)]
pub struct TracingHttpClient(pub reqwest::Client);

/// `custom_headers` plus the message's trace context, if it has one.
fn with_trace_headers(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let JsonRpcMessage::Request(request) = message else {
        return headers;
    };
    let meta = &request.request.get_meta().0;
    for (name, value) in [
        ("traceparent", meta.get_traceparent()),
        ("tracestate", meta.get_tracestate()),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

impl StreamableHttpClient for TracingHttpClient {
    type Error = reqwest::Error;

    /// rmcp's transport posts through `post_message_with_response_limits`;
    /// this (required by the trait) and the trait's other defaults lead there.
    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_trace_headers(&message, custom_headers);
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// Whether a failed send means the HTTP session is over: the server said
/// the session expired (404) or cannot be reached at all. Anything else (a
/// 5xx, a malformed answer) fails only that request. (A 400 with a JSON-RPC
/// error about the session arrives as a message instead; `ordered.rs`
/// handles it.)
pub fn means_session_gone(error: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let Some(error) = error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    else {
        return false;
    };
    match error {
        StreamableHttpError::SessionExpired | StreamableHttpError::TransportChannelClosed => true,
        StreamableHttpError::Client(error) => error.is_connect(),
        _ => false,
    }
}
