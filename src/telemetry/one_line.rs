//! The text log's writer: one event, one line. An event's fields may hold
//! text a client or an upstream chose (a tool name, an upstream's error
//! body); written as is, a line break in it starts what reads as another
//! log line (`…Z ERROR junction: …`), forged, and an escape sequence
//! drives the terminal showing the log. The JSON log escapes both; here
//! line breaks and escapes inside an event are written as `\n`, `\r` and
//! `\x1b`. tracing's formatter writes each event in one `write_all`, so
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

/// `event` with every line break and escape but its final line break
/// written out.
fn one_line(event: &[u8]) -> Cow<'_, [u8]> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    if !body.iter().any(|byte| matches!(byte, b'\n' | b'\r' | 0x1b)) {
        return Cow::Borrowed(event);
    }
    let mut line = Vec::with_capacity(event.len() + 16);
    for &byte in body {
        match byte {
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            0x1b => line.extend_from_slice(b"\\x1b"),
            byte => line.push(byte),
        }
    }
    if body.len() < event.len() {
        line.push(b'\n');
    }
    Cow::Owned(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line() {
        let plain = b"2026-12-02T00:00:00Z  INFO junction: fine\n";
        assert!(matches!(one_line(plain), Cow::Borrowed(_)));
        let forged =
            b"WARN junction: tool=x\n2026-12-02T00:00:00Z ERROR junction: FORGED\r\x1b[2J\n";
        assert_eq!(
            &*one_line(forged),
            &b"WARN junction: tool=x\\n2026-12-02T00:00:00Z ERROR junction: FORGED\\r\\x1b[2J\n"[..]
        );
        assert_eq!(&*one_line(b"no end\nbreak"), &b"no end\\nbreak"[..]);
    }
}
