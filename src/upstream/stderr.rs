//! A stdio upstream's stderr, into the gateway's log line by line.
//!
//! The pipe is read for as long as the child holds it open, whatever it
//! writes: a child whose stderr stops being read blocks or dies (SIGPIPE,
//! an exception) at its next write, so one bad line must not end the
//! reading. Lines are cut at [`LINE_MAX`] bytes (a progress bar redrawn
//! with `\r`, a binary dump: a line never ends, and buffering it whole
//! would grow without bound) and decoded lossily (a file name in Latin-1
//! is not a reason to stop). At most [`LINES_PER_SECOND`] lines of one
//! child are logged each second, the rest counted and the count logged:
//! a child writing to stderr in a loop cost the gateway a core and filled
//! its log (100 MB in seconds), the same for every mount on a shared
//! machine.

use std::time::Duration;

use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    time::Instant,
};

use crate::naming::MountName;

/// The longest stderr line logged; the rest of a longer one is dropped.
pub const LINE_MAX: usize = 8 * 1024;

/// The most lines of one child's stderr logged in a second.
const LINES_PER_SECOND: u32 = 100;

/// Logs each line `stderr` carries, under `mount`, until it closes.
pub async fn log_lines<R: AsyncRead + Unpin>(stderr: R, mount: MountName) {
    let mut reader = BufReader::new(stderr);
    let mut lines = LineCutter::default();
    let mut budget = Budget::new(Instant::now());
    let log = |budget: &mut Budget, line: Line<'_>| {
        let (logged, not_logged) = budget.admit(Instant::now());
        if let Some(count) = not_logged {
            tell_not_logged(&mount, count);
        }
        if logged {
            let line = line.text();
            tracing::info!(target: "junction::upstream_stderr", mount = %mount, "{line}");
        }
    };
    loop {
        // Lines not logged are told once their second is over, though
        // the child then says nothing more.
        let untold = budget.has_untold().then(|| budget.window_ends());
        let chunk = tokio::select! {
            chunk = reader.fill_buf() => chunk,
            () = tokio::time::sleep_until(untold.unwrap_or_else(Instant::now)), if untold.is_some() => {
                if let Some(count) = budget.not_logged() {
                    tell_not_logged(&mount, count);
                }
                continue;
            }
        };
        let chunk = match chunk {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let read = chunk.len();
        lines.feed(chunk, |line| log(&mut budget, line));
        reader.consume(read);
    }
    lines.finish(|line| log(&mut budget, line));
    if let Some(count) = budget.not_logged() {
        tell_not_logged(&mount, count);
    }
}

fn tell_not_logged(mount: &MountName, count: u64) {
    tracing::warn!(target: "junction::upstream_stderr", mount = %mount, not_logged = count, "{count} more lines of the upstream's stderr not logged (more than {LINES_PER_SECOND} a second)");
}

/// How many lines of one child are logged, in windows of a second.
struct Budget {
    window_started: Instant,
    logged: u32,
    /// Lines not logged since the count was last told.
    not_logged: u64,
}

impl Budget {
    fn new(now: Instant) -> Self {
        Self {
            window_started: now,
            logged: 0,
            not_logged: 0,
        }
    }

    /// Whether a line arriving `now` is logged, and the count of lines
    /// not logged in the windows before, to tell once a new one starts.
    fn admit(&mut self, now: Instant) -> (bool, Option<u64>) {
        let mut told = None;
        if now.duration_since(self.window_started) >= Duration::from_secs(1) {
            self.window_started = now;
            self.logged = 0;
            told = self.not_logged();
        }
        if self.logged < LINES_PER_SECOND {
            self.logged += 1;
            (true, told)
        } else {
            self.not_logged += 1;
            (false, told)
        }
    }

    /// Whether lines were not logged, and not told of yet.
    fn has_untold(&self) -> bool {
        self.not_logged > 0
    }

    /// When the current second is over.
    fn window_ends(&self) -> Instant {
        self.window_started + Duration::from_secs(1)
    }

    /// The count of lines not logged, if any, now told.
    fn not_logged(&mut self) -> Option<u64> {
        (self.not_logged > 0).then(|| std::mem::take(&mut self.not_logged))
    }
}

/// Splits bytes into lines of at most [`LINE_MAX`] bytes.
#[derive(Default)]
struct LineCutter {
    line: Vec<u8>,
    /// Bytes of the current line dropped past [`LINE_MAX`].
    dropped: usize,
}

/// One line as cut, made text only if it is logged (a flood's lines are
/// mostly counted, not logged).
struct Line<'a> {
    bytes: &'a [u8],
    dropped: usize,
}

impl Line<'_> {
    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(self.bytes).into_owned();
        if text.ends_with('\r') {
            text.pop();
        }
        if self.dropped > 0 {
            text.push_str(&format!(" … ({} more bytes not logged)", self.dropped));
        }
        text
    }
}

impl LineCutter {
    fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(Line<'_>)) {
        while !bytes.is_empty() {
            let (part, ended) = match memchr::memchr(b'\n', bytes) {
                Some(at) => (&bytes[..at], true),
                None => (bytes, false),
            };
            bytes = &bytes[part.len() + usize::from(ended)..];
            if !ended {
                self.keep(part);
            } else if self.line.is_empty() && self.dropped == 0 && part.len() <= LINE_MAX {
                // A whole line in this chunk (nearly every one): not copied.
                emit(Line {
                    bytes: part,
                    dropped: 0,
                });
            } else {
                self.keep(part);
                emit(self.current());
                self.line.clear();
                self.dropped = 0;
            }
        }
    }

    /// Keeps what fits of `part` of the current line.
    fn keep(&mut self, part: &[u8]) {
        let room = LINE_MAX.saturating_sub(self.line.len());
        let kept = part.len().min(room);
        self.line.extend_from_slice(&part[..kept]);
        self.dropped += part.len() - kept;
    }

    fn current(&self) -> Line<'_> {
        Line {
            bytes: &self.line,
            dropped: self.dropped,
        }
    }

    /// The last line, if the stream ended without a newline.
    fn finish(&mut self, emit: impl FnOnce(Line<'_>)) {
        if !self.line.is_empty() || self.dropped > 0 {
            emit(self.current());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> Vec<String> {
        let mut cutter = LineCutter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            cutter.feed(chunk, |line| out.push(line.text()));
        }
        cutter.finish(|line| out.push(line.text()));
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
    fn a_flood_is_logged_a_second_at_a_time_and_the_rest_counted() {
        let start = Instant::now();
        let mut budget = Budget::new(start);
        let admitted = (0..LINES_PER_SECOND + 50)
            .filter(|_| budget.admit(start).0)
            .count();
        assert_eq!(admitted, LINES_PER_SECOND as usize);
        // The next second: logged again, and told how many were not.
        let later = start + Duration::from_millis(1500);
        assert_eq!(budget.admit(later), (true, Some(50)));
        assert_eq!(budget.admit(later), (true, None));
        assert_eq!(budget.not_logged(), None);
    }

    /// A child that floods stderr and then falls silent, pipe open: the
    /// count of lines not logged is told once their second is over, not
    /// left until the child writes again or exits.
    #[tokio::test(start_paused = true)]
    async fn a_flood_that_stops_is_told_once_its_second_is_over() {
        use tokio::io::AsyncWriteExt;
        let (written, _captured) = crate::telemetry::captured_log::capture();
        let (mut child, gateway_end) = tokio::io::duplex(1 << 20);
        let reading = log_lines(gateway_end, MountName::new("m").unwrap());
        let flooding = async {
            let flood = "line\n".repeat(LINES_PER_SECOND as usize + 50);
            child.write_all(flood.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let told = written.text();
            drop(child);
            told
        };
        let ((), told) = tokio::join!(reading, flooding);
        assert!(told.contains("50 more lines"), "{told}");
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_end_the_reading() {
        assert_eq!(lines(&[b"caf\xe9\n", b"ok\n"]), ["caf\u{fffd}", "ok"]);
    }
}
