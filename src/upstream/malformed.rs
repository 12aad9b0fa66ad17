//! A stdio server's line that is not JSON, answered rather than lost.
//!
//! rmcp skips a line it cannot parse, as the other SDKs do (answering
//! unparsable input could start an error storm). When that line was the
//! answer to one of the gateway's requests, the request waited for its
//! whole timeout (a minute by default) and failed as if the server were
//! silent, with nothing logged at the default level. The common cause is
//! a Python server writing `NaN` or `Infinity` (which `json.dumps` does by
//! default, and JSON has no way to write). So each line of the server's
//! stdout that is not JSON is logged (the first at `warn`, the rest at
//! `debug`: a server printing its own chatter to stdout must not flood the
//! log), and if it reads as an answer once those words are read as `null`,
//! its request is answered at once with an error that says what was wrong.
//!
//! A message rmcp refuses only for text that is not valid Unicode (half
//! of a UTF-16 surrogate pair, bytes that are not UTF-8) is relayed with
//! U+FFFD in place of the broken text instead (`unicode_repair.rs`).
//!
//! An answer nested too deep to read fails its request at once too
//! (`deep_nesting.rs`).
//!
//! Every line passes here, so the check is cheap for the lines that are
//! fine: one framed as a JSON object (or batch) without `NaN` or
//! `Infinity` anywhere, nor a surrogate escape, and valid UTF-8, is taken
//! as JSON unparsed (rmcp parses it); only the others are parsed.

use rmcp::model::ServerJsonRpcMessage;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::naming::MountName;

/// Where a stdio server's malformed answers are turned into errors.
pub struct MalformedLines {
    mount: MountName,
    /// Into the upstream session's transport, as if the server had sent it.
    answers: mpsc::Sender<ServerJsonRpcMessage>,
    /// Whether a line that is no answer has been logged at `warn` yet.
    warned: std::sync::atomic::AtomicBool,
    /// Whether a message with broken text has been logged at `warn` yet.
    warned_unicode: std::sync::atomic::AtomicBool,
    /// Where the lines come from, for the log: a child's stdout, or a
    /// legacy SSE server's event stream (one message per event).
    source: &'static str,
}

impl MalformedLines {
    pub fn new(mount: MountName, answers: mpsc::Sender<ServerJsonRpcMessage>) -> Self {
        Self {
            mount,
            answers,
            warned: Default::default(),
            warned_unicode: Default::default(),
            source: "stdout",
        }
    }

    /// The same, for the messages of a legacy SSE server's event stream.
    pub fn of_event_stream(mut self) -> Self {
        self.source = "its event stream";
        self
    }

    /// Looks at one line of the server's stdout (without its `\n`).
    pub fn check(&self, line: &[u8]) {
        let line = line.trim_ascii();
        if line.is_empty() {
            return;
        }
        let framed = matches!(
            (line.first(), line.last()),
            (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']'))
        );
        let non_finite = bare_word_in(line, b"NaN") || bare_word_in(line, b"Infinity");
        let broken_text = super::unicode_repair::may_need_repair(line);
        if framed && !non_finite && !broken_text {
            self.fail_if_too_deep(line);
            return;
        }
        if broken_text && self.relay_repaired(line) {
            return;
        }
        let error = match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            Ok(_) => return,
            Err(error) if error.is_syntax() || error.is_eof() => error,
            Err(_) => return,
        };
        let Some(id) = answered_id(line) else {
            if self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::debug!(mount = %self.mount, %error, "the upstream wrote a line that is not JSON; skipped");
            } else {
                tracing::warn!(mount = %self.mount, %error, "the upstream wrote a line that is not JSON on {}, where only MCP messages belong; skipped (further such lines are logged at debug)", self.source);
            }
            return;
        };
        tracing::warn!(mount = %self.mount, %error, %id, "the upstream answered with a line that is not JSON; its request fails");
        self.fail(id, format!("the upstream's answer is not valid JSON ({error}); JSON has no NaN or Infinity, which some servers write for numbers"));
    }

    /// A message rmcp drops for text that is not valid Unicode, relayed
    /// with U+FFFD in place of the broken text (`unicode_repair.rs`), as
    /// if the server had sent that. Whether there is nothing left to do:
    /// rmcp reads the line as it is, or it was relayed so, or, repaired,
    /// it nests too deep and its request was failed.
    fn relay_repaired(&self, line: &[u8]) -> bool {
        if serde_json::from_slice::<ServerJsonRpcMessage>(line).is_ok() {
            return true;
        }
        let Some(repaired) = super::unicode_repair::repaired(line) else {
            return false;
        };
        let message = match serde_json::from_str::<ServerJsonRpcMessage>(&repaired) {
            Ok(message) => message,
            // Repaired, it may still be unreadable for its depth.
            Err(_) => return self.fail_if_too_deep(repaired.as_bytes()),
        };
        // From a read of the server's stdout: never waits. A full channel
        // leaves the message lost, as it was before.
        let relayed = self.answers.try_send(message).is_ok();
        let first = !self
            .warned_unicode
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        match (relayed, first) {
            (true, true) => {
                tracing::warn!(mount = %self.mount, "the upstream wrote text that is not valid Unicode on {} (half of a UTF-16 surrogate pair, or bytes that are not UTF-8); relayed with U+FFFD in its place (further such messages are logged at debug)", self.source)
            }
            (true, false) => {
                tracing::debug!(mount = %self.mount, "the upstream wrote text that is not valid Unicode; relayed with U+FFFD in its place")
            }
            (false, _) => {
                tracing::warn!(mount = %self.mount, "the upstream wrote text that is not valid Unicode; lost, too many such messages at once")
            }
        }
        true
    }

    /// If `line` is an answer nested too deep to read
    /// (`deep_nesting.rs`), fails its request at once. Whether it did.
    fn fail_if_too_deep(&self, line: &[u8]) -> bool {
        let Some(id) = super::deep_nesting::too_deep_answer_id(line) else {
            return false;
        };
        tracing::warn!(mount = %self.mount, %id, "the upstream's answer nests deeper than the gateway can read; its request fails");
        self.fail(
            id,
            "the upstream's answer nests objects and arrays 128 levels deep or more, deeper than the gateway reads".to_owned(),
        );
        true
    }

    /// A line over `limit` bytes, which rmcp drops unread: if it was an
    /// answer, its request fails at once, saying why.
    pub fn too_long(&self, line: &super::overlong_line::OverlongLine, limit: usize) {
        let Some(id) = line.answered_id() else {
            tracing::warn!(mount = %self.mount, limit, "the upstream wrote a line on {} longer than the most one may be; skipped", self.source);
            return;
        };
        tracing::warn!(mount = %self.mount, %id, limit, "the upstream's answer is longer than the most a line may be; its request fails");
        self.fail(
            id,
            format!(
                "the upstream's answer is larger than {limit} bytes, the most a message may be"
            ),
        );
    }

    /// Answers request `id` with the gateway's error saying `why`
    /// ([`super::unreadable_answer`]), as if the server had.
    fn fail(&self, id: Value, why: String) {
        if let Some(answer) = super::unreadable_answer::unreadable_answer_to(id, why) {
            // From a read of the server's stdout: never waits. A full
            // channel leaves the request to its timeout, as before.
            let _ = self.answers.try_send(answer);
        }
    }
}

/// Whether `word` stands in `line` where a JSON value would (after `:`,
/// `,`, `[` or `-`, spaces aside): a base64 blob holds `NaN` every few
/// hundred kilobytes, and such a line need not be parsed again for it.
fn bare_word_in(line: &[u8], word: &[u8]) -> bool {
    memchr::memmem::find_iter(line, word).any(|at| {
        line[..at]
            .iter()
            .rev()
            .find(|byte| !byte.is_ascii_whitespace())
            .is_some_and(|before| matches!(before, b':' | b',' | b'[' | b'-'))
    })
}

/// The id of the answer `line` is, read with `NaN`, `Infinity` and
/// `-Infinity` outside strings taken as `null`.
fn answered_id(line: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(line).ok()?;
    let message: Value = serde_json::from_str(&non_finite_as_null(text)).ok()?;
    let is_answer = message.get("result").is_some() || message.get("error").is_some();
    let id = message.get("id")?;
    (is_answer && (id.is_string() || id.is_number())).then(|| id.clone())
}

/// `text` with the bare words `NaN`, `Infinity` and `-Infinity` (outside
/// strings) replaced by `null`.
fn non_finite_as_null(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            match c {
                '\\' => {
                    let escaped: String = rest.chars().take(2).collect();
                    out.push_str(&escaped);
                    rest = &rest[escaped.len()..];
                    continue;
                }
                '"' => in_string = false,
                _ => {}
            }
        } else {
            if c == '"' {
                in_string = true;
            }
            if let Some(word) = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|word| rest.starts_with(word))
            {
                out.push_str("null");
                rest = &rest[word.len()..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_word_where_a_value_would_stand_counts() {
        assert!(bare_word_in(br#"{"n": NaN}"#, b"NaN"));
        assert!(bare_word_in(br#"{"n":[1,-Infinity]}"#, b"Infinity"));
        assert!(!bare_word_in(br#"{"blob":"QmFNaNx"}"#, b"NaN"));
    }

    #[test]
    fn non_finite_numbers_outside_strings_read_as_null() {
        assert_eq!(
            non_finite_as_null(r#"{"a":NaN,"b":[Infinity,-Infinity],"c":"NaN \"Infinity\""}"#),
            r#"{"a":null,"b":[null,null],"c":"NaN \"Infinity\""}"#
        );
    }

    #[tokio::test]
    async fn a_line_with_broken_text_is_relayed_repaired_once() {
        let (answers, mut received) = mpsc::channel(4);
        let lines = MalformedLines::new(MountName::new("m").unwrap(), answers);
        // Text rmcp reads: an escaped backslash before `ud83d`, a pair.
        lines.check(br#"{"jsonrpc":"2.0","id":1,"result":{"path":"C:\\ud83d"}}"#);
        lines.check(br#"{"jsonrpc":"2.0","id":2,"result":{"t":"\ud83d\ude00"}}"#);
        assert!(
            received.try_recv().is_err(),
            "nothing rmcp reads is relayed again"
        );
        lines.check(br#"{"jsonrpc":"2.0","id":3,"result":{"t":"\ud83d cut"}}"#);
        let relayed = serde_json::to_value(received.try_recv().expect("relayed")).unwrap();
        assert_eq!(relayed["id"], 3);
        assert_eq!(relayed["result"]["t"], "\u{fffd} cut");
        assert!(received.try_recv().is_err(), "relayed once");
    }

    #[tokio::test]
    async fn an_answer_that_is_not_json_fails_its_request() {
        let (answers, mut received) = mpsc::channel(4);
        let lines = MalformedLines::new(MountName::new("m").unwrap(), answers);
        lines.check(br#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{"n":NaN}}}"#);
        let answer = serde_json::to_value(received.try_recv().expect("an answer")).unwrap();
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -32603);
        // Valid lines, blank lines, and lines that are no answer: nothing.
        lines.check(br#"{"jsonrpc":"2.0","id":8,"result":{}}"#);
        lines.check(br#"{"jsonrpc":"2.0","id":9,"result":{"text":"NaN or Infinity"}}"#);
        lines.check(b"  \r");
        lines.check(b"Server started on stdio");
        lines.check(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"n":NaN}}"#);
        assert!(received.try_recv().is_err());
    }
}
