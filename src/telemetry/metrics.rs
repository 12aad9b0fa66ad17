//! The gateway's Prometheus metrics, rendered on `GET /metrics`.
//!
//! One process-wide [`Metrics`] (see [`metrics()`]) so any module can count
//! without threading a handle through every call. Labels are bounded by
//! construction: mount names come from the config, methods from the MCP
//! method set, outcomes and kinds from fixed lists; never tool arguments,
//! session ids or URIs.

use std::sync::{Arc, LazyLock};

use prometheus_client::{
    encoding::{
        text::{encode_eof, encode_registry},
        EncodeLabelSet,
    },
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

// The labels counted on every request share or borrow their text: a
// `String` each was an allocation per label per request, for a lookup
// that finds the series already there.

/// Labels of a downstream request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The mount it was routed to, or `-` ([`no_mount`]) for requests
    /// answered locally (lists, ping) or not routable.
    pub mount: Arc<str>,
    pub method: &'static str,
    /// `ok`, `error` (JSON-RPC error) or `tool_error` (`isError: true`).
    pub outcome: &'static str,
}

/// The `mount` label of a request routed to no mount.
pub fn no_mount() -> Arc<str> {
    static NO_MOUNT: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("-"));
    NO_MOUNT.clone()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub mount: Arc<str>,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MountLabels {
    pub mount: String,
}

/// A mount in one of its phases (`mount_state`, one series per phase).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MountStateLabels {
    pub mount: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Why the HTTP edge refused a request before any session handled it
/// (`refused_requests_total{reason}`): answers no other metric counts.
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// 403: a `Host` not in `allowed_hosts`.
    Host,
    /// 403: an `Origin` not in `allowed_origins`.
    Origin,
    /// 413: a body over `max_body_size`.
    BodyTooLarge,
    /// 408: a body slower than `request_read_timeout`.
    BodyTooSlow,
    /// 400: not a JSON-RPC message, or one the gateway cannot take.
    Malformed,
    /// 503: `max_sessions` reached.
    SessionLimit,
    /// 503: shutting down.
    Draining,
    /// 404: a session id the gateway does not know (ended, expired).
    UnknownSession,
}

impl Refusal {
    /// Every reason, each counted from 0 at start: an alert on one has a
    /// series to watch before the first refusal.
    const ALL: [Refusal; 8] = [
        Refusal::Host,
        Refusal::Origin,
        Refusal::BodyTooLarge,
        Refusal::BodyTooSlow,
        Refusal::Malformed,
        Refusal::SessionLimit,
        Refusal::Draining,
        Refusal::UnknownSession,
    ];

    fn reason(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::Origin => "origin",
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::BodyTooSlow => "body_too_slow",
            Refusal::Malformed => "malformed",
            Refusal::SessionLimit => "session_limit",
            Refusal::Draining => "draining",
            Refusal::UnknownSession => "unknown_session",
        }
    }
}

/// What a relayed message was (`relayed_messages_total{kind}`).
#[derive(Clone, Copy, Debug)]
pub enum Relayed {
    Sampling,
    Elicitation,
    ElicitationComplete,
    Roots,
    Progress,
    Log,
    TaskStatus,
    ListChanged,
    ResourceUpdated,
}

impl Relayed {
    /// Every kind, each counted from 0 at start, as refusals are; in
    /// declaration order, as `count_relayed` indexes its series by kind.
    const ALL: [Relayed; 9] = [
        Relayed::Sampling,
        Relayed::Elicitation,
        Relayed::ElicitationComplete,
        Relayed::Roots,
        Relayed::Progress,
        Relayed::Log,
        Relayed::TaskStatus,
        Relayed::ListChanged,
        Relayed::ResourceUpdated,
    ];

    fn kind(self) -> &'static str {
        match self {
            Relayed::Sampling => "sampling",
            Relayed::Elicitation => "elicitation",
            Relayed::ElicitationComplete => "elicitation_complete",
            Relayed::Roots => "roots",
            Relayed::Progress => "progress",
            Relayed::Log => "log",
            Relayed::TaskStatus => "task_status",
            Relayed::ListChanged => "list_changed",
            Relayed::ResourceUpdated => "resource_updated",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<MethodLabels, Histogram>,
    pub upstream_duration: Family<UpstreamLabels, Histogram>,
    pub downstream_sessions: Gauge,
    pub downstream_sessions_asleep: Gauge,
    /// Event streams of the older HTTP+SSE transport (`http::sse_endpoint`).
    pub downstream_sse_streams: Gauge,
    /// Upstream sessions open, by mount: counted here, exposed per scrape
    /// for the running config's mounts only (`http/admin.rs`), so that a
    /// mount a reload removed or renamed leaves no series behind.
    pub upstream_sessions: Family<MountLabels, Gauge>,
    pub upstream_restarts: Family<MountLabels, Counter>,
    pub cache_hits: Counter,
    /// Batches of spans the OTLP exporter failed to send (`export_watch.rs`).
    pub trace_export_failures: Counter,
    pub cache_refreshes: Family<MountLabels, Counter>,
    /// `relayed_messages_total`'s series, one per [`Relayed`] kind in
    /// its order: a relayed progress or log message counts without the
    /// family's lock and label hash.
    relayed: [Counter; Relayed::ALL.len()],
    pub refused: Family<ReasonLabels, Counter>,
    config_reloads: Family<ResultLabels, Counter>,
    config_last_reload_successful: Gauge,
}

/// Latency buckets from 50 µs, doubling, to ~56 min (the default
/// `request_ceiling` is an hour): a cache hit, a slow tool, a call waiting
/// minutes for a person's answer and a blocking `tasks/result` all land in
/// a meaningful bucket. (Ending at ~105 s, everything longer was `+Inf`.)
fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 27)
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("junction");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Downstream MCP requests by mount, method and outcome",
            requests.clone(),
        );
        let request_duration =
            Family::<MethodLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "request_duration_seconds",
            "Time from a downstream request to its answer",
            request_duration.clone(),
        );
        let upstream_duration = Family::<UpstreamLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> _,
        );
        registry.register(
            "upstream_request_duration_seconds",
            "Time an upstream took to answer a request the gateway sent it",
            upstream_duration.clone(),
        );
        let downstream_sessions = Gauge::default();
        registry.register(
            "downstream_sessions",
            "Initialized downstream sessions currently open",
            downstream_sessions.clone(),
        );
        let downstream_sessions_asleep = Gauge::default();
        registry.register(
            "downstream_sessions_asleep",
            "Downstream sessions asleep (idle, state kept, woken by their next request)",
            downstream_sessions_asleep.clone(),
        );
        let downstream_sse_streams = Gauge::default();
        registry.register(
            "downstream_sse_streams",
            "Event streams of clients on the older HTTP+SSE transport currently open",
            downstream_sse_streams.clone(),
        );
        let upstream_sessions = Family::<MountLabels, Gauge>::default();
        let upstream_restarts = Family::<MountLabels, Counter>::default();
        registry.register(
            "upstream_restarts",
            "Upstream sessions reopened after the previous one ended",
            upstream_restarts.clone(),
        );
        let cache_hits = Counter::default();
        registry.register(
            "discovery_cache_hits",
            "List requests answered from the discovery cache",
            cache_hits.clone(),
        );
        let trace_export_failures = Counter::default();
        registry.register(
            "trace_export_failures",
            "Batches of spans the OTLP exporter failed to send (their spans are lost)",
            trace_export_failures.clone(),
        );
        let cache_refreshes = Family::<MountLabels, Counter>::default();
        registry.register(
            "discovery_cache_refreshes",
            "Discoveries and list re-reads of an upstream, by mount",
            cache_refreshes.clone(),
        );
        let relayed = Family::<KindLabels, Counter>::default();
        registry.register(
            "relayed_messages",
            "Messages relayed from upstreams to clients, by kind",
            relayed.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "refused_requests",
            "HTTP requests the edge refused before any session handled them, by reason",
            refused.clone(),
        );
        let config_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP, a changed file), by result: applied or rejected",
            config_reloads.clone(),
        );
        // From 0, so that `rate()` and an alert on a rejected reload or a
        // refusal have a series before the first (black-box helper: none
        // was there until then).
        for result in ["applied", "rejected"] {
            let _ = config_reloads.get_or_create(&ResultLabels { result });
        }
        let relayed = Relayed::ALL.map(|relayed_kind| {
            relayed
                .get_or_create(&KindLabels {
                    kind: relayed_kind.kind(),
                })
                .clone()
        });
        for refusal in Refusal::ALL {
            let _ = refused.get_or_create(&ReasonLabels {
                reason: refusal.reason(),
            });
        }
        let config_last_reload_successful = Gauge::default();
        config_last_reload_successful.set(1);
        registry.register(
            "config_last_reload_successful",
            "Whether the last config reload was applied whole (1, also before any); 0 after one rejected, or one whose [server] changes wait for a restart: the running config is not the file's",
            config_last_reload_successful.clone(),
        );
        Self {
            registry,
            config_reloads,
            config_last_reload_successful,
            requests,
            request_duration,
            upstream_duration,
            downstream_sessions,
            downstream_sessions_asleep,
            downstream_sse_streams,
            upstream_sessions,
            upstream_restarts,
            cache_hits,
            trace_export_failures,
            cache_refreshes,
            relayed,
            refused,
        }
    }

    /// The Prometheus text exposition of every metric, and of those in
    /// `scrape` (made for this scrape from the gateway's state).
    pub fn render(&self, scrape: &Registry) -> String {
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, scrape))
            .and_then(|()| encode_eof(&mut out));
        if let Err(error) = encoded {
            tracing::warn!(%error, "could not encode metrics");
        }
        out
    }

    /// A config reload was applied (`applied`) or rejected; an applied one
    /// may leave changes that wait for a restart (not `whole`).
    pub fn count_reload(&self, applied: bool, whole: bool) {
        let result = if applied { "applied" } else { "rejected" };
        self.config_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
        self.config_last_reload_successful
            .set(i64::from(applied && whole));
    }

    pub fn count_refused(&self, refusal: Refusal) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: refusal.reason(),
            })
            .inc();
    }

    pub fn count_relayed(&self, relayed: Relayed) {
        self.relayed[relayed as usize].inc();
    }

    /// A mount's counters, from 0 once it is supervised: the first
    /// restart of a mount is then an increase of its series, which
    /// `increase()` and `rate()` see, rather than a series appearing at 1,
    /// which they do not.
    pub fn mount_supervised(&self, labels: &MountLabels) {
        let _ = self.upstream_restarts.get_or_create(labels);
        let _ = self.cache_refreshes.get_or_create(labels);
    }

    pub fn upstream_session_opened(&self, mount: &str) {
        self.upstream_sessions
            .get_or_create(&MountLabels {
                mount: mount.to_owned(),
            })
            .inc();
    }

    pub fn upstream_session_closed(&self, mount: &str) {
        self.upstream_sessions
            .get_or_create(&MountLabels {
                mount: mount.to_owned(),
            })
            .dec();
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    /// Every refusal is in `Refusal::ALL` (a new one added to the enum
    /// fails to compile here until it is placed).
    #[test]
    fn every_refusal_is_counted_from_the_start() {
        let place = |refusal: Refusal| match refusal {
            Refusal::Host => 0,
            Refusal::Origin => 1,
            Refusal::BodyTooLarge => 2,
            Refusal::BodyTooSlow => 3,
            Refusal::Malformed => 4,
            Refusal::SessionLimit => 5,
            Refusal::Draining => 6,
            Refusal::UnknownSession => 7,
        };
        let places: Vec<usize> = Refusal::ALL.into_iter().map(place).collect();
        assert_eq!(places, (0..Refusal::ALL.len()).collect::<Vec<_>>());
    }

    /// Every relayed kind is in `Relayed::ALL`, in declaration order (its
    /// series are indexed by kind).
    #[test]
    fn relayed_kinds_are_listed_in_declaration_order() {
        let places: Vec<usize> = Relayed::ALL.into_iter().map(|kind| kind as usize).collect();
        assert_eq!(places, (0..Relayed::ALL.len()).collect::<Vec<_>>());
    }

    /// Counters an alert watches are there from the start, at 0.
    #[test]
    fn reload_and_refusal_counters_start_at_zero() {
        let rendered = Metrics::new().render(&Registry::default());
        for series in [
            "junction_config_reloads_total{result=\"rejected\"} 0",
            "junction_config_reloads_total{result=\"applied\"} 0",
            "junction_refused_requests_total{reason=\"unknown_session\"} 0",
            "junction_refused_requests_total{reason=\"host\"} 0",
            "junction_relayed_messages_total{kind=\"progress\"} 0",
            "junction_relayed_messages_total{kind=\"resource_updated\"} 0",
        ] {
            assert!(rendered.contains(series), "{series} in\n{rendered}");
        }
    }

    /// Latencies up to the default request ceiling (an hour) fall in a
    /// finite bucket but for its last few minutes.
    #[test]
    fn latency_buckets_reach_the_better_part_of_an_hour() {
        let buckets: Vec<f64> = latency_buckets().collect();
        assert_eq!(buckets.first(), Some(&0.000_05));
        assert!(
            buckets.last().is_some_and(|last| *last > 3000.0),
            "{buckets:?}"
        );
    }
}
