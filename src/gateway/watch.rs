//! Hot reload triggers: the config file changing on disk, and SIGHUP.
//!
//! The file is polled ([`POLL`]) and compared by content, not by
//! modification time or inotify events: that works the same on every
//! filesystem, through editors that replace the file, and through
//! Kubernetes ConfigMap updates (a symlink swap that inotify watchers on
//! the old file miss), at the cost of one small read per second. A new
//! config is loaded and validated like at start; a valid one is applied
//! ([`Gateway::reload`]), an invalid one is logged with every problem and
//! the running config keeps serving.
//!
//! A file is read until two reads [`SETTLE`] apart agree, on SIGHUP as on
//! a poll, and what is applied is that content, not the file read again:
//! a write in place (`cp`, `>`, an editor that truncates then writes) read
//! halfway is a cut-off file, often still valid (cut at a mount's end, or
//! empty: no mounts), and applying it stopped every mount it lacked. And a
//! file that is empty, blank or only comments is never applied by a
//! reload: it is a write caught halfway far more often than a wish to run
//! no upstream.

use std::{sync::Arc, time::Duration};

use super::Gateway;
use crate::config::{self, Config, ConfigSource};
use crate::telemetry::metrics::metrics;

/// How often the config file is read to look for a change.
pub const POLL: Duration = Duration::from_secs(1);

/// How long a changed file must stay as read before it is taken.
const SETTLE: Duration = Duration::from_millis(200);

/// After how many polls in a row that cannot read the file that is said.
const UNREADABLE_POLLS_TOLD: u32 = 3;

/// How many times a file still changing is read again before waiting for
/// the next poll.
const SETTLE_READS: usize = 5;

/// The file's content once two reads [`SETTLE`] apart agree; `None` if it
/// cannot be read (mid-replace) or keeps changing.
async fn settled(source: &ConfigSource) -> Option<Vec<u8>> {
    let mut read = source.snapshot()?;
    for _ in 0..SETTLE_READS {
        tokio::time::sleep(SETTLE).await;
        let again = source.snapshot()?;
        if again == read {
            return Some(read);
        }
        read = again;
    }
    None
}

/// Watches `source` and SIGHUP until `stop` resolves. `loaded` is the
/// file's content read just before the running config was loaded from it
/// ([`ConfigSource::snapshot`]): an edit made while the gateway was
/// starting differs from it and is applied at the first poll, rather than
/// waiting for the next edit. `adjust` applies the command line's
/// overrides (such as `--listen`) to each loaded config, so they are not
/// mistaken for config changes.
pub async fn watch(
    gateway: Arc<Gateway>,
    source: ConfigSource,
    loaded: Option<Vec<u8>>,
    adjust: impl Fn(&mut Config) + Send + Sync + 'static,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut seen = loaded;
    let mut unreadable_polls = 0;
    // Whether the file's being unreadable now was counted as a failed
    // reload already (by a SIGHUP, or the poll), so that it is counted
    // once.
    let mut unreadable_counted = false;
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|error| tracing::warn!(%error, "cannot listen for SIGHUP"))
        .ok();
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hangup_received = async {
            match hangup.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup_received = std::future::pending::<()>();
        let (trigger, content) = tokio::select! {
            // The stop first: a SIGHUP pending with it must not reload.
            biased;
            _ = stop.cancelled() => break,
            _ = hangup_received => {
                // Asked for, so taken even when unchanged; but as the
                // poll takes it, once two reads agree: a SIGHUP sent
                // while the file is being written applied the cut-off
                // file, and the finished one (as polled before) was never
                // taken.
                match settled(&source).await {
                    Some(content) => {
                        seen = Some(content.clone());
                        ("SIGHUP", Some(content))
                    }
                    // Unreadable (or the embedded config): loading says
                    // why. The file, once readable again, is taken even if
                    // it is what was seen: this reload is counted as
                    // failed, and only a reload that succeeds says the
                    // running config is the file's again.
                    None if source.snapshot().is_none() => {
                        seen = None;
                        unreadable_counted = true;
                        ("SIGHUP", None)
                    }
                    // Still being written: the poll takes it once it
                    // settles (it differs from what was seen).
                    None => {
                        tracing::warn!(
                            config = %source.describe(),
                            "SIGHUP: the config file is still changing; it is applied once it settles"
                        );
                        continue;
                    }
                }
            }
            _ = poll.tick() => {
                // A file that cannot be read (mid-replace) is not a change;
                // one that stays so (deleted, its permissions changed) is
                // said once, or edits would be lost without a word. It
                // counts as a failed reload, as on SIGHUP: an alert on
                // the gauge sees that the file no longer says what runs,
                // and the file, once readable again, is taken even if it
                // is what was seen, setting the gauge back.
                let current = source.snapshot();
                if current.is_none() && matches!(source, ConfigSource::File(_)) {
                    unreadable_polls += 1;
                    if unreadable_polls >= UNREADABLE_POLLS_TOLD && !unreadable_counted {
                        unreadable_counted = true;
                        tracing::error!(
                            config = %source.describe(),
                            "the config file cannot be read (counted as a failed reload); the running config keeps serving, and the file is taken again once it can be"
                        );
                        metrics().count_reload(false, false);
                        seen = None;
                    }
                    continue;
                }
                unreadable_polls = 0;
                unreadable_counted = false;
                if current == seen {
                    continue;
                }
                // Nor is one still being written.
                let Some(current) = settled(&source).await else {
                    continue;
                };
                if Some(&current) == seen.as_ref() {
                    continue;
                }
                seen = Some(current.clone());
                ("config file changed", Some(current))
            }
        };
        // A SIGHUP's file is read for a while (until it settles): the
        // stop may have come meanwhile.
        if stop.is_cancelled() {
            break;
        }
        reload_once(&gateway, &source, &adjust, trigger, content).await;
    }
    // Stopped for the shutdown: a SIGHUP from now on is said to do
    // nothing, rather than taken without a word, until the process ends.
    #[cfg(unix)]
    if let Some(mut hangup) = hangup {
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::warn!("SIGHUP ignored: the gateway is shutting down, and no config is reloaded once draining has begun");
            }
        });
    }
}

/// Whether a config file says nothing at all: blank, or only comments
/// (and YAML's document markers). Such a file is a write caught halfway
/// (a config often starts with a comment) far more often than a wish to
/// run no upstream; `{}` or an empty table say that on purpose.
fn says_nothing(content: &[u8]) -> bool {
    let text = String::from_utf8_lossy(content);
    // A byte order mark alone is what a Windows editor writes first.
    text.trim_start_matches('\u{feff}').lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

/// Loads `content` (the file as read and settled; `None` only for a file
/// that cannot be read, or the embedded config) and applies it. Returns
/// whether it was applied.
async fn reload_once(
    gateway: &Gateway,
    source: &ConfigSource,
    adjust: &(impl Fn(&mut Config) + Sync),
    trigger: &str,
    content: Option<Vec<u8>>,
) -> bool {
    let rejected = |problems: usize, why: &str| {
        tracing::error!(config = %source.describe(), problems, %trigger, "config reload rejected{why}; the running config keeps serving");
        metrics().count_reload(false, false);
        false
    };
    let empty = content.as_deref().is_some_and(says_nothing);
    let loaded = match content {
        Some(content) => config::load_content(source, content),
        None => config::load(source),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(error) => {
            for problem in &error.problems {
                tracing::error!(config = %error.origin, %problem, "invalid config");
            }
            return rejected(error.problems.len(), "");
        }
    };
    adjust(&mut config);
    let running = gateway.config();
    // What an empty file says is taken only when it changes nothing: a
    // config held in `JUNCTION_*` variables beside a file of comments
    // reloads cleanly on SIGHUP (no failed reload to alert on).
    if empty && config != *running {
        return rejected(
            0,
            ": the file is empty or only comments (caught while being written?)",
        );
    }
    // `[server]` is kept as it runs, its separator too: the new mounts were
    // checked with the file's, and must also be unambiguous with this one.
    if config.server.separator != running.server.separator {
        let problems = config::namespace_problems(&config.mounts, &running.server.separator);
        if !problems.is_empty() {
            for problem in &problems {
                tracing::error!(config = %source.describe(), %problem, "invalid config with the running separator");
            }
            return rejected(
                problems.len(),
                " (a new separator takes effect after a restart)",
            );
        }
    }
    // Likewise its paths: a new endpoint's must not be one the running
    // older transport serves.
    if (&config.server.path, &config.server.sse_path)
        != (&running.server.path, &running.server.sse_path)
    {
        let problems = config::endpoint_path_problems(&config.endpoints, &running.server);
        if !problems.is_empty() {
            for problem in &problems {
                tracing::error!(config = %source.describe(), %problem, "invalid config with the running paths");
            }
            return rejected(problems.len(), " (new paths take effect after a restart)");
        }
    }
    // Loading takes a while: a shutdown may have begun meanwhile, and a
    // reload now would start new mounts' processes only to stop them.
    if gateway.is_draining() {
        tracing::info!(%trigger, "config reload skipped: the gateway is shutting down");
        return false;
    }
    let outcome = gateway.reload(config).await;
    for (section, keys) in &outcome.needs_restart {
        let keys = keys.join(", ");
        tracing::warn!(
            section,
            keys,
            "changes to [{section}] ({keys}) take effect after a restart; keeping the running values"
        );
    }
    let names = |list: &[crate::naming::MountName]| {
        list.iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    tracing::info!(
        %trigger,
        added = %names(&outcome.added),
        removed = %names(&outcome.removed),
        changed = %names(&outcome.changed),
        retuned = %names(&outcome.retuned),
        unchanged = outcome.unchanged.len(),
        applied = %outcome.applied.join(","),
        "config reloaded"
    );
    metrics().count_reload(true, outcome.needs_restart.is_empty());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_sessions(gateway: &Gateway) -> usize {
        gateway.config().limits.max_sessions
    }

    /// A config file holding `text` (in a directory kept while the first
    /// value lives), and a gateway serving it.
    fn served(
        text: &str,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        ConfigSource,
        Arc<Gateway>,
    ) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("junction.toml");
        std::fs::write(&path, text).expect("write the config");
        let source = ConfigSource::File(path.clone());
        let gateway = Gateway::new(config::load(&source).expect("a valid config"));
        (dir, path, source, gateway)
    }

    /// [`reload_once`] of the file as it is now, nothing adjusted.
    async fn reload_as_written(gateway: &Gateway, source: &ConfigSource) -> bool {
        reload_once(
            gateway,
            source,
            &|_: &mut Config| {},
            "test",
            source.snapshot(),
        )
        .await
    }

    /// An edit saved after the config was loaded but before the watcher
    /// took its first look is applied at the first poll.
    #[tokio::test]
    async fn an_edit_made_while_starting_is_applied() {
        let (_dir, path, source, gateway) = served("[limits]\nmax_sessions = 5\n");
        let loaded = source.snapshot();
        assert_eq!(max_sessions(&gateway), 5);
        std::fs::write(&path, "[limits]\nmax_sessions = 7\n").expect("edit the config");

        let stop = tokio_util::sync::CancellationToken::new();
        let watcher = tokio::spawn(watch(
            gateway.clone(),
            source,
            loaded,
            |_: &mut Config| {},
            stop.clone(),
        ));
        for _ in 0..50 {
            if max_sessions(&gateway) == 7 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.cancel();
        watcher.await.expect("the watcher ends");
        assert_eq!(max_sessions(&gateway), 7, "the edit was not applied");
    }

    /// A file read halfway through a write is not taken: only content that
    /// stays as read; and an empty file is never applied by a reload (it
    /// would stop every mount).
    #[tokio::test]
    async fn a_file_still_being_written_or_empty_is_not_applied() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("junction.toml");
        std::fs::write(&path, "[limits]\nmax_sessions = 5\n").expect("write the config");
        let source = ConfigSource::File(path.clone());
        // Changing under the reads: not settled.
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                for n in 0..20 {
                    std::fs::write(&path, format!("[limits]\nmax_sessions = {n}\n")).unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        assert_eq!(settled(&source).await, None);
        writer.await.unwrap();
        std::fs::write(&path, "[limits]\nmax_sessions = 6\n").unwrap();
        assert_eq!(
            settled(&source).await.as_deref(),
            Some(&b"[limits]\nmax_sessions = 6\n"[..])
        );

        let gateway = Gateway::new(config::load(&source).expect("a valid config"));
        for says_nothing in ["", "# the gateway's config\n", "---\n# mounts:\n"] {
            std::fs::write(&path, says_nothing).unwrap();
            reload_as_written(&gateway, &source).await;
            assert_eq!(max_sessions(&gateway), 6, "applied {says_nothing:?}");
        }
        std::fs::write(&path, "[limits]\nmax_sessions = 8\n").unwrap();
        reload_as_written(&gateway, &source).await;
        assert_eq!(max_sessions(&gateway), 8);
    }

    /// What is applied is the content as read and settled, not the file
    /// read again (which a write may have cut short since).
    #[tokio::test]
    async fn the_content_read_is_what_is_applied() {
        let (_dir, path, source, gateway) = served("[limits]\nmax_sessions = 5\n");
        std::fs::write(&path, "[limits]\nmax_sess").unwrap();
        let settled_before = b"[limits]\nmax_sessions = 9\n".to_vec();
        reload_once(
            &gateway,
            &source,
            &|_: &mut Config| {},
            "test",
            Some(settled_before),
        )
        .await;
        assert_eq!(max_sessions(&gateway), 9);
    }

    /// A file of comments beside a config held in the environment reloads
    /// as unchanged, not as a failure (which `config_last_reload_successful`
    /// would report for ever); one that would change something does not.
    #[tokio::test]
    async fn a_file_of_comments_is_applied_only_if_it_changes_nothing() {
        let (_dir, _path, source, gateway) = served("# all in JUNCTION_* variables\n");
        assert!(
            reload_as_written(&gateway, &source).await,
            "an unchanged config from the environment"
        );
        let raised = |config: &mut Config| config.limits.max_sessions = 3;
        assert!(
            !reload_once(&gateway, &source, &raised, "test", source.snapshot()).await,
            "a file of comments changed the config"
        );
    }

    /// A byte order mark before the comments (a Windows editor's write
    /// caught halfway) still says nothing: it was applied as an empty
    /// config, stopping every mount.
    #[test]
    fn a_byte_order_mark_says_nothing_either() {
        assert!(says_nothing("\u{feff}".as_bytes()));
        assert!(says_nothing("\u{feff}# mounts to come\n".as_bytes()));
        assert!(!says_nothing("\u{feff}[limits]\n".as_bytes()));
    }

    /// A reload whose loading overlapped the start of a shutdown is not
    /// applied: it would start new mounts only for the drain to stop them.
    #[tokio::test]
    async fn no_reload_is_applied_once_draining() {
        let (_dir, path, source, gateway) = served("[limits]\nmax_sessions = 5\n");
        std::fs::write(&path, "[limits]\nmax_sessions = 7\n").expect("edit the config");
        gateway.drain().await;
        assert!(!reload_as_written(&gateway, &source).await);
        assert_eq!(max_sessions(&gateway), 5);
    }

    /// A reload keeps the running separator (a `[server]` change needs a
    /// restart): mounts whose names the file's separator tells apart but
    /// the running one would not are refused, not applied ambiguous.
    #[tokio::test]
    async fn a_reload_is_checked_with_the_running_separator() {
        let mount = |name: &str| format!("[mounts.{name}]\nurl = \"http://127.0.0.1:9/mcp\"\n\n");
        let (_dir, path, source, gateway) =
            served(&format!("[server]\nseparator = \"-\"\n\n{}", mount("a")));
        std::fs::write(
            &path,
            format!(
                "[server]\nseparator = \"__\"\n\n{}{}",
                mount("a"),
                mount("a-b")
            ),
        )
        .expect("edit the config");
        reload_as_written(&gateway, &source).await;
        let names: Vec<String> = gateway
            .mounts()
            .iter()
            .map(|mount| mount.config.name.as_str().to_owned())
            .collect();
        assert_eq!(
            names,
            ["a"],
            "applied with names `a-b-x` could split two ways"
        );
    }
}
