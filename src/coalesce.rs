//! Coalesces bursts of the same piece of work.
//!
//! Servers often announce several `list_changed` in a row (one per tool they
//! register). Re-reading the list once per announcement wastes upstream
//! calls and races itself; instead the first announcement runs the refresh
//! and any that arrive meanwhile make it run exactly once more.

use std::{collections::HashMap, hash::Hash, sync::Mutex};

pub struct Coalescer<K> {
    /// Keys being worked on; `true` = asked again since the pass started.
    running: Mutex<HashMap<K, bool>>,
}

impl<K: Hash + Eq + Clone> Default for Coalescer<K> {
    fn default() -> Self {
        Self {
            running: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Coalescer<K> {
    /// Whether the caller should do the work for `key` now. `false` means a
    /// pass is already running; it has been told to run once more.
    pub fn start(&self, key: &K) -> bool {
        let mut running = self.lock();
        match running.get_mut(key) {
            Some(again) => {
                *again = true;
                false
            }
            None => {
                running.insert(key.clone(), false);
                true
            }
        }
    }

    /// After a pass: whether to run another (someone asked meanwhile).
    /// When it returns `false` the key is free again.
    pub fn again(&self, key: &K) -> bool {
        let mut running = self.lock();
        match running.get_mut(key) {
            Some(again) if *again => {
                *again = false;
                true
            }
            _ => {
                running.remove(key);
                false
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, bool>> {
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
}
