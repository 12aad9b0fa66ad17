//! A log line said at most once per interval, with how many times it was
//! not said meanwhile: for failures that can come once per request (a
//! failing upstream under load would write a line per call).

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

/// When a line was last said, and how many were held back since.
#[derive(Debug, Default)]
pub struct SaidAtMost {
    last: Mutex<Option<Instant>>,
    held_back: AtomicU64,
}

impl SaidAtMost {
    /// Whether the line is due now (`every` since the last one said):
    /// `Some(n)`, `n` the lines held back since, which the caller says
    /// with it; else `None`, and this one is counted as held back.
    pub fn due(&self, every: Duration) -> Option<u64> {
        let now = Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_some_and(|said| now.duration_since(said) < every) {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.held_back.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_once_per_interval_with_the_count_held_back() {
        let said = SaidAtMost::default();
        assert_eq!(said.due(Duration::from_secs(3600)), Some(0));
        assert_eq!(said.due(Duration::from_secs(3600)), None);
        assert_eq!(said.due(Duration::from_secs(3600)), None);
        assert_eq!(said.due(Duration::ZERO), Some(2));
        assert_eq!(said.due(Duration::ZERO), Some(0));
    }
}
