//! The one place where routing and upstream failures become protocol
//! answers.
//!
//! A JSON-RPC error an upstream returned is relayed unchanged (code,
//! message, data): the gateway is not the one who failed. A tool call that
//! could not reach its upstream becomes a tool result with `isError: true`
//! naming the mount and the cause, so the model reading it can react; other
//! methods get a JSON-RPC error carrying the mount in `data`.

use rmcp::{
    model::{CallToolResult, ContentBlock},
    service::ServiceError,
    ErrorData,
};
use serde_json::json;

use crate::naming::MountName;

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("unknown prompt {0:?}")]
    UnknownPrompt(String),
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    #[error("mount {mount} is unavailable: {cause}")]
    MountUnavailable { mount: MountName, cause: String },
    #[error("mount {mount} failed: {cause}")]
    UpstreamFailed { mount: MountName, cause: String },
    #[error("mount {mount} answered with error {}: {}", .error.code.0, .error.message)]
    UpstreamError { mount: MountName, error: ErrorData },
}

impl RouteError {
    /// Classifies a failed upstream request.
    pub fn upstream(mount: &MountName, error: ServiceError) -> Self {
        match error {
            ServiceError::McpError(error) => RouteError::UpstreamError {
                mount: mount.clone(),
                error,
            },
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                RouteError::UpstreamFailed {
                    mount: mount.clone(),
                    cause: format!("the upstream connection is closed ({error})"),
                }
            }
            other => RouteError::UpstreamFailed {
                mount: mount.clone(),
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
            RouteError::MountUnavailable { mount, .. }
            | RouteError::UpstreamFailed { mount, .. } => {
                ErrorData::internal_error(message, Some(json!({ "mount": mount.as_str() })))
            }
            RouteError::UpstreamError { error, .. } => error,
        }
    }

    /// The answer for `tools/call`: transport-level failures are tool errors
    /// the model can read; protocol errors stay protocol errors.
    pub fn into_tool_answer(self) -> Result<CallToolResult, ErrorData> {
        match self {
            RouteError::MountUnavailable { .. } | RouteError::UpstreamFailed { .. } => Ok(
                CallToolResult::error(vec![ContentBlock::text(self.to_string())]),
            ),
            other => Err(other.into_mcp_error()),
        }
    }
}
