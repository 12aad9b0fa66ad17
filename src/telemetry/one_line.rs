//! The text log's writer: one event, one line. An event's fields may hold
//! text a client or an upstream chose (a tool name, an upstream's error
//! body); written as is, a line break in it starts what reads as another
//! log line (`…Z ERROR junction: …`), forged, and an escape sequence
//! drives the terminal showing the log. The JSON log escapes both; here
//! control characters inside an event are written out (`\n`, `\r`,
//! `\u{1b}`…). tracing's formatter writes each event in one `write_all`, so
//! the line break that ends it is the last byte of what is written.

use std::{borrow::Cow, io::Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`OneLine`] writers to stderr.
pub struct OneLineStderr;

impl<'a> MakeWriter<'a> for OneLineStderr {
    type Writer = OneLine;

    fn make_writer(&'a self) -> OneLine {
        OneLine
    }
}

/// Writes each event to stderr as one line (see the module doc).
pub struct OneLine;

impl Write for OneLine {
    fn write(&mut self, event: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&one_line(event))?;
        Ok(event.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `event` with every control character but tabs and its final line
/// break written out (`\n`, `\r`, `\u{1b}`…), and the Unicode line and
/// paragraph separators too, which some readers also take for line breaks.
fn one_line(event: &[u8]) -> Cow<'_, [u8]> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    let Ok(text) = std::str::from_utf8(body) else {
        // tracing writes text; anything else, byte by byte.
        let mut line = Vec::with_capacity(event.len() + 16);
        for &byte in body {
            match byte {
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                byte if (byte < 0x20 && byte != b'\t') || byte == 0x7f => {
                    line.extend_from_slice(format!("\\u{{{byte:x}}}").as_bytes())
                }
                byte => line.push(byte),
            }
        }
        if body.len() < event.len() {
            line.push(b'\n');
        }
        return Cow::Owned(line);
    };
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(event);
    }
    let mut line = String::with_capacity(event.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            c if needs_escape(c) => line.push_str(&c.escape_unicode().to_string()),
            c => line.push(c),
        }
    }
    if body.len() < event.len() {
        line.push('\n');
    }
    Cow::Owned(line.into_bytes())
}

/// Whether `c` may not appear as itself in a log line: a control character
/// (C0 but tab, DEL, C1: line breaks, backspaces, terminal escapes) or a
/// Unicode line or paragraph separator.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line() {
        let plain = "2026-12-02T00:00:00Z  INFO junction: fine\ttabbed, ünïcode\n";
        assert!(matches!(one_line(plain.as_bytes()), Cow::Borrowed(_)));
        let forged =
            "WARN junction: tool=x\n2026-12-02T00:00:00Z ERROR junction: FORGED\r\u{1b}[2J\n";
        assert_eq!(
            String::from_utf8_lossy(&one_line(forged.as_bytes())),
            "WARN junction: tool=x\\n2026-12-02T00:00:00Z ERROR junction: FORGED\\r\\u{1b}[2J\n"
        );
        let hidden = "x\u{8}\u{8}HIDDEN\u{b}\u{c}\u{2028}\u{85}\u{9b}2J\u{7}\u{7f}";
        assert_eq!(
            String::from_utf8_lossy(&one_line(hidden.as_bytes())),
            "x\\u{8}\\u{8}HIDDEN\\u{b}\\u{c}\\u{2028}\\u{85}\\u{9b}2J\\u{7}\\u{7f}"
        );
        assert_eq!(&*one_line(b"no end\nbreak"), &b"no end\\nbreak"[..]);
        // Not UTF-8 (tracing writes text; still one line).
        assert_eq!(
            &*one_line(b"\xff\nFORGED\x1b\n"),
            &b"\xff\\nFORGED\\u{1b}\n"[..]
        );
    }
}
