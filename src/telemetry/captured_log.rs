//! For unit tests: what the gateway logs, as its fmt layer writes it,
//! captured while a guard is held, so that a test can check a line that is
//! the only outward sign of what it tests (a loss reported, a count told).

use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// The log lines written since [`capture`].
#[derive(Clone, Default)]
pub(crate) struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures what this thread logs (every level) until the guard drops.
pub(crate) fn capture() -> (CapturedLog, DefaultGuard) {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .fmt_fields(super::plain_fields::PlainFields)
        .finish();
    (log, tracing::subscriber::set_default(subscriber))
}
