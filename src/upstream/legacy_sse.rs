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
//! Messages are posted in the order rmcp sends them (it starts each send
//! as a task of its own, and concurrent POSTs on pooled connections could
//! reach the server out of order: a cancel before the request it
//! cancels): each POST starts once the one before has been answered, or
//! [`NEXT_POST_AFTER`] after it started, whichever comes first. Most
//! servers answer 202 as soon as they have the message; some (the Java
//! SDK's servlet transport) answer only once they have run it, and must
//! not hold every other message meanwhile (a sampling answer the running
//! tool waits for among them). A POST has the mount's request ceiling to
//! be answered; one that is not fails its message alone.
//!
//! The mount's headers (credentials) go with the `GET` and every POST, so
//! an endpoint on another origin than the stream's is refused, as the MCP
//! SDKs refuse it: a server (or whatever sits in front of it) naming one
//! would have the gateway hand those headers to a third party. Redirects
//! are not followed, for the same reason. An endpoint answering 404 says
//! the server forgot the session (it restarted behind a proxy that kept
//! the stream open): the session ends as expired, as a Streamable HTTP
//! session the server forgot does, and a new one is opened at once.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use rmcp::{
    model::JsonRpcMessage,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{streamable_http_client::StreamableHttpResponseLimits, Transport},
    RoleClient,
};
use sse_stream::{Sse, SseStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    http_client::trace_headers, malformed::MalformedLines, oversized_event::skipping_oversized,
    raw::RawAnswers,
};
use crate::naming::MountName;

/// The most of an error answer's body read for its quote (which is
/// shorter, `quoted_error.rs`): a header value echoed across the quote's
/// end is found whole, and hidden.
const ERROR_BODY_READ: usize = 4096;

/// The most of a POST's answer read (servers answer `Accepted` or
/// nothing); a longer one is dropped with its connection.
const ANSWER_READ: usize = 64 * 1024;

/// How long a POST holds the next back before it is answered: long
/// enough for the message to be on its way first (on loopback, a POST is
/// answered in about a millisecond), short enough not to hold up a
/// server that answers only once it has run the message.
const NEXT_POST_AFTER: Duration = Duration::from_millis(50);

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

/// Why a message could not be posted.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("cannot encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{}", super::http_client::with_causes(.0))]
    Http(#[from] reqwest::Error),
    #[error("the server refused the message with HTTP {status}{body}")]
    Refused { status: u16, body: String },
    #[error("the server did not answer the message's POST within {}", humantime::format_duration(*.0))]
    TooSlow(Duration),
    #[error("the session has ended")]
    Ended,
}

/// One message to post, and where its outcome goes.
struct Outgoing {
    body: Vec<u8>,
    trace: Vec<(HeaderName, HeaderValue)>,
    posted: oneshot::Sender<Result<(), PostError>>,
}

/// A legacy SSE upstream's session: its event stream, and the queue of
/// messages to post to the endpoint it named.
pub struct LegacySseTransport {
    mount: MountName,
    events: Events,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    raw: Arc<RawAnswers>,
    /// Also told of the events too large to read (`oversized_event.rs`).
    malformed: Arc<MalformedLines>,
    /// Cancelled when posting showed the session over (a 404), and on
    /// close.
    over: CancellationToken,
}

impl LegacySseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event
    /// (the caller bounds the wait: the initialize timeout). `expired` is
    /// the upstream session's: cancelled when the server forgot it.
    /// `post_limit`: how long a POST may go unanswered (the mount's
    /// request ceiling).
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        client: reqwest::Client,
        url: &url::Url,
        mut headers: HeaderMap,
        mount: MountName,
        raw: Arc<RawAnswers>,
        malformed: MalformedLines,
        expired: CancellationToken,
        post_limit: Duration,
        live: Option<super::LiveHeaders>,
    ) -> Result<Self, OpenError> {
        let mut get_headers = headers.clone();
        super::live_headers::apply(&live, &mut get_headers);
        get_headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let response = client
            .get(url.clone())
            .headers(get_headers.clone())
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            return Err(OpenError::Refused {
                status: status.as_u16(),
                body: quoted_body(response, &get_headers).await,
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
        let malformed = Arc::new(malformed);
        let skipped = malformed.clone();
        let mut events: Events = Box::pin(SseStream::from_bytes_stream(skipping_oversized(
            response.bytes_stream(),
            limit,
            move |event| skipped.too_long(&event, limit),
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
                    tracing::debug!(mount = %mount, %error, "a legacy SSE upstream's stream broke before its endpoint");
                    return Err(OpenError::NoEndpoint);
                }
                None => return Err(OpenError::NoEndpoint),
            }
        };
        // Empty, it would resolve to the stream's own URL.
        if endpoint.trim().is_empty() {
            return Err(OpenError::NoEndpoint);
        }
        let endpoint = url.join(endpoint.trim()).map_err(OpenError::BadEndpoint)?;
        if endpoint.origin() != url.origin() {
            return Err(OpenError::ForeignEndpoint(
                endpoint.origin().ascii_serialization(),
            ));
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let over = CancellationToken::new();
        let (outgoing, queue) = mpsc::unbounded_channel();
        tokio::spawn(
            Poster {
                client,
                endpoint: Arc::new(endpoint),
                headers: Arc::new(headers),
                live,
                mount: mount.clone(),
                limit: post_limit,
                over: over.clone(),
                expired,
            }
            .post_in_order(queue),
        );
        Ok(Self {
            mount,
            events,
            outgoing,
            raw,
            malformed,
            over,
        })
    }

    /// The next message on the stream; `None` once it has ended.
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let event = tokio::select! {
                event = self.events.next() => event,
                () = self.over.cancelled() => return None,
            };
            let event = match event {
                Some(Ok(event)) => event,
                Some(Err(error)) => {
                    tracing::info!(mount = %self.mount, %error, "a legacy SSE upstream's event stream broke; the session ends");
                    return None;
                }
                None => {
                    tracing::debug!(mount = %self.mount, "a legacy SSE upstream's event stream ended");
                    return None;
                }
            };
            // Only `message` events (also an event without a name) carry
            // JSON-RPC; a second `endpoint` or a server's own heartbeats
            // are skipped.
            if !matches!(event.event.as_deref(), None | Some("") | Some("message")) {
                continue;
            }
            let Some(mut data) = event.data else { continue };
            super::unicode_repair::repair_text(&mut data);
            self.raw.offer(data.as_bytes());
            // What is not JSON is logged, and answers the request it names
            // with an error, as a stdio line does.
            self.malformed.check(data.as_bytes());
            match serde_json::from_str(&data) {
                Ok(message) => return Some(message),
                Err(error) => {
                    tracing::debug!(mount = %self.mount, %error, "skipped a legacy SSE upstream's message that is not JSON-RPC");
                }
            }
        }
    }
}

/// Posts a session's messages to its endpoint, in order.
#[derive(Clone)]
struct Poster {
    client: reqwest::Client,
    endpoint: Arc<url::Url>,
    /// The mount's headers and the content type, for every POST.
    headers: Arc<HeaderMap>,
    /// Laid over `headers` on every POST.
    live: Option<super::LiveHeaders>,
    mount: MountName,
    /// How long a POST may go unanswered.
    limit: Duration,
    over: CancellationToken,
    expired: CancellationToken,
}

impl Poster {
    /// Runs until the transport is dropped (its queue closes). Once the
    /// session is over, what is still queued fails at once.
    async fn post_in_order(self, mut queue: mpsc::UnboundedReceiver<Outgoing>) {
        while let Some(message) = queue.recv().await {
            if self.over.is_cancelled() {
                let _ = message.posted.send(Err(PostError::Ended));
                continue;
            }
            let poster = self.clone();
            let mut posting = tokio::spawn(async move {
                let outcome = poster.post(message.body, message.trace).await;
                let _ = message.posted.send(outcome);
            });
            let _ = tokio::time::timeout(NEXT_POST_AFTER, &mut posting).await;
        }
    }

    async fn post(
        &self,
        body: Vec<u8>,
        trace: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<(), PostError> {
        let mut headers = (*self.headers).clone();
        super::live_headers::apply(&self.live, &mut headers);
        headers.extend(trace);
        let request = self
            .client
            .post((*self.endpoint).clone())
            .headers(headers)
            .body(body)
            .send();
        let response = match tokio::time::timeout(self.limit, request).await {
            Ok(response) => response?,
            Err(_) => return Err(PostError::TooSlow(self.limit)),
        };
        let status = response.status();
        if status.is_success() {
            // Read (a little, briefly) so the connection can be pooled; a
            // longer answer is dropped with its connection.
            let _ =
                tokio::time::timeout(Duration::from_secs(1), read_at_most(response, ANSWER_READ))
                    .await;
            return Ok(());
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            tracing::warn!(mount = %self.mount, "the legacy SSE upstream no longer knows this session");
            self.expired.cancel();
            self.over.cancel();
        }
        let mut sent = (*self.headers).clone();
        super::live_headers::apply(&self.live, &mut sent);
        Err(PostError::Refused {
            status: status.as_u16(),
            body: quoted_body(response, &sent).await,
        })
    }
}

/// At most `limit` bytes of `response`'s body (what it has within that).
async fn read_at_most(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    body
}

/// The start of an error answer's body, for the error (servers say why
/// there: "unknown session", "unauthorized"), without the values of the
/// `headers` sent (`quoted_error.rs`); read briefly, and no further than
/// [`ERROR_BODY_READ`].
async fn quoted_body(response: reqwest::Response, headers: &HeaderMap) -> String {
    let body: Bytes = tokio::time::timeout(
        Duration::from_secs(1),
        read_at_most(response, ERROR_BODY_READ),
    )
    .await
    .unwrap_or_default()
    .into();
    let text = String::from_utf8_lossy(&body);
    let text = text.trim();
    match text.is_empty() {
        true => String::new(),
        false => format!(": {}", super::quoted_error::quoted(text, headers.values())),
    }
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = PostError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Queued here, not in the future rmcp spawns: the queue's order
        // is the order rmcp sends in.
        let trace: Vec<(HeaderName, HeaderValue)> = match &item {
            JsonRpcMessage::Request(request) => trace_headers(&request.request).collect(),
            _ => Vec::new(),
        };
        let queued = serde_json::to_vec(&item)
            .map_err(PostError::from)
            .and_then(|body| {
                let (posted, outcome) = oneshot::channel();
                self.outgoing
                    .send(Outgoing {
                        body,
                        trace,
                        posted,
                    })
                    .map_err(|_| PostError::Ended)?;
                Ok(outcome)
            });
        async move { queued?.await.unwrap_or(Err(PostError::Ended)) }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.next_message()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the stream closes its connection, which ends the session
        // on the server's side (the legacy transport has no DELETE).
        self.events = Box::pin(futures::stream::empty());
        self.over.cancel();
        Ok(())
    }
}
