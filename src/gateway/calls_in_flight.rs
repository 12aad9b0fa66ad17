//! The requests in flight on one mount, so that a reload that removes or
//! replaces the mount lets them finish before it closes the mount's
//! upstreams (for at most `server.shutdown_grace`): closing at once failed
//! calls whose work the upstream completed, and told their clients to run
//! it again.
//!
//! A request counts from just before it is sent upstream until its answer
//! is taken ([`CallInFlight`] drops). Once a reload has *replaced* the
//! mount (swapped in the mount list without it), a request not counted
//! yet goes to the mount serving the name now instead. [`CallsInFlight::start`]
//! counts, then reads the mark; [`CallsInFlight::replaced_let_finish`]
//! marks, then reads the count; a fence between each pair makes one see
//! the other: either the request goes elsewhere or the reload waits for it.

use std::{
    sync::{
        atomic::{fence, AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::sync::Notify;

use crate::wait_for_zero::{count_down, wait_for_zero};

/// See the module doc.
#[derive(Default)]
pub struct CallsInFlight {
    count: AtomicUsize,
    none_left: Notify,
    replaced: AtomicBool,
}

/// One request counted in flight on its mount until dropped.
pub struct CallInFlight(Arc<CallsInFlight>);

impl Drop for CallInFlight {
    fn drop(&mut self) {
        count_down(&self.0.count, &self.0.none_left);
    }
}

impl CallsInFlight {
    /// Counts a request about to be sent on this mount; `None` once the
    /// mount was replaced (the request belongs with its successor).
    pub fn start(self: &Arc<Self>) -> Option<CallInFlight> {
        self.count.fetch_add(1, Ordering::SeqCst);
        let call = CallInFlight(self.clone());
        fence(Ordering::SeqCst);
        (!self.replaced.load(Ordering::SeqCst)).then_some(call)
    }

    /// Whether a reload replaced the mount.
    pub fn is_replaced(&self) -> bool {
        self.replaced.load(Ordering::Acquire)
    }

    /// Marks the mount replaced, then waits (at most `grace`) for the
    /// requests in flight on it to be answered. Returns how many were in
    /// flight when it began, and how many still are.
    pub async fn replaced_let_finish(&self, grace: Duration) -> (usize, usize) {
        self.replaced.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let pending = self.count.load(Ordering::SeqCst);
        if pending == 0 {
            return (0, 0);
        }
        wait_for_zero(&self.count, &self.none_left, grace).await;
        (pending, self.count.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_replaced_mount_waits_for_its_calls_and_takes_no_new_one() {
        let calls = Arc::new(CallsInFlight::default());
        let first = calls.start().expect("counted before the reload");
        let second = calls.start().expect("counted before the reload");
        let waiting = tokio::spawn({
            let calls = calls.clone();
            async move { calls.replaced_let_finish(Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        assert!(calls.is_replaced());
        assert!(calls.start().is_none(), "a new request goes elsewhere");
        drop(first);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "one call is still in flight");
        drop(second);
        assert_eq!(waiting.await.unwrap(), (2, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded() {
        let calls = Arc::new(CallsInFlight::default());
        let answered = calls.start().expect("counted");
        let _stuck = calls.start().expect("counted");
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let calls = calls.clone();
            async move { calls.replaced_let_finish(Duration::from_secs(3)).await }
        });
        tokio::task::yield_now().await;
        drop(answered);
        // Two when it began, one left when the grace ran out.
        assert_eq!(waiting.await.unwrap(), (2, 1));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test]
    async fn nothing_in_flight_means_no_wait() {
        let calls = Arc::new(CallsInFlight::default());
        drop(calls.start());
        assert_eq!(
            calls.replaced_let_finish(Duration::from_secs(3600)).await,
            (0, 0)
        );
    }
}
