//! The text log's field formatter: `name=value` pairs exactly as
//! tracing-subscriber's `DefaultFields` writes them without ANSI colours,
//! at a fraction of the cost.
//!
//! The fmt layer formats a span's fields when the span is created (and
//! again for each `record`), whether or not a line is ever logged inside
//! it: the log keeps its request spans at every level, so each request
//! pays for it. `DefaultFields` paints every field name and every `=`
//! through `nu_ansi_term` even with ANSI off (an empty style, formatted
//! through `core::fmt` all the same): callgrind put that at ~3% of a
//! proxied call's instructions, more than the values themselves (writing
//! them as below took 2% off a call). Here a
//! plain field is written as its name, `=` and its value's `Debug`,
//! which is what `DefaultFields` writes when the styles are empty.
//!
//! The fields are written into a scratch buffer kept per thread and go to
//! the writer in one piece: the span's field string then grows once
//! instead of at each field (its reallocations were ~1% of a call), and a
//! plain string value (printable ASCII, nothing to escape) is quoted as it
//! is rather than run through `str`'s `Debug`, character by character; the
//! bytes are the same.
//!
//! What this does not write itself it hands to `DefaultVisitor`, so that
//! those cases stay tracing-subscriber's own: the `message` field (which it
//! escapes against terminal injection), errors (with their `sources`
//! list), raw identifiers (`r#type`), and any writer with ANSI colours on.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::{
    field::{MakeVisitor, VisitFmt, VisitOutput},
    fmt::format::{DefaultVisitor, Writer},
};

/// Formats fields as `DefaultFields` does with ANSI off (module doc).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PlainFields;

impl<'a> MakeVisitor<Writer<'a>> for PlainFields {
    type Visitor = PlainVisitor<'a>;

    fn make_visitor(&self, writer: Writer<'a>) -> PlainVisitor<'a> {
        PlainVisitor {
            writer,
            pending: scratch::take(),
            is_empty: true,
            result: Ok(()),
        }
    }
}

/// Writes one set of fields, space-separated.
pub(crate) struct PlainVisitor<'a> {
    writer: Writer<'a>,
    /// What is written but not yet passed to `writer` (module doc).
    pending: String,
    /// Nothing written yet: the next field needs no separating space.
    is_empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Whether this field is written by tracing-subscriber's own visitor.
    fn is_special(&self, name: &str) -> bool {
        name == "message" || name.starts_with("r#") || self.writer.has_ansi_escapes()
    }

    /// Lets `DefaultVisitor` write one field, after what is written so far.
    fn delegate(&mut self, visit: impl FnOnce(&mut DefaultVisitor<'_>)) {
        self.flush();
        if self.result.is_err() {
            return;
        }
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        visit(&mut default);
        self.result = default.finish();
        self.is_empty = false;
    }

    /// Passes what is pending to the writer.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            if self.result.is_ok() {
                self.result = self.writer.write_str(&self.pending);
            }
            self.pending.clear();
        }
    }

    /// The separator before a field: none before the first.
    fn separator(&mut self) -> &'static str {
        if std::mem::take(&mut self.is_empty) {
            ""
        } else {
            " "
        }
    }
}

impl Drop for PlainVisitor<'_> {
    fn drop(&mut self) {
        self.flush();
        scratch::give_back(std::mem::take(&mut self.pending));
    }
}

/// Whether `str`'s `Debug` writes `value` as it is between quotes:
/// printable ASCII with no quote or backslash to escape.
fn quotes_as_it_is(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| matches!(byte, b' '..=b'~') && byte != b'"' && byte != b'\\')
}

/// One scratch buffer per thread for [`PlainVisitor`]: a visitor takes it
/// and gives it back, so formatting fields allocates nothing of its own
/// once the thread has formatted one set. A visitor made while another is
/// open on the thread (a value whose `Debug` logs) gets a new one.
mod scratch {
    use std::cell::Cell;

    /// A buffer grown past this is not kept: one odd field's size should
    /// not stay with the thread.
    const KEPT_CAPACITY: usize = 4096;

    thread_local! {
        static SCRATCH: Cell<String> = const { Cell::new(String::new()) };
    }

    pub(super) fn take() -> String {
        SCRATCH.try_with(Cell::take).unwrap_or_default()
    }

    pub(super) fn give_back(mut buffer: String) {
        if buffer.capacity() > KEPT_CAPACITY {
            return;
        }
        buffer.clear();
        let _ = SCRATCH.try_with(|scratch| scratch.set(buffer));
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        if self.is_special(name) {
            self.delegate(|default| default.record_str(field, value));
        } else if quotes_as_it_is(value) {
            let separator = self.separator();
            for piece in [separator, name, "=\"", value, "\""] {
                self.pending.push_str(piece);
            }
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_err() {
            return;
        }
        self.delegate(|default| default.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        if self.is_special(name) {
            self.delegate(|default| default.record_debug(field, value));
            return;
        }
        let separator = self.separator();
        self.pending.push_str(separator);
        self.pending.push_str(name);
        self.pending.push('=');
        use fmt::Write as _;
        if write!(self.pending, "{value:?}").is_err() {
            self.result = Err(fmt::Error);
        }
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(mut self) -> fmt::Result {
        self.flush();
        self.result
    }
}

impl VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        // Whoever writes here next writes after what is pending.
        self.flush();
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::format::DefaultFields;

    use super::*;

    /// An error with a cause, for the `sources` list.
    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer failed")
        }
    }
    impl fmt::Display for Inner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("inner \u{1b}[31mred")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    /// What a subscriber with `fields` as its field formatter logs for the
    /// same spans, records and events, ANSI on or off.
    fn logged<N>(fields: N, ansi: bool) -> String
    where
        N: for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static,
    {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || WriteTo(writer.clone()))
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(ansi)
            .without_time()
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let error = Outer(Inner);
            let span = tracing::info_span!(
                "mcp.request",
                mcp.method.name = "tools/call",
                jsonrpc.request.id = %7,
                r#type = "raw",
                quoted = "a \"b\"\n\u{1b}c",
                plain = "it's ~ plain",
                empty = "",
                backslash = "a\\b",
                tab = "a\tb",
                accented = "café ✓",
                count = 3u64,
                negative = -4i64,
                flag = true,
                ratio = 0.5f64,
                later = tracing::field::Empty,
                debugged = ?Some("x"),
            );
            span.record("later", "set \u{7f}");
            let _entered = span.enter();
            tracing::warn!(
                error = &error as &(dyn std::error::Error + 'static),
                tool = "echo",
                "message with \u{1b}[2J escape and {}",
                "args"
            );
            tracing::info!(message = "just a message");
            tracing::info!(only = 1u8);
        });
        let bytes = buffer.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct WriteTo(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for WriteTo {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_what_the_default_formatter_writes() {
        for ansi in [false, true] {
            let default = logged(DefaultFields::new(), ansi);
            let plain = logged(PlainFields, ansi);
            assert_eq!(plain, default, "ansi {ansi}");
        }
        let plain = logged(PlainFields, false);
        // The comparison above is only worth something if the lines hold
        // every kind of field.
        for expected in [
            "mcp.method.name=\"tools/call\" jsonrpc.request.id=7 type=\"raw\"",
            "quoted=\"a \\\"b\\\"\\n\\u{1b}c\" plain=\"it's ~ plain\" empty=\"\"",
            "backslash=\"a\\\\b\" tab=\"a\\tb\" accented=\"café ✓\" count=3 negative=-4 flag=true ratio=0.5",
            "debugged=Some(\"x\") later=\"set \\u{7f}\"",
            "error=outer failed error.sources=[inner \\x1b[31mred] tool=\"echo\"",
            "message with \\x1b[2J escape and args",
            "just a message",
            "only=1",
        ] {
            assert!(plain.contains(expected), "{expected} in {plain}");
        }
    }
}
