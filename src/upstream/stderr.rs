//! A stdio upstream's stderr, into the gateway's log line by line.
//!
//! The pipe is read for as long as the child holds it open, whatever it
//! writes: a child whose stderr stops being read blocks or dies (SIGPIPE,
//! an exception) at its next write, so one bad line must not end the
//! reading. Lines are cut at [`LINE_MAX`] bytes (a progress bar redrawn
//! with `\r`, a binary dump: a line never ends, and buffering it whole
//! would grow without bound) and decoded lossily (a file name in Latin-1
//! is not a reason to stop).

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::naming::MountName;

/// The longest stderr line logged; the rest of a longer one is dropped.
pub const LINE_MAX: usize = 8 * 1024;

/// Logs each line `stderr` carries, under `mount`, until it closes.
pub async fn log_lines<R: AsyncRead + Unpin>(stderr: R, mount: MountName) {
    let mut reader = BufReader::new(stderr);
    let mut lines = LineCutter::default();
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let read = chunk.len();
        lines.feed(chunk, |line| {
            tracing::info!(target: "junction::upstream_stderr", mount = %mount, "{line}");
        });
        reader.consume(read);
    }
    lines.finish(|line| {
        tracing::info!(target: "junction::upstream_stderr", mount = %mount, "{line}");
    });
}

/// Splits bytes into lines of at most [`LINE_MAX`] bytes.
#[derive(Default)]
struct LineCutter {
    line: Vec<u8>,
    /// Bytes of the current line dropped past [`LINE_MAX`].
    dropped: usize,
}

impl LineCutter {
    fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(String)) {
        while !bytes.is_empty() {
            let (part, ended) = match bytes.iter().position(|&b| b == b'\n') {
                Some(at) => (&bytes[..at], true),
                None => (bytes, false),
            };
            let room = LINE_MAX.saturating_sub(self.line.len());
            let kept = part.len().min(room);
            self.line.extend_from_slice(&part[..kept]);
            self.dropped += part.len() - kept;
            bytes = &bytes[part.len() + usize::from(ended)..];
            if ended {
                emit(self.take());
            }
        }
    }

    /// The last line, if the stream ended without a newline.
    fn finish(&mut self, emit: impl FnOnce(String)) {
        if !self.line.is_empty() || self.dropped > 0 {
            emit(self.take());
        }
    }

    fn take(&mut self) -> String {
        let mut text = String::from_utf8_lossy(&self.line).into_owned();
        if text.ends_with('\r') {
            text.pop();
        }
        if self.dropped > 0 {
            text.push_str(&format!(" … ({} more bytes not logged)", self.dropped));
        }
        self.line.clear();
        self.dropped = 0;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> Vec<String> {
        let mut cutter = LineCutter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            cutter.feed(chunk, |line| out.push(line));
        }
        cutter.finish(|line| out.push(line));
        out
    }

    #[test]
    fn lines_are_split_across_chunks_and_kept_whole() {
        assert_eq!(
            lines(&[b"one\ntw", b"o\r\n", b"\nthree"]),
            ["one", "two", "", "three"]
        );
        assert_eq!(lines(&[]), Vec::<String>::new());
    }

    #[test]
    fn a_long_line_is_cut_and_says_how_much_went() {
        let long = vec![b'x'; LINE_MAX + 10];
        let logged = lines(&[&long, &long, b"\nnext\n"]);
        assert_eq!(logged.len(), 2);
        assert!(logged[0].starts_with(&"x".repeat(LINE_MAX)));
        assert!(logged[0].ends_with(&format!("({} more bytes not logged)", LINE_MAX + 20)));
        assert_eq!(logged[1], "next");
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_end_the_reading() {
        assert_eq!(lines(&[b"caf\xe9\n", b"ok\n"]), ["caf\u{fffd}", "ok"]);
    }
}
