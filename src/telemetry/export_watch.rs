//! Trace export that says when it fails.
//!
//! The OpenTelemetry SDK reports a failed export only through its own
//! internal logs, a feature left out here (it would log every failed batch,
//! several a second under load), so a wrong or unreachable OTLP endpoint
//! dropped every span without a word. [`WatchedExporter`] wraps the OTLP
//! exporter: each failed batch is counted (`trace_export_failures_total`),
//! the first failure is logged at once and later ones at most once a
//! minute with how many there were, and the first success after failures
//! says exporting works again. Errors are logged with URLs cut to their
//! origin (an endpoint may carry a credential).

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use opentelemetry_sdk::{
    error::OTelSdkResult,
    trace::{SpanData, SpanExporter},
    Resource,
};

/// How often a run of failures is logged, at most.
const FAILURES_LOGGED_EVERY: Duration = Duration::from_secs(60);

/// `inner`, with its failures counted and logged (see the module doc).
#[derive(Debug)]
pub struct WatchedExporter<E> {
    inner: E,
    said: Mutex<Said>,
}

/// What was logged about the exports so far.
#[derive(Debug, Default)]
struct Said {
    /// When a failure was last logged: kept across recoveries, so that a
    /// collector failing every other batch is said once a minute too.
    failure_at: Option<Instant>,
    /// Failed batches since the last line about them.
    unsaid_failures: u64,
    /// A failure was logged and no recovery since.
    failing: bool,
}

impl<E> WatchedExporter<E> {
    pub fn new(inner: E) -> Self {
        Self {
            inner,
            said: Mutex::new(Said::default()),
        }
    }

    /// Counts an export's outcome, and logs what is due.
    fn watch(&self, result: &OTelSdkResult, spans: usize) {
        let mut said = self
            .said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let error = match result {
            Ok(()) => {
                if std::mem::take(&mut said.failing) {
                    let unsaid = std::mem::take(&mut said.unsaid_failures);
                    tracing::info!(
                        failed_batches_since_last_said = unsaid,
                        "exporting traces works again"
                    );
                }
                return;
            }
            Err(error) => error,
        };
        super::metrics().trace_export_failures.inc();
        said.unsaid_failures += 1;
        let now = Instant::now();
        let due = said
            .failure_at
            .is_none_or(|at| now.duration_since(at) >= FAILURES_LOGGED_EVERY);
        if !due {
            return;
        }
        said.failure_at = Some(now);
        said.failing = true;
        let failures = std::mem::take(&mut said.unsaid_failures);
        let error = super::redact::origins_only(&error.to_string());
        tracing::warn!(
            %error,
            spans,
            failed_batches = failures,
            "exporting traces failed: their spans are lost (said at most once a minute; counted in trace_export_failures_total)"
        );
    }
}

impl<E: SpanExporter> SpanExporter for WatchedExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.watch(&result, spans);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use opentelemetry_sdk::error::OTelSdkError;

    use super::*;

    /// Fails while `failing` is set.
    #[derive(Debug, Default)]
    struct Flaky {
        failing: AtomicBool,
    }

    impl SpanExporter for Flaky {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            match self.failing.load(Ordering::Acquire) {
                true => Err(OTelSdkError::InternalFailure(
                    "cannot reach https://user:pw@collector.example/v1/traces?key=k".to_owned(),
                )),
                false => Ok(()),
            }
        }
    }

    #[tokio::test]
    async fn failures_are_counted_and_said_once_then_the_recovery() {
        let (log, _captured) = crate::telemetry::captured_log::capture();
        let watched = WatchedExporter::new(Flaky::default());
        let failures_before = crate::telemetry::metrics().trace_export_failures.get();
        watched.export(Vec::new()).await.expect("a working export");
        assert!(log.text().is_empty(), "{}", log.text());
        watched.inner.failing.store(true, Ordering::Release);
        for _ in 0..3 {
            assert!(watched.export(Vec::new()).await.is_err());
        }
        let text = log.text();
        assert_eq!(
            text.matches("exporting traces failed").count(),
            1,
            "said once, not per batch: {text}"
        );
        assert!(
            text.contains("https://collector.example/…") && !text.contains("pw"),
            "the endpoint cut to its origin: {text}"
        );
        let counted = crate::telemetry::metrics().trace_export_failures.get() - failures_before;
        assert!(counted >= 3, "{counted}");
        watched.inner.failing.store(false, Ordering::Release);
        watched.export(Vec::new()).await.expect("working again");
        let text = log.text();
        assert!(
            text.contains("exporting traces works again") && text.contains("=2"),
            "the two failures not said yet are counted: {text}"
        );
        // A collector failing every other batch: said no more often.
        for _ in 0..3 {
            watched.inner.failing.store(true, Ordering::Release);
            assert!(watched.export(Vec::new()).await.is_err());
            watched.inner.failing.store(false, Ordering::Release);
            watched.export(Vec::new()).await.expect("working");
        }
        let text = log.text();
        assert_eq!(text.matches("exporting traces failed").count(), 1, "{text}");
        assert_eq!(text.matches("works again").count(), 1, "{text}");
    }
}
