//! Observability: logs, traces and metrics.
//!
//! [`init`] installs the `tracing` subscriber once per process: text (one
//! event per line: `one_line.rs`; fields written by `plain_fields.rs`) or
//! JSON logs on stderr, plus an OpenTelemetry layer exporting spans over
//! OTLP when an endpoint is configured (or `OTEL_EXPORTER_OTLP_ENDPOINT` is set);
//! with no endpoint no exporter exists and spans cost only what `tracing`
//! costs. [`metrics`] holds the Prometheus metrics; [`context`] carries
//! W3C trace context in and out of MCP messages; [`redact`] keeps session
//! ids out of logs and spans.

#[cfg(test)]
pub(crate) mod captured_log;
pub mod context;
mod export_watch;
pub mod metrics;
mod one_line;
mod plain_fields;
pub mod redact;
mod rmcp_events;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::{trace::SdkTracerProvider, Resource};
use tracing_subscriber::{
    filter::FilterExt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer,
};

pub use metrics::{metrics, Relayed};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Where spans go, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// Where spans are posted: the traces URL itself, e.g.
    /// `http://127.0.0.1:4318/v1/traces`.
    pub endpoint: String,
    pub json: bool,
    pub service_name: String,
}

/// Whether the log is JSON lines (set by [`init`]).
static JSON_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says `line` on stderr whatever the log level (what scripts and tests
/// read, such as the address listened on, and what goes wrong with the
/// log itself). With text logs as it is; with JSON logs as a JSON object
/// shaped like the log's own lines (its leading `junction: ` dropped), so
/// that a pipeline reading JSON lines (the Kubernetes manifest's
/// `log_format = "json"`) is not fed plain text. `level` is `INFO`, `WARN`
/// or `ERROR`.
/// Makes [`say`] write `format` before the log is installed (which sets
/// it again).
pub fn say_as(format: LogFormat) {
    JSON_LOG.store(
        format == LogFormat::Json,
        std::sync::atomic::Ordering::Relaxed,
    );
}

pub fn say(level: &str, line: &str) {
    if !JSON_LOG.load(std::sync::atomic::Ordering::Relaxed) {
        crate::say_on_stderr!("{line}");
        return;
    }
    let message = line.strip_prefix("junction: ").unwrap_or(line);
    let json = serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": level,
        "fields": { "message": message },
        "target": "junction",
    });
    crate::say_on_stderr!("{json}");
}

/// Keeps the span exporter alive; [`Telemetry::shutdown`] flushes it.
#[derive(Default)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes spans still buffered (bounded by the SDK's export timeout).
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider {
            if let Err(error) = provider.shutdown() {
                say(
                    "ERROR",
                    &format!("junction: flushing traces failed: {error}"),
                );
            }
        }
    }
}

/// What traces export, whatever the log level: the gateway's request
/// spans (info) and rmcp's warnings, as the default log level has it. A
/// log level of `warn` must not switch traces off.
const TRACE_FILTER: &str = crate::config::defaults::LOG_LEVEL;

/// The spans of a downstream request and of its upstream requests
/// (`downstream/observe.rs`, `upstream/mod.rs`).
const REQUEST_SPANS: [&str; 2] = ["mcp.request", "mcp.upstream.request"];

/// Whether spans are exported (set once, by [`init`]).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans are exported: attributes that say nothing in a log line
/// (a transport, a constant) are then set on the exported span alone
/// (`OpenTelemetrySpanExt::set_attribute`), not as fields the log layer
/// would format on every request.
pub fn exporting_traces() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Why `filter` is no log filter to use, if it is not. Beyond
/// `EnvFilter`'s own syntax: a bare word is a module name there, enabled at
/// `trace` with every other module off, so a misspelt level (`warning`,
/// `debgu`) turned off the whole log, errors included, without a word. A
/// bare word that looks like a level (a level's name with one letter
/// added, dropped, changed or swapped, or a level word of other loggers)
/// is refused; a crate's name (`junction`, `rmcp`, `want`, `errno`) still
/// enables that crate.
pub fn log_filter_problem(filter: &str) -> Option<String> {
    if let Err(error) = EnvFilter::builder().parse(filter) {
        return Some(error.to_string());
    }
    filter
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.contains(['=', '[', ':']))
        .find(|word| looks_like_a_level(word))
        .map(|word| {
            format!(
                "{word:?} is not a level (trace, debug, info, warn, error, off); a module is enabled with {word}=LEVEL"
            )
        })
}

/// The first bare word of `filter` that is not a level, if any. `EnvFilter`
/// reads one as a module enabled at `trace` with every other module off:
/// in a config file, where a filter is written once and read by others,
/// any such word (`loud`, `quiet`) silenced the whole log, errors
/// included; `junction=trace` says the other thing plainly. (`RUST_LOG`,
/// a developer's, keeps `EnvFilter`'s reading: [`log_filter_problem`].)
pub fn bare_word_not_a_level(filter: &str) -> Option<&str> {
    // tracing also reads 0 (off) to 5 (trace) as levels.
    const LEVELS: [&str; 12] = [
        "trace", "debug", "info", "warn", "error", "off", "0", "1", "2", "3", "4", "5",
    ];
    filter
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty() && !directive.contains(['=', '[']))
        .find(|word| !LEVELS.contains(&word.to_ascii_lowercase().as_str()))
}

/// Whether `word`, no level itself, was meant as one.
fn looks_like_a_level(word: &str) -> bool {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    const OTHER_LOGGERS: [&str; 12] = [
        "warning",
        "warnings",
        "verbose",
        "fatal",
        "critical",
        "notice",
        "all",
        "none",
        "information",
        "debugging",
        "quiet",
        "silent",
    ];
    // Crates one letter away from a level.
    const CRATES: [&str; 2] = ["want", "warp"];
    let word = word.to_ascii_lowercase();
    if word.is_empty() || LEVELS.contains(&word.as_str()) || CRATES.contains(&word.as_str()) {
        return false;
    }
    OTHER_LOGGERS.contains(&word.as_str())
        || (word.len() >= 4 && LEVELS.iter().any(|level| one_typo_apart(&word, level)))
}

/// Whether `a` is `b` with one letter added, dropped, changed, or two
/// neighbours swapped.
fn one_typo_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let common_start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[common_start..], &b[common_start..]);
    let common_end = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
        .min(a.len().min(b.len()));
    let (a, b) = (&a[..a.len() - common_end], &b[..b.len() - common_end]);
    match (a.len(), b.len()) {
        (0, 1) | (1, 0) | (1, 1) => true,
        (2, 2) => a[0] == b[1] && a[1] == b[0],
        _ => false,
    }
}

/// Installs logging (and tracing export, if `traces` is given). `filter`
/// (unless `RUST_LOG` is set) is the log's; traces have their own
/// ([`TRACE_FILTER`]). Must run inside a tokio runtime when traces are
/// exported (the batch exporter runs on it).
pub fn init(format: LogFormat, filter: &str, traces: Option<TraceExport>) -> Telemetry {
    JSON_LOG.store(
        format == LogFormat::Json,
        std::sync::atomic::Ordering::Relaxed,
    );
    // `RUST_LOG` wins, unless it is no filter to use: then the config's,
    // said on stderr (the log may be the very thing it would have hidden).
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|value| !value.trim().is_empty());
    let filter = match rust_log {
        Some(rust_log) => match log_filter_problem(&rust_log) {
            None => rust_log,
            Some(problem) => {
                say(
                    "WARN",
                    &format!("junction: RUST_LOG ignored ({problem}); logging at {filter:?}"),
                );
                filter.to_owned()
            }
        },
        None => filter.to_owned(),
    };
    let log_filter = || EnvFilter::new(&filter);
    let fmt = tracing_subscriber::fmt::layer().with_ansi(false);
    let fmt = match format {
        LogFormat::Text => fmt
            .fmt_fields(plain_fields::PlainFields)
            .with_writer(one_line::OneLineStderr)
            .boxed(),
        // `span` is the innermost span; `spans` every one the line is in,
        // so a line inside an upstream request keeps the downstream
        // request's session and tool.
        LogFormat::Json => fmt
            .with_writer(std::io::stderr)
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    let mut telemetry = Telemetry::default();
    let otel = traces.and_then(|export| match tracer_provider(&export) {
        Ok(provider) => {
            let tracer = provider.tracer("junction");
            telemetry.tracer_provider = Some(provider);
            Some(tracing_opentelemetry::layer().with_tracer(tracer))
        }
        Err(error) => {
            say(
                "WARN",
                &format!(
                    "junction: traces disabled: cannot export to {}: {error}",
                    export.endpoint
                ),
            );
            None
        }
    });
    // Each layer has its own level filter (a global one would hold traces
    // to the log's level). rmcp's lines that carry a session id reach the
    // log and traces only as `rmcp_events` rewrites them; the rewriter sees
    // what either would.
    let exporting = otel.is_some();
    EXPORTING.store(exporting, std::sync::atomic::Ordering::Relaxed);
    let rewrite_filter = if exporting {
        FilterExt::boxed(log_filter().or(EnvFilter::new(TRACE_FILTER)))
    } else {
        FilterExt::boxed(log_filter())
    };
    // The request spans are the log's at any level: a quiet log (`warn`)
    // keeps the lines that matter most, and those must still say which
    // request, session and tool they are about.
    let request_spans = tracing_subscriber::filter::filter_fn(|metadata| {
        metadata.is_span() && REQUEST_SPANS.contains(&metadata.name())
    });
    let _ = tracing_subscriber::registry()
        .with(
            fmt.with_filter(
                log_filter()
                    .or(request_spans)
                    .and(rmcp_events::WithoutSessionIds),
            ),
        )
        .with(otel.map(|otel| {
            otel.with_filter(EnvFilter::new(TRACE_FILTER).and(rmcp_events::WithoutSessionIds))
        }))
        .with(rmcp_events::RewriteSessionIds.with_filter(rewrite_filter))
        .try_init();
    telemetry
}

/// Installs logging and tracing as the config and the standard
/// OpenTelemetry variables (which win; see [`trace_export`]) say; `format`
/// overrides the configured log format (`--log-format`).
pub fn init_from_config(
    config: &crate::config::TelemetryConfig,
    format: Option<LogFormat>,
) -> Telemetry {
    let format = format.unwrap_or(config.log_format);
    JSON_LOG.store(
        format == LogFormat::Json,
        std::sync::atomic::Ordering::Relaxed,
    );
    let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let traces = trace_export(config, env).unwrap_or_else(|problem| {
        say("WARN", &format!("junction: traces disabled: {problem}"));
        None
    });
    init(format, &config.log_level, traces)
}

/// Where and how traces are exported, from the config and the standard
/// OpenTelemetry variables (`env`), which win: `OTEL_SDK_DISABLED=true`
/// turns export off; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is the traces URL
/// as is, `OTEL_EXPORTER_OTLP_ENDPOINT` a base that `/v1/traces` is added
/// to; `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `..._PROTOCOL`, must be
/// an OTLP/HTTP one (`http/protobuf`, `http/json`): gRPC is not built in,
/// and posting HTTP to a gRPC port would fail silently.
fn trace_export(
    config: &crate::config::TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TraceExport>, String> {
    if env("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let base = |endpoint: String| format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(base))
        .or_else(|| config.otlp_endpoint.clone().map(base));
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let protocol =
        env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"));
    let json = match protocol.as_deref() {
        Some("http/json") => true,
        Some("http/protobuf") => false,
        Some(other) => {
            return Err(format!(
                "OTLP protocol {other:?} is not supported (use http/protobuf or http/json)"
            ))
        }
        None => config.otlp_json,
    };
    Ok(Some(TraceExport {
        endpoint,
        json,
        service_name: env("OTEL_SERVICE_NAME").unwrap_or_else(|| config.service_name.clone()),
    }))
}

fn tracer_provider(export: &TraceExport) -> Result<SdkTracerProvider, String> {
    let endpoint = export.endpoint.clone();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(if export.json {
            Protocol::HttpJson
        } else {
            Protocol::HttpBinary
        })
        .with_endpoint(endpoint)
        .build()
        .map_err(|error| error.to_string())?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(export_watch::WatchedExporter::new(exporter))
        .with_resource(
            Resource::builder()
                .with_service_name(export.service_name.clone())
                .build(),
        )
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(vars: &[(&str, &str)]) -> Result<Option<TraceExport>, String> {
        let config = crate::config::TelemetryConfig {
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
            otlp_endpoint: Some("http://config:4318/".to_owned()),
            otlp_json: false,
            service_name: "junction".to_owned(),
        };
        trace_export(&config, |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    #[test]
    fn the_standard_variables_decide_the_export() {
        let url = |vars| export(vars).unwrap().map(|export| export.endpoint);
        assert_eq!(url(&[]).as_deref(), Some("http://config:4318/v1/traces"));
        assert_eq!(
            url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")]).as_deref(),
            Some("http://env:4318/v1/traces")
        );
        assert_eq!(
            url(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://traces:9/spans"
                )
            ])
            .as_deref(),
            Some("http://traces:9/spans")
        );
        assert_eq!(url(&[("OTEL_SDK_DISABLED", "true")]), None);
        assert!(url(&[("OTEL_SDK_DISABLED", "false")]).is_some());
        assert!(export(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).is_err());
        let json = export(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).unwrap();
        assert!(json.is_some_and(|export| export.json));
    }
}
