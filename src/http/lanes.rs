//! Serving lanes: the MCP listener is served by one thread per core, each
//! running a current-thread tokio runtime of its own.
//!
//! On a multi-thread runtime any wake-up may land on the other worker: a
//! call through the gateway waits twice (for the client's request, for the
//! upstream's answer), and each wait can end in a futex wake-up of another
//! thread and a context switch. Run on one worker thread, the gateway spent
//! 15-30% less CPU per call, but could only use one core (BENCHMARKS.md). A
//! lane keeps a connection, the tasks its requests start (rmcp's session
//! tasks, per-session upstreams) and the upstream connections they dial on
//! one thread, and there is a lane per core. Lanes do not accept for
//! themselves: one acceptor on the main runtime hands each new connection
//! to the lane holding the fewest open connections (`lane_dispatch.rs`).
//!
//! What a lane started lives on its runtime, so lanes keep running after
//! they stop accepting, until [`Lanes::close`]: the gateway shuts those
//! sessions down first. Everything else (supervision, reload, the shared
//! mounts opened at start, the admin listener) runs on the main runtime.

use std::{future::Future, io, time::Duration};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a lane's runtime waits for its blocking tasks (stdin readers)
/// once closed, as the main runtime does at exit.
const CLOSE_LIMIT: Duration = Duration::from_secs(1);

/// How many lanes to run: `TOKIO_WORKER_THREADS` when set (the variable
/// that sizes tokio's multi-thread runtime), else one per available CPU.
pub fn count() -> usize {
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|threads| threads.trim().parse::<usize>().ok())
        .filter(|&threads| threads > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(Into::into))
        .unwrap_or(1)
}

/// Running lanes; dropping them closes them without waiting.
pub struct Lanes {
    /// Each lane's outcome once it stops serving.
    outcomes: mpsc::UnboundedReceiver<io::Result<()>>,
    /// Lanes still serving.
    serving: usize,
    /// The first lane error seen, kept for [`Lanes::served`].
    failed: Option<io::Error>,
    /// Ends the lanes' runtimes.
    release: CancellationToken,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Lanes {
    /// Starts one lane per item of `lanes`; each item makes, on its lane's
    /// thread, the future that serves there.
    pub fn start<Make, Serve>(lanes: Vec<Make>) -> io::Result<Self>
    where
        Make: FnOnce() -> Serve + Send + 'static,
        Serve: Future<Output = io::Result<()>>,
    {
        let (report, outcomes) = mpsc::unbounded_channel();
        let release = CancellationToken::new();
        let mut started = Self {
            outcomes,
            serving: lanes.len(),
            failed: None,
            release: release.clone(),
            threads: Vec::with_capacity(lanes.len()),
        };
        for (index, make) in lanes.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let report = Report(Some(report.clone()));
            let release = release.clone();
            let thread = std::thread::Builder::new()
                .name(format!("junction-lane-{index}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        report.send(make().await);
                        release.cancelled().await;
                    });
                    runtime.shutdown_timeout(CLOSE_LIMIT);
                })?;
            started.threads.push(thread);
        }
        Ok(started)
    }

    /// Waits for one lane to stop serving (cancel-safe).
    pub async fn one_ended(&mut self) {
        if self.serving == 0 {
            return;
        }
        let outcome = self
            .outcomes
            .recv()
            .await
            .unwrap_or_else(|| Err(io::Error::other("a serving thread ended without a word")));
        self.serving -= 1;
        if let Err(error) = outcome {
            self.failed.get_or_insert(error);
        }
    }

    /// Waits until every lane has stopped serving; the first lane error.
    pub async fn served(&mut self) -> io::Result<()> {
        while self.serving > 0 {
            self.one_ended().await;
        }
        self.failed.take().map_or(Ok(()), Err)
    }

    /// Ends the lanes' runtimes, dropping whatever still runs on them, and
    /// waits for their threads.
    pub async fn close(mut self) {
        self.release.cancel();
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        self.release.cancel();
    }
}

/// A lane's outcome, sent once; a lane whose serving future panicked
/// reports that as an error instead of leaving [`Lanes::served`] waiting.
struct Report(Option<mpsc::UnboundedSender<io::Result<()>>>);

impl Report {
    fn send(mut self, outcome: io::Result<()>) {
        if let Some(report) = self.0.take() {
            let _ = report.send(outcome);
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if let Some(report) = self.0.take() {
            let _ = report.send(Err(io::Error::other("a serving thread panicked")));
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn every_lane_runs_on_a_thread_of_its_own_until_closed() {
        let main_thread = std::thread::current().id();
        let (seen, mut threads) = mpsc::unbounded_channel();
        let lanes = (0..3)
            .map(|_| {
                let seen = seen.clone();
                move || async move {
                    let _ = seen.send(std::thread::current().id());
                    Ok(())
                }
            })
            .collect();
        let mut lanes = Lanes::start(lanes).unwrap();
        lanes.served().await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(threads.recv().await.unwrap());
        }
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        assert_eq!(ids.len(), 3);
        assert!(!ids.contains(&main_thread));
        lanes.close().await;
    }

    #[tokio::test]
    async fn a_lane_keeps_its_tasks_running_until_closed() {
        // A task the lane starts answers pings until it is dropped.
        let (pings, mut pinged) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
        let mut lanes = Lanes::start(vec![move || async move {
            tokio::spawn(async move {
                while let Some(pong) = pinged.recv().await {
                    let _ = pong.send(());
                }
            });
            Ok(())
        }])
        .unwrap();
        lanes.served().await.unwrap();
        // Still served after the lane stopped serving.
        let (pong, ponged) = oneshot::channel();
        pings.send(pong).unwrap();
        tokio::time::timeout(Duration::from_secs(5), ponged)
            .await
            .expect("an answer within 5 s")
            .expect("the task answers");
        lanes.close().await;
        // Its runtime is gone, and the task with it.
        assert!(
            pings.send(oneshot::channel().0).is_err(),
            "closed lanes run nothing"
        );
    }

    #[tokio::test]
    async fn a_lane_error_is_reported() {
        let lanes = (0..2)
            .map(|index| {
                move || async move {
                    match index {
                        0 => Ok(()),
                        _ => Err(io::Error::other("cannot serve")),
                    }
                }
            })
            .collect();
        let mut lanes = Lanes::start(lanes).unwrap();
        let error = lanes.served().await.unwrap_err();
        assert_eq!(error.to_string(), "cannot serve");
        lanes.close().await;
    }

    #[tokio::test]
    async fn a_panicking_lane_is_reported_not_waited_for() {
        async fn panicking() -> io::Result<()> {
            panic!("a test lane panics")
        }
        let mut lanes = Lanes::start(vec![panicking]).unwrap();
        let error = lanes.served().await.unwrap_err();
        assert_eq!(error.to_string(), "a serving thread panicked");
        lanes.close().await;
    }
}
