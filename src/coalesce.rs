//! Coalesces bursts of the same piece of work, and lets a reader wait for
//! the work announced before it.
//!
//! Servers often announce several `list_changed` in a row (one per tool they
//! register). Re-reading the list once per announcement wastes upstream
//! calls and races itself; instead the first announcement runs the refresh
//! and any that arrive meanwhile make it run exactly once more.
//!
//! A list read after an announcement must not be answered from before it:
//! a client whose tool call added a resource lists the resources next, as
//! it would from the server itself, and must find it. So each key counts
//! its announcements and remembers how many of them the last finished pass
//! started after; [`Coalescer::settled`] waits (bounded) until those
//! cover every announcement made so far, and cuts short a pause a loop
//! takes between passes ([`Coalescer::pause`]): someone is waiting for it.

use std::{collections::HashMap, hash::Hash, sync::Arc, sync::Mutex, time::Duration};

use tokio::sync::Notify;

pub struct Coalescer<K> {
    /// Keys being worked on.
    running: Mutex<HashMap<K, Running>>,
    /// Woken when a pass ends or a key is free again.
    passed: Notify,
}

struct Running {
    /// Asked again since the pass started.
    again: bool,
    /// Announcements so far (`start` calls while running, and the first).
    announced: u64,
    /// The announcements the last finished pass started after: what it
    /// read is at least as new as they are.
    covered: u64,
    /// Wakes the loop's pause between passes.
    wanted: Arc<Notify>,
}

impl<K> Default for Coalescer<K> {
    fn default() -> Self {
        Self {
            running: Mutex::new(HashMap::new()),
            passed: Notify::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Coalescer<K> {
    /// Whether the caller should do the work for `key` now. `false` means a
    /// pass is already running; it has been told to run once more.
    pub fn start(&self, key: &K) -> bool {
        let mut running = self.lock();
        match running.get_mut(key) {
            Some(entry) => {
                entry.again = true;
                entry.announced += 1;
                false
            }
            None => {
                running.insert(
                    key.clone(),
                    Running {
                        again: false,
                        announced: 1,
                        covered: 0,
                        wanted: Arc::default(),
                    },
                );
                true
            }
        }
    }

    /// A pass for `key` starts: what it reads covers the announcements so
    /// far. Hand the result to [`Self::pass_ended`].
    pub fn pass_starts(&self, key: &K) -> u64 {
        self.lock().get(key).map_or(0, |entry| entry.announced)
    }

    /// The pass that [`Self::pass_starts`] began has ended, however it
    /// ended (a failed one too: nobody waits for it any longer).
    pub fn pass_ended(&self, key: &K, started: u64) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.covered = entry.covered.max(started);
        }
        self.passed.notify_waiters();
    }

    /// After a pass: whether to run another (someone asked meanwhile).
    /// When it returns `false` the key is free again.
    pub fn again(&self, key: &K) -> bool {
        let mut running = self.lock();
        match running.get_mut(key) {
            Some(entry) if entry.again => {
                entry.again = false;
                true
            }
            _ => {
                running.remove(key);
                drop(running);
                self.passed.notify_waiters();
                false
            }
        }
    }

    /// Waits `pause` between two passes of `key`, less if someone waits
    /// for the next one ([`Self::settled`]). The wait holds nothing of
    /// `self`.
    pub fn pause(&self, key: &K, pause: Duration) -> impl std::future::Future<Output = ()> {
        let wanted = self.lock().get(key).map(|entry| entry.wanted.clone());
        async move {
            if let Some(wanted) = wanted {
                let _ = tokio::time::timeout(pause, wanted.notified()).await;
            }
        }
    }

    /// Whether a key that `matches` has announcements no finished pass
    /// covers.
    pub fn behind(&self, matches: impl Fn(&K) -> bool) -> bool {
        self.lock()
            .iter()
            .any(|(key, entry)| entry.announced > entry.covered && matches(key))
    }

    /// Waits, until `deadline` at most, for the passes that cover every
    /// announcement made so far for the keys that `matches`; returns
    /// whether they came.
    pub async fn settled(
        &self,
        matches: impl Fn(&K) -> bool,
        deadline: tokio::time::Instant,
    ) -> bool {
        let waited_for: Vec<(K, u64)> = {
            let running = self.lock();
            running
                .iter()
                .filter(|(key, entry)| entry.announced > entry.covered && matches(key))
                .map(|(key, entry)| {
                    // A loop pausing between passes: the next is wanted now.
                    entry.wanted.notify_one();
                    (key.clone(), entry.announced)
                })
                .collect()
        };
        for (key, announced) in waited_for {
            loop {
                // Registered before the check, so a pass ending in between
                // still wakes it.
                let passed = self.passed.notified();
                let done = self
                    .lock()
                    .get(&key)
                    .is_none_or(|entry| entry.covered >= announced);
                if done {
                    break;
                }
                if tokio::time::timeout_at(deadline, passed).await.is_err() {
                    return false;
                }
            }
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_during_a_pass_runs_one_more_pass() {
        let work = Coalescer::default();
        assert!(work.start(&"tools"));
        // Three announcements arrive while the first pass runs.
        assert!(!work.start(&"tools"));
        assert!(!work.start(&"tools"));
        assert!(!work.start(&"tools"));
        // Other keys are independent.
        assert!(work.start(&"prompts"));
        assert!(work.again(&"tools"), "one more pass");
        assert!(!work.again(&"tools"), "and only one");
        assert!(!work.again(&"prompts"));
        assert!(work.start(&"tools"), "free again");
    }

    /// A reader waits for the pass that starts after the announcements it
    /// saw, not for the one running when they came, and cuts the loop's
    /// pause short; one announcement after it is not waited for.
    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_for_the_pass_after_what_was_announced() {
        let work = Arc::new(Coalescer::default());
        let deadline = || tokio::time::Instant::now() + Duration::from_secs(30);
        assert!(!work.behind(|_| true));
        assert!(work.start(&"tools"));
        let first = work.pass_starts(&"tools");
        // Announced again while the first pass reads.
        assert!(!work.start(&"tools"));
        assert!(work.behind(|key| *key == "tools"));
        assert!(!work.behind(|key| *key == "prompts"));
        let reader = tokio::spawn({
            let work = work.clone();
            async move { work.settled(|key| *key == "tools", deadline()).await }
        });
        tokio::task::yield_now().await;
        work.pass_ended(&"tools", first);
        assert!(work.again(&"tools"));
        tokio::task::yield_now().await;
        assert!(
            !reader.is_finished(),
            "the first pass began before the second announcement"
        );
        // The loop's pause between passes ends at once: a reader waits.
        let paused = tokio::time::Instant::now();
        work.pause(&"tools", Duration::from_secs(10)).await;
        assert_eq!(paused.elapsed(), Duration::ZERO);
        let second = work.pass_starts(&"tools");
        // Announced once more while the second pass reads: not waited for.
        assert!(!work.start(&"tools"));
        work.pass_ended(&"tools", second);
        assert!(reader.await.unwrap());
        assert!(
            work.behind(|_| true),
            "the third announcement is not covered yet"
        );
        // A reader gives up at its deadline.
        let gave_up = work
            .settled(
                |_| true,
                tokio::time::Instant::now() + Duration::from_secs(2),
            )
            .await;
        assert!(!gave_up);
    }
}
