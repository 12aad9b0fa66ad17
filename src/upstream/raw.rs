//! The upstream's answers to chosen requests, exactly as it wrote them.
//!
//! rmcp parses every answer into its typed `ServerResult`, whose model is
//! newer than the protocol the gateway speaks upstream: a 2025-11-25 tool's
//! `execution`, or a `tasks/get` answer (which rmcp reads as the later
//! SEP-2663 shape, dropping `ttl` and `pollInterval`), would not survive the
//! round trip. So the transport marks the requests whose answers the gateway
//! needs verbatim (`tools/list`, and every request rmcp has no type for,
//! sent as a custom request) when they go out ([`RawAnswers::want`]), and
//! reads those answers off the wire before rmcp parses them
//! ([`RawAnswers::offer`], fed by [`TapReader`] for stdio and by the HTTP
//! client for SSE). The requester then takes the raw answer by request id.
//!
//! Only the last [`KEPT`] marks are kept, so a request that never got its
//! answer (cancelled, timed out) cannot make this grow.

use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
};

use rmcp::model::{ClientRequest, RequestId};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// How many marked requests are remembered at once.
const KEPT: usize = 64;

/// A line of this many bytes or more (rmcp's own stdio limit, its `\n`
/// counted) is not looked at.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The most a [`TapReader`] keeps allocated between lines.
const LINE_KEPT: usize = 64 * 1024;

/// Whether the gateway needs `request`'s answer verbatim.
pub fn wants_raw_answer(request: &ClientRequest) -> bool {
    matches!(
        request,
        ClientRequest::ListToolsRequest(_) | ClientRequest::CustomRequest(_)
    )
}

#[derive(Default)]
pub struct RawAnswers {
    /// Marked request ids and, once seen, their `result`.
    slots: Mutex<VecDeque<(RequestId, Option<Value>)>>,
    /// Marks without an answer yet: while zero, nothing is parsed.
    waiting: AtomicUsize,
}

impl RawAnswers {
    /// Marks `id`: its answer will be kept when it arrives.
    pub fn want(&self, id: &RequestId) {
        let mut slots = lock(&self.slots);
        slots.push_back((id.clone(), None));
        self.waiting.fetch_add(1, Ordering::Release);
        while slots.len() > KEPT {
            if let Some((_, None)) = slots.pop_front() {
                self.waiting.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// Whether an answer is awaited for `id`.
    pub fn is_wanted(&self, id: &RequestId) -> bool {
        // Every HTTP POST asks: the common answer costs one atomic load.
        if !self.is_waiting() {
            return false;
        }
        lock(&self.slots)
            .iter()
            .any(|(wanted, answer)| wanted == id && answer.is_none())
    }

    /// Whether any marked request still waits for its answer.
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// Looks at one incoming JSON-RPC message; keeps its `result` if it
    /// answers a marked request.
    pub fn offer(&self, message: &[u8]) {
        if !self.is_waiting() {
            return;
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            id: Option<RequestId>,
            result: Option<Value>,
        }
        // Text that is not valid Unicode is read as rmcp is given it
        // (`unicode_repair.rs`).
        let parsed = serde_json::from_slice::<Answer>(message).or_else(|error| {
            match super::unicode_repair::repaired(message) {
                Some(repaired) => serde_json::from_str::<Answer>(&repaired),
                None => Err(error),
            }
        });
        let Ok(Answer {
            id: Some(id),
            result: Some(result),
        }) = parsed
        else {
            return;
        };
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots
            .iter_mut()
            .find(|(wanted, answer)| *wanted == id && answer.is_none())
        {
            slot.1 = Some(result);
            self.waiting.fetch_sub(1, Ordering::Release);
        }
    }

    /// The answer to `id` as the upstream wrote it, if it was marked and
    /// seen; forgets it either way.
    pub fn take(&self, id: &RequestId) -> Option<Value> {
        let mut slots = lock(&self.slots);
        let index = slots.iter().position(|(wanted, _)| wanted == id)?;
        let (_, answer) = slots.remove(index)?;
        if answer.is_none() {
            self.waiting.fetch_sub(1, Ordering::Release);
        }
        answer
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A stdio server's stdout, passed through unchanged, with each line shown
/// to [`RawAnswers::offer`] while an answer is awaited, and to
/// [`MalformedLines::check`] if given.
pub struct TapReader<R> {
    inner: R,
    raw: Arc<RawAnswers>,
    malformed: Option<super::malformed::MalformedLines>,
    line: Vec<u8>,
    /// The current line started while nothing was awaited and nothing
    /// checks lines (or grew too long): skip to its end.
    skipping: bool,
    /// The current line, grown past [`MAX_LINE`] while lines are checked:
    /// scanned for the id of the answer it may be.
    overlong: Option<super::overlong_line::OverlongLine>,
    /// The current line started while an answer was awaited.
    for_raw: bool,
}

impl<R> TapReader<R> {
    pub fn new(inner: R, raw: Arc<RawAnswers>) -> Self {
        Self {
            inner,
            raw,
            malformed: None,
            line: Vec::new(),
            skipping: false,
            overlong: None,
            for_raw: false,
        }
    }

    /// Also shows every line to `malformed`.
    pub fn checking(mut self, malformed: super::malformed::MalformedLines) -> Self {
        self.malformed = Some(malformed);
        self
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|byte| *byte == b'\n');
            let (chunk, rest) = match end {
                Some(end) => (&bytes[..end], &bytes[end + 1..]),
                None => (bytes, &[][..]),
            };
            if self.line.is_empty() && !self.skipping {
                self.for_raw = self.raw.is_waiting();
                self.skipping = !self.for_raw && self.malformed.is_none();
            }
            if let Some(overlong) = &mut self.overlong {
                overlong.feed(chunk);
            } else if !self.skipping {
                // rmcp counts the `\n` in: a line of `MAX_LINE` bytes is
                // one too many.
                if self.line.len() + chunk.len() >= MAX_LINE {
                    if self.malformed.is_some() {
                        let mut overlong = super::overlong_line::OverlongLine::default();
                        overlong.feed(&self.line);
                        overlong.feed(chunk);
                        self.overlong = Some(overlong);
                    }
                    self.line = Vec::new();
                    self.skipping = true;
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            if end.is_some() {
                if let (Some(overlong), Some(malformed)) = (self.overlong.take(), &self.malformed) {
                    malformed.too_long(&overlong, MAX_LINE);
                }
                if !self.skipping {
                    if self.for_raw {
                        self.raw.offer(&self.line);
                    }
                    if let Some(malformed) = &self.malformed {
                        malformed.check(&self.line);
                    }
                }
                // A buffer grown by a long line goes with it: each stdio
                // upstream (one per client on a per-session mount) would
                // keep its largest line's size for good.
                if self.line.capacity() > LINE_KEPT {
                    self.line = Vec::new();
                } else {
                    self.line.clear();
                }
                self.skipping = false;
            }
            bytes = rest;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TapReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            this.observe(&buf.filled()[before..]);
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;
    use tokio::io::AsyncReadExt;

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    #[test]
    fn keeps_only_answers_to_marked_requests() {
        let raw = RawAnswers::default();
        raw.offer(br#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#);
        raw.want(&id(2));
        raw.offer(br#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#);
        raw.offer(br#"{"jsonrpc":"2.0","id":2,"result":{"task":{"ttl":5}}}"#);
        assert!(!raw.is_waiting());
        assert_eq!(raw.take(&id(1)), None);
        assert_eq!(
            raw.take(&id(2)),
            Some(serde_json::json!({"task": {"ttl": 5}}))
        );
        assert_eq!(raw.take(&id(2)), None, "taken once");
    }

    #[test]
    fn an_error_answer_is_not_a_result() {
        let raw = RawAnswers::default();
        raw.want(&id(7));
        raw.offer(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}"#);
        assert_eq!(raw.take(&id(7)), None);
        assert!(!raw.is_waiting(), "take forgets an unanswered mark");
    }

    #[test]
    fn marks_are_bounded() {
        let raw = RawAnswers::default();
        for n in 0..(KEPT as i64 + 10) {
            raw.want(&id(n));
        }
        assert_eq!(lock(&raw.slots).len(), KEPT);
        assert!(!raw.is_wanted(&id(0)), "the oldest marks are dropped");
        assert!(raw.is_wanted(&id(KEPT as i64 + 9)));
    }

    #[tokio::test]
    async fn the_tap_passes_bytes_through_and_sees_split_lines() {
        let raw = Arc::new(RawAnswers::default());
        raw.want(&id(3));
        let wire = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[{\"name\":\"t\",\"execution\":{\"taskSupport\":\"required\"}}]}}\n";
        // A reader that hands out a few bytes at a time splits lines.
        let (mut writer, reader) = tokio::io::duplex(7);
        let feed = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            writer.write_all(wire).await.unwrap();
        });
        let mut tap = TapReader::new(reader, raw.clone());
        let mut out = Vec::new();
        tap.read_to_end(&mut out).await.unwrap();
        feed.await.unwrap();
        assert_eq!(out, wire.to_vec());
        let answer = raw.take(&id(3)).expect("the answer was seen");
        assert_eq!(answer["tools"][0]["execution"]["taskSupport"], "required");
    }

    /// rmcp drops a line whose content is `MAX_LINE` bytes or more (it
    /// counts the `\n`); such a line that answers a request is reported,
    /// however it arrives.
    #[test]
    fn a_line_of_exactly_the_limit_is_reported() {
        let (sender, mut answers) = tokio::sync::mpsc::channel(4);
        let mount = crate::naming::MountName::new("m").unwrap();
        let malformed = super::super::malformed::MalformedLines::new(mount, sender);
        let mut tap =
            TapReader::new(tokio::io::empty(), Arc::new(RawAnswers::default())).checking(malformed);
        let head = br#"{"jsonrpc":"2.0","id":9,"result":{"t":""#;
        let tail = br#""}}"#;
        let mut line = head.to_vec();
        line.resize(MAX_LINE - tail.len(), b'x');
        line.extend_from_slice(tail);
        assert_eq!(line.len(), MAX_LINE);
        line.push(b'\n');
        for piece in line.chunks(64 * 1024) {
            tap.observe(piece);
        }
        assert!(answers.try_recv().is_ok(), "no error was injected");
    }
}
