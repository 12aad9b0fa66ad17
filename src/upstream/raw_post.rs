//! The HTTP POST of a request whose answer the gateway needs verbatim.
//!
//! rmcp's reqwest client parses an `application/json` answer itself, out of
//! reach of [`RawAnswers`]. For the few requests marked there (`tools/list`
//! and custom requests: discovery and tasks, never the hot path) the POST
//! is made here instead, so the answer is shown to [`RawAnswers::offer`]
//! before it is parsed, whether it comes as JSON or as an SSE stream. It
//! follows the transport's rules as rmcp's client does: `Accept` both
//! types, the session id and the transport's headers (protocol version,
//! configured headers, trace context), 202 for nothing to read, 404 on a
//! session for an expired session, bodies and events bounded.

use std::{borrow::Cow, collections::HashMap, sync::Arc};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use reqwest::{
    header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE},
    StatusCode,
};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
    },
};
use sse_stream::{Sse, SseStream};

use super::raw::RawAnswers;

use crate::header_names;

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// What the POST needs besides the message.
pub struct RawPost<'a> {
    pub client: &'a reqwest::Client,
    pub raw: &'a Arc<RawAnswers>,
    pub uri: &'a str,
    pub session_id: Option<&'a str>,
    pub auth_header: Option<String>,
    pub headers: HashMap<HeaderName, HeaderValue>,
    pub limits: StreamableHttpResponseLimits,
}

impl RawPost<'_> {
    pub async fn send(self, message: &ClientJsonRpcMessage) -> PostResult {
        let request = self
            .client
            .post(self.uri)
            .header(ACCEPT, "text/event-stream, application/json")
            .json(message);
        let request = with_session(
            request,
            self.session_id,
            self.auth_header.as_deref(),
            &self.headers,
        );
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && self.session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get(&header_names::MCP_SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let content_type = content_type(response.headers());
        if status.is_success() && content_type.starts_with("text/event-stream") {
            let raw = self.raw.clone();
            let bytes = bounded_events(response.bytes_stream(), self.limits.max_sse_event_size);
            let events = SseStream::from_bytes_stream(bytes).inspect(move |event| {
                if let Ok(Sse {
                    data: Some(data), ..
                }) = event
                {
                    raw.offer(data.as_bytes());
                }
            });
            return Ok(StreamableHttpPostResponse::Sse(events.boxed(), session));
        }
        // A 400 may say the session is unknown (servers before 404), in
        // JSON or in plain text.
        let refused_on_session = status == StatusCode::BAD_REQUEST && self.session_id.is_some();
        if content_type.starts_with("application/json") || refused_on_session {
            let body = read_bounded(response.bytes_stream(), self.limits.max_json_response_size)
                .await
                .map_err(|error| match error {
                    BoundedError::Http(error) => StreamableHttpError::Client(error),
                    too_large => unexpected(too_large.to_string()),
                })?;
            if refused_on_session && super::direct_call::refuses_unknown_session(&body) {
                return Err(StreamableHttpError::SessionExpired);
            }
            if status.is_success() {
                self.raw.offer(&body);
            }
            // A JSON-RPC error is an answer whatever the status.
            let parsed = serde_json::from_slice::<ServerJsonRpcMessage>(&body).or_else(|error| {
                match super::unicode_repair::repaired(&body) {
                    Some(repaired) => serde_json::from_str(&repaired),
                    None => Err(error),
                }
            });
            return match parsed {
                Ok(message) => Ok(StreamableHttpPostResponse::Json(message, session)),
                Err(error) => Err(unexpected(format!(
                    "HTTP {status}: not a JSON-RPC message ({error})"
                ))),
            };
        }
        Err(unexpected(format!(
            "HTTP {status} with content type {content_type:?}"
        )))
    }
}

/// `builder` with what every request on an upstream session carries: the
/// transport's headers (configured ones, protocol version, trace context),
/// the bearer token and the session id.
pub(super) fn with_session(
    mut builder: reqwest::RequestBuilder,
    session_id: Option<&str>,
    auth_header: Option<&str>,
    headers: &HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    if let Some(token) = auth_header {
        builder = builder.bearer_auth(token);
    }
    if let Some(session) = session_id {
        builder = builder.header("mcp-session-id", session);
    }
    builder
}

/// The answer's `Content-Type`, lowercase (empty if none).
pub(super) fn content_type(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

fn unexpected(message: String) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(message))
}

/// Why a bounded body read stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum BoundedError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Http(E),
    #[error("answer larger than {0} bytes")]
    AnswerTooLarge(usize),
    #[error("an SSE event exceeded {0} bytes")]
    EventTooLarge(usize),
}

/// The whole body, or an error past `limit` bytes.
pub(super) async fn read_bounded<S, E>(chunks: S, limit: usize) -> Result<Vec<u8>, BoundedError<E>>
where
    S: futures::Stream<Item = Result<Bytes, E>>,
    E: std::error::Error + 'static,
{
    let mut body = Vec::new();
    let mut chunks = std::pin::pin!(chunks);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(BoundedError::Http)?;
        if body.len() + chunk.len() > limit {
            return Err(BoundedError::AnswerTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Passes an SSE byte stream through, failing it once `limit` bytes go by
/// without the blank line that ends an event.
pub(super) fn bounded_events<S, E>(
    bytes: S,
    limit: usize,
) -> impl futures::Stream<Item = Result<Bytes, BoundedError<E>>> + Send + 'static
where
    S: futures::Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    let mut scanner = EventScanner::default();
    bytes.map_err(BoundedError::Http).and_then(move |chunk| {
        let within = scanner.feed(&chunk, limit);
        async move {
            if within {
                Ok(chunk)
            } else {
                Err(BoundedError::EventTooLarge(limit))
            }
        }
    })
}

/// Counts the bytes of the SSE event being read. Lines end as the SSE
/// spec (and rmcp's parser, `sse-stream`) ends them: `\r\n`, `\n` or a
/// bare `\r`; a blank line ends the event.
#[derive(Default)]
struct EventScanner {
    in_event: usize,
    /// The previous byte ended a line.
    at_line_start: bool,
    /// The previous byte was a `\r`: a `\n` now belongs to its line end.
    after_cr: bool,
}

impl EventScanner {
    /// Whether the current event is still within `limit` after `chunk`.
    ///
    /// Line by line, with memchr finding the line ends: byte by byte, the
    /// scan was ~1% of a proxied call's instructions.
    fn feed(&mut self, chunk: &[u8], limit: usize) -> bool {
        let mut start = 0;
        for end in memchr::memchr2_iter(b'\n', b'\r', chunk) {
            if !self.count(end - start, limit) {
                return false;
            }
            start = end + 1;
            let ending = chunk[end];
            if ending == b'\n' && self.after_cr {
                self.after_cr = false;
                continue;
            }
            if self.at_line_start {
                // A blank line: the event ended.
                self.in_event = 0;
            }
            self.at_line_start = true;
            self.after_cr = ending == b'\r';
        }
        self.count(chunk.len() - start, limit)
    }

    /// Counts `bytes` of a line (none of them a line end).
    fn count(&mut self, bytes: usize, limit: usize) -> bool {
        if bytes > 0 {
            self.at_line_start = false;
            self.after_cr = false;
            self.in_event += bytes;
        }
        self.in_event <= limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_line_ends_an_event() {
        let mut scanner = EventScanner::default();
        assert!(scanner.feed(b"data: 123\n\n", 10));
        assert!(scanner.feed(b"data: 12\r\n\r\ndata: 1234", 10));
        assert!(!scanner.feed(b"5678", 10), "one event of 14 bytes");
    }

    /// Lines ended by a bare `\r` (the SSE spec allows it, and rmcp reads
    /// them): a blank one ends the event. The scan counted each such event
    /// into the next until the stream failed as one oversized event.
    #[test]
    fn a_bare_carriage_return_ends_a_line() {
        let mut scanner = EventScanner::default();
        for _ in 0..10 {
            assert!(scanner.feed(b"data: 1234\r\r", 10));
        }
        // Split between the `\r` and the `\n` of one line end: not a
        // blank line.
        assert!(scanner.feed(b"data: 12\r", 20));
        assert!(scanner.feed(b"\ndata: 12", 20));
        assert_eq!(scanner.in_event, 16, "one event, two lines");
        let mut scanner = EventScanner::default();
        assert!(
            scanner.feed(b"data: 12\r\n\n", 10),
            "a line end, then a blank line"
        );
        assert!(scanner.feed(b"data: 1234", 10));
    }

    /// The scan one byte at a time, as simple as it can be written: what
    /// [`EventScanner::feed`] must agree with.
    fn feed_bytewise(scanner: &mut EventScanner, chunk: &[u8], limit: usize) -> bool {
        for byte in chunk {
            match byte {
                b'\n' if scanner.after_cr => scanner.after_cr = false,
                b'\n' | b'\r' => {
                    if scanner.at_line_start {
                        scanner.in_event = 0;
                    }
                    scanner.at_line_start = true;
                    scanner.after_cr = *byte == b'\r';
                }
                _ => {
                    scanner.at_line_start = false;
                    scanner.after_cr = false;
                    scanner.in_event += 1;
                }
            }
            if scanner.in_event > limit {
                return false;
            }
        }
        true
    }

    #[test]
    fn line_by_line_agrees_with_byte_by_byte() {
        // A fixed xorshift: the same 2,000 streams on every run.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"\n\n\r\rd:a ";
        for _ in 0..2_000 {
            let limit = (next() % 12) as usize;
            let (mut fast, mut slow) = (EventScanner::default(), EventScanner::default());
            for _ in 0..(next() % 6) {
                let chunk: Vec<u8> = (0..next() % 16)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect();
                let within = fast.feed(&chunk, limit);
                assert_eq!(within, feed_bytewise(&mut slow, &chunk, limit), "{chunk:?}");
                if !within {
                    break;
                }
                assert_eq!(
                    (fast.in_event, fast.at_line_start, fast.after_cr),
                    (slow.in_event, slow.at_line_start, slow.after_cr),
                    "{chunk:?}"
                );
            }
        }
    }
}
