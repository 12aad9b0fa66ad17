//! Waiting, bounded, for a count of things under way to drop to zero.
//!
//! The relay waits so for requests being sent, answers being recorded and
//! notifications being relayed; a retiring mount for its per-session
//! upstreams to close. Whoever lowers the count calls [`count_down`],
//! which wakes the `Notify` when the count reaches zero, the one change
//! the waiters wait for (not a lock taken on every decrement).

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use tokio::sync::Notify;

/// Lowers `count` by one, waking `changed`'s waiters if it is zero now.
/// Returns the count before.
pub fn count_down(count: &AtomicUsize, changed: &Notify) -> usize {
    let before = count.fetch_sub(1, Ordering::AcqRel);
    if before == 1 {
        changed.notify_waiters();
    }
    before
}

/// Waits until `count` is zero, woken by `changed`, for at most `limit`;
/// returns whether it got there.
pub async fn wait_for_zero(count: &AtomicUsize, changed: &Notify, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        // Registered before the check, so a change in between still wakes.
        let woken = changed.notified();
        if count.load(Ordering::Acquire) == 0 {
            return true;
        }
        if tokio::time::timeout_at(deadline, woken).await.is_err() {
            return false;
        }
    }
}
