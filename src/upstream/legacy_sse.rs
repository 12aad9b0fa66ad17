//! The transport of an upstream on the legacy HTTP+SSE transport
//! (protocol 2024-11-05), which rmcp's client no longer has.
//!
//! The client opens a `GET` event stream at the configured URL; the server's
//! first event, `endpoint`, names the URL (usually with a session id in its
//! query) that the client POSTs each of its messages to, and everything the
//! server says (answers, notifications, its own requests) comes back as
//! `message` events on that one stream. So it is one ordered channel of
//! messages each way, as stdio is, and the gateway treats it as it treats a
//! stdio upstream (rmcp's client over [`super::ordered::OrderedTransport`]);
//! the stream's end is the session's end, and the supervisor opens a new
//! one.
//!
//! The mount's headers (credentials) go with the `GET` and every POST, so
//! an endpoint on another origin than the stream's is refused, as the MCP
//! SDKs refuse it: a server (or whatever sits in front of it) naming one
//! would have the gateway hand those headers to a third party. Redirects
//! are not followed, for the same reason. An endpoint answering 404 says
//! the server forgot the session (it restarted behind a proxy that kept
//! the stream open): the transport ends so that a new session is opened.

use std::{collections::HashMap, future::Future, pin::Pin, sync::Arc};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use rmcp::{
    model::{JsonRpcMessage, ServerJsonRpcMessage},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{streamable_http_client::StreamableHttpResponseLimits, Transport},
    RoleClient,
};
use sse_stream::{Sse, SseStream};
use tokio_util::sync::CancellationToken;

use super::{
    http_client::trace_headers, malformed::MalformedLines, raw::RawAnswers,
    raw_post::bounded_events,
};

/// The most of an error answer's body quoted in the error.
const QUOTED_BODY: usize = 200;

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// Why the event stream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{}", super::http_client::with_causes(.0))]
    Http(#[from] reqwest::Error),
    #[error("the server answered the GET of its event stream with HTTP {status}{body}")]
    Refused { status: u16, body: String },
    #[error("the server answered the GET with {0:?}, not an SSE event stream (is this a Streamable HTTP server? then leave `transport` out)")]
    NotAnEventStream(String),
    #[error("the event stream ended before it named the endpoint to post messages to")]
    NoEndpoint,
    #[error("the endpoint the server named is not a URL: {0}")]
    BadEndpoint(url::ParseError),
    #[error("the server named an endpoint on another origin ({0}); refused, the mount's headers would go there")]
    ForeignEndpoint(String),
}

/// A legacy SSE upstream's session: its event stream and the endpoint its
/// messages are posted to.
pub struct LegacySseTransport {
    client: reqwest::Client,
    /// The mount's headers, sent with every POST.
    headers: Arc<HeaderMap>,
    endpoint: Arc<url::Url>,
    events: Events,
    raw: Arc<RawAnswers>,
    malformed: Arc<MalformedLines>,
    /// Cancelled by a POST the server answers 404: it forgot the session.
    forgotten: CancellationToken,
}

impl LegacySseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event
    /// (the caller bounds the wait: the initialize timeout).
    pub async fn open(
        client: reqwest::Client,
        url: &url::Url,
        headers: HeaderMap,
        raw: Arc<RawAnswers>,
        malformed: MalformedLines,
    ) -> Result<Self, OpenError> {
        let response = client
            .get(url.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            let body = quoted_body(response).await;
            return Err(OpenError::Refused {
                status: status.as_u16(),
                body,
            });
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("no content type")
            .to_owned();
        if !content_type
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
        {
            return Err(OpenError::NotAnEventStream(content_type));
        }
        let limit = StreamableHttpResponseLimits::default().max_sse_event_size;
        let mut events: Events = Box::pin(SseStream::from_bytes_stream(bounded_events(
            response.bytes_stream(),
            limit,
        )));
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    break event.data.unwrap_or_default();
                }
                // Nothing else is meaningful before the endpoint: the
                // client has not said anything yet.
                Some(Ok(_)) => continue,
                Some(Err(error)) => {
                    tracing::debug!(%error, "a legacy SSE upstream's stream broke before its endpoint");
                    return Err(OpenError::NoEndpoint);
                }
                None => return Err(OpenError::NoEndpoint),
            }
        };
        let endpoint = url.join(endpoint.trim()).map_err(OpenError::BadEndpoint)?;
        if endpoint.origin() != url.origin() {
            return Err(OpenError::ForeignEndpoint(
                endpoint.origin().ascii_serialization(),
            ));
        }
        Ok(Self {
            client,
            headers: Arc::new(headers),
            endpoint: Arc::new(endpoint),
            events,
            raw,
            malformed: Arc::new(malformed),
            forgotten: CancellationToken::new(),
        })
    }

    /// The next message on the stream; `None` once it has ended.
    async fn next_message(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let event = tokio::select! {
                event = self.events.next() => event,
                () = self.forgotten.cancelled() => return None,
            };
            let event = match event {
                Some(Ok(event)) => event,
                Some(Err(error)) => {
                    tracing::info!(%error, "a legacy SSE upstream's event stream broke; the session ends");
                    return None;
                }
                None => {
                    tracing::debug!("a legacy SSE upstream's event stream ended");
                    return None;
                }
            };
            // Only `message` events (also an event without a name) carry
            // JSON-RPC; a second `endpoint` or a server's own heartbeats
            // are skipped.
            if !matches!(event.event.as_deref(), None | Some("") | Some("message")) {
                continue;
            }
            let Some(data) = event.data else { continue };
            self.raw.offer(data.as_bytes());
            // What is not JSON is logged, and answers the request it names
            // with an error, as a stdio line does.
            self.malformed.check(data.as_bytes());
            match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                Ok(message) => return Some(message),
                Err(error) => {
                    tracing::debug!(%error, "skipped a legacy SSE upstream's message that is not JSON-RPC");
                }
            }
        }
    }
}

/// Up to [`QUOTED_BODY`] bytes of an error answer's body, for the error
/// (servers say why there: "unknown session", "unauthorized").
async fn quoted_body(response: reqwest::Response) -> String {
    let body: Bytes = response.bytes().await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY)]);
    let text = text.trim();
    match text.is_empty() {
        true => String::new(),
        false => format!(": {text}"),
    }
}

/// Why a message could not be posted.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("cannot encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{}", super::http_client::with_causes(.0))]
    Http(#[from] reqwest::Error),
    #[error("the server refused the message with HTTP {status}{body}")]
    Refused { status: u16, body: String },
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = PostError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let (client, endpoint, headers) = (
            self.client.clone(),
            self.endpoint.clone(),
            self.headers.clone(),
        );
        let forgotten = self.forgotten.clone();
        let trace: HashMap<HeaderName, HeaderValue> = match &item {
            JsonRpcMessage::Request(request) => trace_headers(&request.request).collect(),
            _ => HashMap::new(),
        };
        let body = serde_json::to_vec(&item);
        async move {
            let mut post = client
                .post(endpoint.as_str())
                .headers((*headers).clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body?);
            for (name, value) in trace {
                post = post.header(name, value);
            }
            let response = post.send().await?;
            let status = response.status();
            if status.is_success() {
                // Read to its end, so the connection goes back to the pool.
                let _ = response.bytes().await;
                return Ok(());
            }
            if status == reqwest::StatusCode::NOT_FOUND {
                tracing::warn!("the legacy SSE upstream no longer knows this session");
                forgotten.cancel();
            }
            Err(PostError::Refused {
                status: status.as_u16(),
                body: quoted_body(response).await,
            })
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.next_message()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the stream closes its connection, which ends the session
        // on the server's side (the legacy transport has no DELETE).
        self.events = Box::pin(futures::stream::empty());
        self.forgotten.cancel();
        Ok(())
    }
}
