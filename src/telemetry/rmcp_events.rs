//! rmcp's own log lines, with the session ids in them fingerprinted and
//! the URLs cut to their origin.
//!
//! rmcp logs session ids as they are: the upstream session the gateway
//! fails to delete (an ERROR whenever an upstream went away first), the
//! downstream session it creates, or one it fails to close (in the message
//! text). Either id is all it takes to act in that session, so neither may
//! reach the log or a trace (see `redact.rs`). tracing cannot change an
//! event on its way, so the lines that name a session are kept from the
//! log and trace layers ([`WithoutSessionIds`]) and written again by
//! [`RewriteSessionIds`], same level and text, with each id replaced by
//! its fingerprint, under the target `junction::rmcp` (`origin` says
//! where it came from). rmcp's spans that carry a session id are kept out
//! of both layers, so no line inside one shows it either. The same goes
//! for a line naming an upstream's URL beyond its origin (rmcp prints its
//! HTTP client's errors whole, URL and all), which may carry a credential
//! (see `redact.rs`).
//!
//! The same way, rmcp's `warn` for each error a handler answers with (an
//! unknown tool a client called, a bad argument) is written again at
//! `debug`: no fault of the gateway's, and one warning per client mistake
//! buried the ones that matter. An internal error stays a warning. So is
//! rmcp's `error` for an answer it could not send because the session's
//! transport had closed (a client that ended its session, with a `DELETE`
//! or a disconnect, while a request ran): the client is gone, and nothing
//! is wrong with the gateway. And so are rmcp's errors for an upstream
//! server that cannot be reached (its worker's end): the supervisor says
//! the same at `warn` with the
//! mount's name, and `error` once the mount is down; rmcp's said it again
//! at `error` for every reconnect attempt.
//!
//! The events seen are only those the configured filter lets through (for
//! rmcp, `warn` and up by default).

use std::fmt::{Debug, Write};

use tracing::{field::Field, subscriber::Interest, Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

use super::redact::{fingerprint_session_ids, origins_only, session_fingerprint};

/// Keeps rmcp's events and spans that carry a session id from a layer.
pub struct WithoutSessionIds;

impl<S: Subscriber> Filter<S> for WithoutSessionIds {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        !(metadata.is_span() && span_carries_a_session_id(metadata))
    }

    /// Decided once per callsite (the default asks again on every span
    /// and event, on the hot path), except for rmcp's events, which
    /// `event_enabled` looks at one by one.
    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if !is_rmcp(metadata) {
            Interest::always()
        } else if metadata.is_span() {
            match span_carries_a_session_id(metadata) {
                true => Interest::never(),
                false => Interest::always(),
            }
        } else {
            Interest::sometimes()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        rewritten(event).is_none()
    }
}

/// Writes each rmcp event that names a session again, fingerprinted.
///
/// It must be the outermost layer: a layer gets an event after every
/// layer inside it, so the line written here does not interleave with the
/// one being handled. It is written through the global dispatcher, which
/// tracing allows from inside a layer only while no scoped dispatcher
/// (`with_default`) exists, as in the gateway; otherwise the line is lost,
/// never the id shown.
pub struct RewriteSessionIds;

impl<S: Subscriber> Layer<S> for RewriteSessionIds {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let Some((line, level)) = rewritten(event) else {
            return;
        };
        let origin = event.metadata().target();
        match level {
            Level::ERROR => {
                tracing::error!(target: "junction::rmcp", origin = origin, "{line}")
            }
            Level::WARN => {
                tracing::warn!(target: "junction::rmcp", origin = origin, "{line}")
            }
            Level::INFO => {
                tracing::info!(target: "junction::rmcp", origin = origin, "{line}")
            }
            Level::DEBUG => {
                tracing::debug!(target: "junction::rmcp", origin = origin, "{line}")
            }
            Level::TRACE => {
                tracing::trace!(target: "junction::rmcp", origin = origin, "{line}")
            }
        }
    }
}

fn is_rmcp(metadata: &Metadata<'_>) -> bool {
    metadata.target() == "rmcp" || metadata.target().starts_with("rmcp::")
}

/// rmcp's session spans record the session id as `id`; its
/// `transport_worker` span (trace level) records the worker's `name`,
/// which for a downstream session is `streamable-http-session-<id>`. A
/// span's fields cannot be looked at when it is enabled (only its
/// callsite), so every such span is left out.
fn span_carries_a_session_id(metadata: &Metadata<'_>) -> bool {
    is_rmcp(metadata)
        && ["session_id", "id", "name"]
            .iter()
            .any(|field| metadata.fields().field(field).is_some())
}

/// The line (and level) to write instead of `event`, if it is rmcp's and
/// names a session (by a `session_id` field, or in its message: `"...
/// session <id>: ..."`) or a URL beyond its origin, or is an error answer
/// logged at `warn` that is no fault of the gateway's.
fn rewritten(event: &Event<'_>) -> Option<(String, Level)> {
    if !is_rmcp(event.metadata()) {
        return None;
    }
    let mut fields = RmcpFields::default();
    event.record(&mut fields);
    // Ids stand in the message and in other fields (an error's text:
    // "Session not found: <id>").
    let written = fields.rewritten(None);
    let fingerprinted = fingerprint_session_ids(&written);
    let names_a_session = fields.session_id.is_some() || fingerprinted.is_some();
    let line = fingerprinted.unwrap_or(written);
    let redacted = origins_only(&line);
    let level = match answered_a_refusal(event.metadata(), &fields)
        || answered_a_closed_session(event.metadata(), &fields)
        || server_unreachable(event.metadata(), &fields)
    {
        true => Level::DEBUG,
        false => *event.metadata().level(),
    };
    let changed = redacted != line || names_a_session || level != *event.metadata().level();
    changed.then_some((redacted, level))
}

/// Whether `event` is rmcp's `warn` for an error answer to a request,
/// other than an internal error: rmcp logs one for every error a handler
/// returns, so every unknown tool or bad argument a client sent (and
/// every sampling request the gateway refused an upstream) was a warning
/// in the gateway's log. Kept at `debug`; an internal error (-32603) stays.
fn answered_a_refusal(metadata: &Metadata<'_>, fields: &RmcpFields) -> bool {
    const INTERNAL_ERROR: i32 = -32603;
    metadata.target() == "rmcp::service"
        && *metadata.level() == Level::WARN
        && fields.message == "response error"
        && error_code(&fields.others).is_some_and(|code| code != INTERNAL_ERROR)
}

/// Whether `event` is rmcp's `error` for an answer its session's
/// transport was closed to (as its loop runs, or as it drains the
/// answers of requests still running when it stopped): the client ended
/// the session while its request ran. Kept at `debug`; a send that failed otherwise stays.
fn answered_a_closed_session(metadata: &Metadata<'_>, fields: &RmcpFields) -> bool {
    metadata.target() == "rmcp::service"
        && *metadata.level() == Level::ERROR
        && [
            "fail to response message",
            "failed to send pending response during drain",
        ]
        .contains(&fields.message.as_str())
        && fields.others == " error=Transport closed"
}

/// Whether `event` is rmcp's `error` for an upstream server it could not
/// reach: its client worker's end (the reqwest error's `Connect` kind),
/// or the failed `GET` of its message stream (a request that could not
/// be sent). rmcp's lines come on every attempt and name no mount. For
/// the mount's own sessions the session's watch ends such a session and
/// the supervisor says so, naming the mount; a client's (per-session)
/// session stays open through the gap, and its calls fail saying why. The failed `DELETE` of such a session stays an error: it
/// is logged once, at the session's close.
fn server_unreachable(metadata: &Metadata<'_>, fields: &RmcpFields) -> bool {
    let message = fields.message.as_str();
    metadata.target().starts_with("rmcp::transport")
        && *metadata.level() == Level::ERROR
        && ((message.starts_with("worker quit with fatal:") && message.contains("Error(Connect,"))
            || message
                .starts_with("fail to get common stream: Client error: error sending request"))
}

/// The JSON-RPC error code in a recorded `ErrorData` (`ErrorCode(-32602)`).
fn error_code(fields: &str) -> Option<i32> {
    let (_, rest) = fields.split_once("ErrorCode(")?;
    rest.split_once(')')?.0.parse().ok()
}

/// What an rmcp event said, its session id apart.
#[derive(Default)]
struct RmcpFields {
    message: String,
    session_id: Option<String>,
    /// The other fields, as ` name=value` pairs.
    others: String,
}

impl RmcpFields {
    /// The line, given its message with ids fingerprinted (if it had any).
    fn rewritten(&self, message: Option<String>) -> String {
        let mut line = message.unwrap_or_else(|| self.message.clone());
        if let Some(id) = &self.session_id {
            let _ = write!(line, " session={}", session_fingerprint(id));
        }
        line.push_str(&self.others);
        line
    }
}

impl tracing::field::Visit for RmcpFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "session_id" => self.session_id = Some(value.to_owned()),
            name => {
                let _ = write!(self.others, " {name}={value:?}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            // `?id` of a string type: its Debug form is quoted.
            "session_id" => {
                self.session_id = Some(format!("{value:?}").trim_matches('"').to_owned())
            }
            name => {
                let _ = write!(self.others, " {name}={value:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::span;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// What a layer behind [`WithoutSessionIds`] gets: event targets and
    /// messages, and span names.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut fields = RmcpFields::default();
            event.record(&mut fields);
            let session = fields
                .session_id
                .map(|id| format!(" session_id={id:?}"))
                .unwrap_or_default();
            let line = format!(
                "{}: {}{}{session}",
                event.metadata().target(),
                fields.message,
                fields.others
            );
            self.0.lock().unwrap().push(line);
        }

        fn on_new_span(&self, attributes: &span::Attributes<'_>, _: &span::Id, _: Context<'_, S>) {
            let name = attributes.metadata().name();
            self.0.lock().unwrap().push(format!("span {name}"));
        }
    }

    #[test]
    fn rmcps_lines_and_spans_with_session_ids_are_kept_from_the_layer() {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(WithoutSessionIds));
        let (upstream, downstream) = ("fe451486-55ae-4d56-9f3e-1c20588302f6", "d0c5e8f2a1b3");
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "rmcp::transport::streamable_http_client", session_id = upstream, "fail to delete session: gone");
            tracing::error!(target: "rmcp::transport::streamable_http_server::tower", "Failed to close session {downstream}: closed");
            tracing::warn!(target: "rmcp::service", "a line about no session");
            tracing::warn!(target: "junction::x", session_id = "kept-as-is", "not rmcp's");
            let _ = tracing::info_span!(target: "rmcp::transport", "streamable_http_session", id = downstream);
            let worker = format!("streamable-http-session-{downstream}");
            let _ = tracing::info_span!(target: "rmcp::transport::worker", "transport_worker", name = worker);
            let _ = tracing::info_span!(target: "rmcp::service", "serve_inner");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "rmcp::service: a line about no session",
                "junction::x: not rmcp's session_id=\"kept-as-is\"",
                "span serve_inner",
            ]
        );
    }

    /// rmcp's warning for an error answer is kept from the layer (and
    /// written again at `debug`), unless it is an internal error.
    #[test]
    fn an_error_answer_that_is_no_fault_of_the_gateway_is_no_warning() {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(WithoutSessionIds));
        let refused = rmcp::ErrorData::invalid_params("unknown tool \"x\"", None);
        let internal = rmcp::ErrorData::internal_error("broke", None);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "rmcp::service", id = 2, error = ?refused, "response error");
            tracing::warn!(target: "rmcp::service", id = 3, error = ?internal, "response error");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].contains("-32603"), "{seen:?}");
        assert_eq!(error_code(&format!(" error={refused:?}")), Some(-32602));
    }

    /// rmcp's error for an answer to a session whose transport closed (the
    /// client ended it while its request ran) is kept from the layer (and
    /// written again at `debug`); a send that failed otherwise is not.
    #[test]
    fn an_answer_to_a_session_the_client_ended_is_no_error() {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(WithoutSessionIds));
        tracing::subscriber::with_default(subscriber, || {
            let closed = "Transport closed";
            let broken = "Broken pipe (os error 32)";
            tracing::error!(target: "rmcp::service", error = %closed, "fail to response message");
            tracing::error!(target: "rmcp::service", error = %closed, "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", error = %broken, "fail to response message");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            ["rmcp::service: fail to response message error=Broken pipe (os error 32)"]
        );
    }

    /// rmcp's errors for a server that cannot be reached are kept from
    /// the layer (and written again at `debug`); its other fatal ends stay.
    #[test]
    fn a_server_that_cannot_be_reached_is_said_once_by_the_supervisor() {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(WithoutSessionIds));
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "rmcp::transport::worker", "worker quit with fatal: Transport channel closed, when Client(reqwest::Error {{ kind: Request, source: hyper_util::client::legacy::Error(Connect, ConnectError(\"tcp connect error\")) }})");
            tracing::error!(target: "rmcp::transport::worker", "worker quit with fatal: Unexpected content type: text/html, when receive");
            tracing::error!(target: "rmcp::transport::streamable_http_client", "fail to get common stream: Client error: error sending request for url (http://127.0.0.1:9/mcp)");
            tracing::error!(target: "rmcp::transport::streamable_http_client", "fail to get common stream: unexpected server response: HTTP 500");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "rmcp::transport::worker: worker quit with fatal: Unexpected content type: text/html, when receive",
                "rmcp::transport::streamable_http_client: fail to get common stream: unexpected server response: HTTP 500",
            ]
        );
    }

    #[test]
    fn a_rewritten_line_has_fingerprints_for_ids() {
        let id = "fe451486-55ae-4d56-9f3e-1c20588302f6";
        let fields = RmcpFields {
            message: format!("Failed to close session {id}: closed"),
            session_id: Some(id.to_owned()),
            others: " error=\"x\"".to_owned(),
        };
        let fingerprint = session_fingerprint(id);
        assert_eq!(
            fields.rewritten(fingerprint_session_ids(&fields.message)),
            format!(
                "Failed to close session {fingerprint}: closed session={fingerprint} error=\"x\""
            )
        );
    }
}
