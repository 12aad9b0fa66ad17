//! The gateway's current config, shared with every mount so that changes
//! to `[timeouts]`, `[supervision]` and `[limits]` apply without a restart.
//!
//! Most readers load it when they need a value. What waits on a value (a
//! supervisor sleeping until its next attempt) also watches for changes,
//! so that a reload shortening `down_retry` reaches a mount already down.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use tokio::sync::watch;

use crate::config::Config;

pub struct LiveConfig {
    current: ArcSwap<Config>,
    /// Ticks at each [`LiveConfig::store`].
    changes: watch::Sender<()>,
}

impl LiveConfig {
    pub fn new(config: Config) -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(config),
            changes: watch::Sender::new(()),
        })
    }

    pub fn load(&self) -> Guard<Arc<Config>> {
        self.current.load()
    }

    pub fn load_full(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// Makes `config` current and wakes everyone watching.
    pub fn store(&self, config: Arc<Config>) {
        self.current.store(config);
        self.changes.send_replace(());
    }

    /// Resolves at each change after this call.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.changes.subscribe()
    }
}
