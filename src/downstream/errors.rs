//! The one place where routing and upstream failures become protocol
//! answers.
//!
//! A JSON-RPC error an upstream returned keeps its code and message: the
//! gateway is not the one who failed. Its `data` changes only as the client
//! needs: a `data.uri` gets the mount's namespace, and an error without
//! `data` gets `data.mount`. A tool call that
//! could not reach its upstream becomes a tool result with `isError: true`
//! naming the mount and the cause, so the model reading it can react; other
//! methods get a JSON-RPC error carrying the mount in `data`.

use rmcp::{
    model::{CallToolResult, ContentBlock},
    service::ServiceError,
    ErrorData,
};
use serde_json::json;

use super::SessionState;
use crate::{
    config::Isolation,
    gateway::Mount,
    naming::{MountName, Namespace},
    upstream::RequestError,
};

/// JSON-RPC error code for "request timed out" (the TypeScript SDK's
/// `ErrorCode.RequestTimeout`; the spec leaves it to implementations).
pub const REQUEST_TIMEOUT: i32 = -32001;

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("unknown prompt {0:?}")]
    UnknownPrompt(String),
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    #[error("unknown task {0:?}")]
    UnknownTask(String),
    /// A task this session created whose upstream session has ended (a
    /// crash, a config reload that changed the mount, a per-session
    /// upstream closed): the upstream's tasks went with it.
    #[error("task {id:?} is gone: the upstream session of mount {mount} that ran it has ended (a restart, a config reload, or its per-session upstream closing)")]
    TaskGone { id: String, mount: MountName },
    #[error("mount {mount} is unavailable: {cause}")]
    MountUnavailable { mount: MountName, cause: String },
    #[error("mount {mount} failed: {cause}")]
    UpstreamFailed { mount: MountName, cause: String },
    #[error("mount {mount} timed out: {cause}")]
    TimedOut { mount: MountName, cause: String },
    #[error("mount {mount} answered with error {}: {}", .error.code.0, .error.message)]
    UpstreamError {
        mount: MountName,
        namespace: Namespace,
        error: ErrorData,
    },
    #[error("mount {mount} does not support {feature}")]
    Unsupported {
        mount: MountName,
        feature: &'static str,
    },
    /// A per-session limit of the gateway's own.
    #[error("{what}")]
    LimitExceeded { what: String, limit: usize },
    #[error("the session has ended")]
    SessionEnded,
}

/// How often a mount's failing requests are logged, at most.
const FAILURES_SAID_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl RouteError {
    /// Classifies a failed upstream request to `mount`. A failure on the
    /// upstream's side or the way there (not a JSON-RPC error the
    /// upstream answered with, nor a client's cancel) is logged, at most
    /// every 10 s per mount: operators saw only a metric.
    pub fn upstream(mount: &Mount, error: RequestError) -> Self {
        let cancelled = matches!(error, RequestError::Service(ServiceError::Cancelled { .. }));
        let routed = Self::classify(mount, error);
        if let RouteError::UpstreamFailed { cause, .. } | RouteError::TimedOut { cause, .. } =
            &routed
        {
            if !cancelled {
                if let Some(held_back) = mount.failures_said().due(FAILURES_SAID_EVERY) {
                    tracing::warn!(mount = %mount.config.name, %cause, held_back, "a request to the upstream failed (said at most every 10 s per mount; held_back: failures not said since)");
                }
            }
        }
        routed
    }

    /// What a failed upstream request of `state`'s session tells its
    /// client. One cancelled because the session ended (a DELETE, its
    /// expiry) is not the mount's failure ("mount … failed: task
    /// cancelled", a tool error counted against it): the session ended,
    /// whichever way (the quick path, rmcp's handler, the task methods)
    /// the request came.
    pub(crate) fn of_sessions_request(
        state: &SessionState,
        mount: &Mount,
        error: RequestError,
    ) -> Self {
        let cancelled = matches!(error, RequestError::Service(ServiceError::Cancelled { .. }));
        match cancelled && state.quick_calls_ended() {
            true => RouteError::SessionEnded,
            false => Self::upstream(mount, error),
        }
    }

    fn classify(mount: &Mount, error: RequestError) -> Self {
        let mount_config = &mount.config;
        let answered = matches!(error, RequestError::Service(ServiceError::McpError(_)));
        if let Some(cause) =
            cut_short_by_the_gateway(mount.is_retired(), crate::signals::stopping_now())
        {
            if !answered {
                // Whatever the upstream's end looked like from here (it
                // went away, its stream broke), the gateway ended it: it
                // is not restarted, and the upstream did nothing wrong.
                return RouteError::UpstreamFailed {
                    mount: mount_config.name.clone(),
                    cause: cause.to_owned(),
                };
            }
        }
        let mount = mount_config.name.clone();
        match error {
            // The answer came but could not be read: the exchange failed,
            // as when the direct path cannot read one.
            RequestError::Service(ServiceError::McpError(error))
                if crate::upstream::unreadable_answer::is_unreadable_answer(&error) =>
            {
                RouteError::UpstreamFailed {
                    mount,
                    cause: error.message.into_owned(),
                }
            }
            RequestError::Service(ServiceError::McpError(error)) => RouteError::UpstreamError {
                mount,
                namespace: mount_config.namespace.clone(),
                error,
            },
            RequestError::Ended => RouteError::UpstreamFailed {
                mount,
                cause: match mount_config.isolation {
                    Isolation::Shared => {
                        "the upstream server went away during the request; the gateway is restarting it"
                    }
                    Isolation::PerSession => {
                        "the upstream server went away during the request; it is restarted on the next call"
                    }
                }
                .to_owned(),
            },
            lost @ RequestError::AnswerLost => RouteError::UpstreamFailed {
                mount,
                cause: lost.to_string(),
            },
            unreachable @ RequestError::Unreachable(_) => RouteError::UpstreamFailed {
                mount,
                cause: match mount_config.isolation {
                    Isolation::Shared => format!("{unreachable}; the gateway is restarting it"),
                    Isolation::PerSession => {
                        format!("{unreachable}; it is reopened on the next call")
                    }
                },
            },
            RequestError::Service(ServiceError::TransportSend(error)) => {
                RouteError::UpstreamFailed {
                    mount,
                    cause: format!(
                        "the exchange with the upstream failed: {}",
                        crate::upstream::http_client::with_causes(&*error.error)
                    ),
                }
            }
            RequestError::Expired { .. } => RouteError::UpstreamFailed {
                mount,
                cause: format!("{error}; the gateway is reconnecting"),
            },
            timeout @ (RequestError::Idle(_) | RequestError::Ceiling(_)) => RouteError::TimedOut {
                mount,
                cause: timeout.to_string(),
            },
            RequestError::Service(other) => RouteError::UpstreamFailed {
                mount,
                cause: other.to_string(),
            },
        }
    }

    /// The answer for any method but `tools/call`.
    pub fn into_mcp_error(self) -> ErrorData {
        let message = self.to_string();
        match self {
            // Unknown tool / prompt: the spec's "invalid params".
            RouteError::UnknownTool(_) | RouteError::UnknownPrompt(_) => {
                ErrorData::invalid_params(message, None)
            }
            RouteError::UnknownResource(uri) => {
                ErrorData::resource_not_found(message, Some(json!({ "uri": uri })))
            }
            RouteError::UnknownTask(id) => {
                ErrorData::invalid_params(message, Some(json!({ "taskId": id })))
            }
            RouteError::TaskGone { id, mount } => ErrorData::invalid_params(
                message,
                Some(json!({ "taskId": id, "mount": mount.as_str() })),
            ),
            RouteError::MountUnavailable { mount, .. }
            | RouteError::UpstreamFailed { mount, .. } => {
                ErrorData::internal_error(message, Some(json!({ "mount": mount.as_str() })))
            }
            // The code the TypeScript SDK uses for its own request timeouts.
            RouteError::TimedOut { mount, .. } => ErrorData::new(
                rmcp::model::ErrorCode(REQUEST_TIMEOUT),
                message,
                Some(json!({ "mount": mount.as_str() })),
            ),
            RouteError::UpstreamError {
                mount,
                namespace,
                mut error,
            } => {
                // Code, message and data are the upstream's (a -32042 must
                // reach the client as sent); a URI in `data` is given the
                // namespace so the client can use it, and an error without
                // data says which mount answered.
                match &mut error.data {
                    Some(serde_json::Value::Object(data)) => {
                        if let Some(serde_json::Value::String(uri)) = data.get_mut("uri") {
                            *uri = namespace.qualify_uri(uri);
                        }
                    }
                    None => error.data = Some(json!({ "mount": mount.as_str() })),
                    Some(_) => {}
                }
                error
            }
            RouteError::Unsupported { .. } => {
                ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, message, None)
            }
            RouteError::LimitExceeded { limit, .. } => ErrorData::new(
                rmcp::model::ErrorCode(super::LIMIT_EXCEEDED),
                message,
                Some(json!({ "limit": limit })),
            ),
            RouteError::SessionEnded => ErrorData::invalid_request(message, None),
        }
    }

    /// The answer for `tools/call`: transport-level failures are tool errors
    /// the model can read; protocol errors stay protocol errors.
    pub fn into_tool_answer(self) -> Result<CallToolResult, ErrorData> {
        match self {
            RouteError::MountUnavailable { .. }
            | RouteError::UpstreamFailed { .. }
            | RouteError::TimedOut { .. } => Ok(CallToolResult::error(vec![ContentBlock::text(
                self.to_string(),
            )])),
            other => Err(other.into_mcp_error()),
        }
    }
}

/// Why a request's upstream exchange ended, if the gateway itself ended
/// it: a reload retired the mount, or a second stop signal is ending the
/// process (its upstreams killed first). Either way "restarting it" would
/// be untrue.
fn cut_short_by_the_gateway(retired: bool, stopping_now: bool) -> Option<&'static str> {
    if stopping_now {
        Some("the gateway is stopping at once (a second stop signal) and killed the upstream")
    } else if retired {
        Some("a config reload removed or changed the mount during the request")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_the_gateway_ended_is_not_said_to_be_restarted() {
        assert_eq!(cut_short_by_the_gateway(false, false), None);
        let reload = cut_short_by_the_gateway(true, false).unwrap();
        assert!(reload.contains("reload"), "{reload}");
        // A retired mount's request cut short by the stop: the stop is why.
        for retired in [false, true] {
            let stop = cut_short_by_the_gateway(retired, true).unwrap();
            assert!(stop.contains("stopping"), "{stop}");
            assert!(!stop.contains("restart"), "{stop}");
        }
    }

    fn upstream_error(data: Option<serde_json::Value>) -> ErrorData {
        RouteError::UpstreamError {
            mount: MountName::new("ev").unwrap(),
            namespace: Namespace::new("ev").unwrap(),
            error: ErrorData::resource_not_found("no resource demo://x", data),
        }
        .into_mcp_error()
    }

    #[test]
    fn upstream_errors_keep_code_and_message_and_gain_the_mount() {
        let error = upstream_error(Some(json!({"uri": "demo://x", "extra": 1})));
        assert_eq!(error.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        assert_eq!(error.message, "no resource demo://x");
        assert_eq!(error.data, Some(json!({"uri": "ev+demo://x", "extra": 1})));
        assert_eq!(upstream_error(None).data, Some(json!({"mount": "ev"})));
        assert_eq!(upstream_error(Some(json!([1]))).data, Some(json!([1])));
    }

    #[test]
    fn unreachable_upstreams_are_tool_errors_naming_the_mount() {
        let result = RouteError::MountUnavailable {
            mount: MountName::new("broken").unwrap(),
            cause: "cannot start `nope`".to_owned(),
        }
        .into_tool_answer()
        .unwrap();
        assert_eq!(result.is_error, Some(true));
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(
            text.contains("mount broken is unavailable: cannot start `nope`"),
            "{text}"
        );
        let unknown = RouteError::UnknownTool("x__y".to_owned()).into_tool_answer();
        assert_eq!(
            unknown.unwrap_err().code,
            rmcp::model::ErrorCode::INVALID_PARAMS
        );
    }
}
