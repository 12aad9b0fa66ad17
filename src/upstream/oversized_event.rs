//! A legacy SSE upstream's event too large to read, skipped rather than
//! ending the session; and one whose bytes are not UTF-8, repaired.
//!
//! On a legacy (HTTP+SSE) upstream every message of the session comes on
//! one event stream. An event over the bound (16 MiB, as for a stdio
//! line) broke that stream, and so ended the session: every client's call
//! in flight on it failed, the shared session counted as crashed (three
//! in a minute put the mount down), and the log said only that the
//! connection ended. Here the stream's bytes pass event by event: an
//! event within the bound passes whole, as the SSE parser would have
//! taken it (it too dispatches an event only at its end); one over it is
//! dropped as it streams past, its data scanned in constant memory for
//! the id of the answer it may be (`overlong_line.rs`), which `on_skipped`
//! is given, so that that request fails at once, saying why.

use bytes::{Bytes, BytesMut};
use futures::{Stream, TryStreamExt};

use super::overlong_line::OverlongLine;

/// `bytes` (an SSE event stream) with each event over `limit` bytes left
/// out, and handed to `on_skipped` as scanned.
pub fn skipping_oversized<S, E>(
    bytes: S,
    limit: usize,
    mut on_skipped: impl FnMut(OverlongLine) + Send + 'static,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
{
    let mut events = EventSplitter::new(limit);
    bytes.map_ok(move |chunk| events.feed(&chunk, &mut on_skipped))
}

/// Cuts an SSE byte stream into whole events (see the module doc).
struct EventSplitter {
    limit: usize,
    /// The current event's bytes while it is within the limit.
    pending: BytesMut,
    /// The current event, once over the limit: its data being scanned.
    skipping: Option<DataScan>,
    /// The previous byte ended a line: a line end now ends the event.
    at_line_start: bool,
    /// The previous byte was `\r`: a `\n` now is part of its line end.
    after_cr: bool,
}

/// The most of an event's buffer kept between events.
const PENDING_KEPT: usize = 64 * 1024;

impl EventSplitter {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            pending: BytesMut::new(),
            skipping: None,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// The events `chunk` completes, whole, in order, their line ends
    /// written as `\n` (SSE also ends a line with `\r` or `\r\n`), and
    /// bytes that are not UTF-8 replaced by U+FFFD (the SSE parser fails
    /// the whole stream on them: see `unicode_repair.rs`).
    fn feed(&mut self, chunk: &[u8], on_skipped: &mut impl FnMut(OverlongLine)) -> Bytes {
        let mut complete = BytesMut::new();
        for &read in chunk {
            let byte = match read {
                b'\n' if self.after_cr => {
                    self.after_cr = false;
                    continue;
                }
                b'\r' => b'\n',
                other => other,
            };
            self.after_cr = read == b'\r';
            match &mut self.skipping {
                Some(scan) => scan.step(byte),
                None => {
                    self.pending.extend_from_slice(&[byte]);
                    if self.pending.len() > self.limit {
                        let mut scan = DataScan::default();
                        for &seen in self.pending.iter() {
                            scan.step(seen);
                        }
                        self.pending = BytesMut::new();
                        self.skipping = Some(scan);
                    }
                }
            }
            match byte {
                b'\n' if self.at_line_start => {
                    match self.skipping.take() {
                        Some(scan) => on_skipped(scan.line),
                        None => match String::from_utf8_lossy(&self.pending) {
                            std::borrow::Cow::Borrowed(_) => {
                                complete.extend_from_slice(&self.pending)
                            }
                            std::borrow::Cow::Owned(repaired) => {
                                tracing::debug!("an upstream event with bytes that are not UTF-8: U+FFFD put in their place");
                                complete.extend_from_slice(repaired.as_bytes());
                            }
                        },
                    }
                    if self.pending.capacity() > PENDING_KEPT {
                        self.pending = BytesMut::new();
                    } else {
                        self.pending.clear();
                    }
                }
                b'\n' => self.at_line_start = true,
                _ => self.at_line_start = false,
            }
        }
        complete.freeze()
    }
}

/// Feeds the value of each `data` field of an event to an
/// [`OverlongLine`] (the lines of one value joined by `\n`, as SSE joins
/// them), skipping the field names and other fields. Its line ends are
/// `\n` (see [`EventSplitter::feed`]).
#[derive(Default)]
struct DataScan {
    line: OverlongLine,
    /// The current line's field name so far (only `data` matters).
    field: Vec<u8>,
    /// Past the current line's `:`: whether it is a `data` line, and
    /// whether the one space a value may start with is still to come.
    value: Option<(bool, bool)>,
}

impl DataScan {
    fn step(&mut self, byte: u8) {
        match (&mut self.value, byte) {
            (Some((is_data, _)), b'\n') => {
                if *is_data {
                    self.line.feed(b"\n");
                }
                self.value = None;
                self.field.clear();
            }
            (None, b'\n') => self.field.clear(),
            (None, b':') => self.value = Some((self.field == b"data", true)),
            (None, _) => {
                if self.field.len() <= 4 {
                    self.field.push(byte);
                }
            }
            (Some((is_data, space_next)), _) => {
                let leading_space = *space_next && byte == b' ';
                *space_next = false;
                if *is_data && !leading_space {
                    self.line.feed(&[byte]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]], limit: usize) -> (Vec<u8>, Vec<Option<serde_json::Value>>) {
        let mut splitter = EventSplitter::new(limit);
        let mut skipped = Vec::new();
        let mut out = Vec::new();
        for chunk in chunks {
            let complete = splitter.feed(chunk, &mut |line: OverlongLine| {
                skipped.push(line.answered_id())
            });
            out.extend_from_slice(&complete);
        }
        (out, skipped)
    }

    #[test]
    fn events_within_the_bound_pass_whole_in_order() {
        let stream: &[u8] = b"event: endpoint\ndata: /post\n\ndata: {\"id\":1}\n\n: ping\n\n";
        let (out, skipped) = run(&[&stream[..7], &stream[7..30], &stream[30..]], 64);
        assert_eq!(out, stream);
        assert!(skipped.is_empty());
    }

    /// SSE ends a line with `\r\n`, `\r` or `\n`: each ends its event
    /// (a server writing `\r` alone had every event held back).
    #[test]
    fn every_line_end_ends_an_event() {
        let stream: &[u8] = b"event: endpoint\rdata: /post\r\rdata: 1\r\n\r\ndata: 2\n\r\n";
        let (out, _) = run(&[&stream[..16], &stream[16..37], &stream[37..]], 64);
        assert_eq!(
            out,
            b"event: endpoint\ndata: /post\n\ndata: 1\n\ndata: 2\n\n"
        );
    }

    /// Bytes that are not UTF-8, on which the SSE parser fails the whole
    /// stream (the session), become U+FFFD.
    #[test]
    fn bytes_that_are_not_utf8_are_replaced() {
        let (out, _) = run(&[b"data: caf\xe9\n\n"], 64);
        assert_eq!(out, "data: caf\u{fffd}\n\n".as_bytes());
    }

    #[test]
    fn an_event_over_the_bound_is_left_out_and_its_id_found() {
        // Its id last, on a second data line, as the TypeScript SDK
        // writes an answer (`result` first).
        let big = format!(
            "data: {{\"jsonrpc\":\"2.0\",\"result\":{{\"text\":\"{}\"}},\ndata: \"id\":7}}\n\n",
            "x".repeat(100)
        );
        let stream = format!("data: {{\"id\":1}}\n\n{big}data: {{\"id\":2}}\n\n");
        let bytes = stream.as_bytes();
        let (out, skipped) = run(&[&bytes[..40], &bytes[40..]], 64);
        assert_eq!(out, b"data: {\"id\":1}\n\ndata: {\"id\":2}\n\n");
        assert_eq!(skipped, [Some(serde_json::json!(7))]);
    }
}
