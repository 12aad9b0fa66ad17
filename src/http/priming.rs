//! SSE priming events only for the clients that know them.
//!
//! rmcp starts every SSE stream with a priming event (an id, a `retry`, and
//! empty data), which 2025-11-25 (SEP-1699) introduced so that a client can
//! resume a stream before its first message. A client of an earlier
//! version parses each event's data as a JSON-RPC message: the Python SDK
//! 1.x and the TypeScript SDK 1.x before SEP-1699 report a JSON parse error
//! for every stream, to the application's error handler. The reference
//! servers send priming events only to sessions of 2025-11-25 or later;
//! so does the gateway: for an older client, events without data are
//! taken out of the stream as it passes.
//!
//! A request's version is its `MCP-Protocol-Version` header (2025-06-18 and
//! later send it on every request after `initialize`; without it a client
//! speaks 2025-03-26), and for `initialize` the version it asks for
//! ([`RequestedVersion`], noted from the body), which the gateway grants
//! when it knows it.

use axum::{
    body::{Body, Bytes},
    http::{header, HeaderMap},
    response::Response,
};
use futures::StreamExt;

use crate::header_names;

/// The first version whose clients expect priming events.
const FIRST_WITH_PRIMING: &str = "2025-11-25";

/// The `protocolVersion` an `initialize` request asks for, as a request
/// extension.
#[derive(Clone)]
pub struct RequestedVersion(pub String);

/// Whether the client of a request with `headers` (and, for an
/// `initialize`, asking for `requested`) expects priming events. Versions
/// are dates, so they compare as text; one the gateway does not know is
/// answered with its newest, which has them.
pub fn expects_priming(headers: &HeaderMap, requested: Option<&RequestedVersion>) -> bool {
    let version = match (headers.get(&header_names::MCP_PROTOCOL_VERSION), requested) {
        (Some(version), _) => version.to_str().unwrap_or(FIRST_WITH_PRIMING),
        (None, Some(RequestedVersion(version))) => {
            let known = rmcp::model::ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|known| known.as_str() == version);
            if !known {
                return true;
            }
            version
        }
        (None, None) => "2025-03-26",
    };
    version >= FIRST_WITH_PRIMING
}

/// `response` with the priming events (events without data) taken out of
/// its SSE body; any other response as it is.
pub fn without_priming(response: Response) -> Response {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if !is_sse {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Shorter now, and not known by how much.
    parts.headers.remove(header::CONTENT_LENGTH);
    let mut events = EventFilter::default();
    let chunks = body.into_data_stream().map(move |chunk| {
        chunk.map(|chunk| {
            let kept = events.feed(&chunk);
            Bytes::from(kept)
        })
    });
    Response::from_parts(parts, Body::from_stream(chunks))
}

/// Cuts an SSE byte stream into events and keeps those with data.
#[derive(Default)]
struct EventFilter {
    /// The event read so far, up to (not including) its blank line.
    pending: Vec<u8>,
}

impl EventFilter {
    /// What of `chunk` (and what was pending) goes on: every complete
    /// event that has data, as written.
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut kept = Vec::new();
        let mut start = 0;
        while let Some(end) = event_end(&self.pending[start..]) {
            let event = &self.pending[start..start + end];
            if has_data(event) {
                kept.extend_from_slice(event);
            }
            start += end;
        }
        self.pending.drain(..start);
        kept
    }
}

/// The length of the first complete event in `bytes`, its blank line
/// included (`\n\n`, or with `\r\n`).
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut at_line_start = true;
    for (index, byte) in bytes.iter().enumerate() {
        match byte {
            b'\n' if at_line_start => return Some(index + 1),
            b'\n' => at_line_start = true,
            b'\r' => {}
            _ => at_line_start = false,
        }
    }
    None
}

/// Whether an event has a `data` field with something in it.
fn has_data(event: &[u8]) -> bool {
    event.split(|byte| *byte == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(b"data:")
            .is_some_and(|data| !data.trim_ascii().is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_without_data_are_taken_out_wherever_the_chunks_break() {
        let stream = b"data: \nid: 0/9\nretry: 3000\n\nevent: message\ndata: {\"id\":1}\nid: 1/9\n\nid: 2\r\n\r\ndata: {}\n\n";
        let expected = b"event: message\ndata: {\"id\":1}\nid: 1/9\n\ndata: {}\n\n";
        for split in 0..stream.len() {
            let mut filter = EventFilter::default();
            let mut out = filter.feed(&stream[..split]);
            out.extend(filter.feed(&stream[split..]));
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(expected),
                "split at {split}"
            );
        }
    }

    #[test]
    fn the_version_decides() {
        let with = |version: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("mcp-protocol-version", version.parse().unwrap());
            headers
        };
        assert!(expects_priming(&with("2025-11-25"), None));
        assert!(!expects_priming(&with("2025-06-18"), None));
        assert!(
            !expects_priming(&HeaderMap::new(), None),
            "no header: 2025-03-26"
        );
        let asks = |version: &str| RequestedVersion(version.to_owned());
        assert!(!expects_priming(
            &HeaderMap::new(),
            Some(&asks("2024-11-05"))
        ));
        assert!(expects_priming(
            &HeaderMap::new(),
            Some(&asks("2025-11-25"))
        ));
        assert!(
            expects_priming(&HeaderMap::new(), Some(&asks("1999-01-01"))),
            "an unknown version is answered with the newest"
        );
    }
}
