//! The error the gateway puts in place of an upstream answer it could not
//! read (not JSON, over the size a message may be, another request's id,
//! a request accepted without an answer).
//!
//! It travels to the waiting request the way the upstream's own answer
//! would (through rmcp's service loop), so it is a JSON-RPC error; but it
//! is the exchange that failed, not the upstream that refused, and a
//! `tools/call` says so as a tool error the model can read, as it does
//! when the same answer fails to be read on the direct path. The mark in
//! its `data` tells the two apart ([`is_unreadable_answer`]); it never
//! reaches a client, whose error the gateway writes anew. The mark's
//! value is drawn at random per process, so that an upstream cannot write
//! it into an error of its own.

use std::sync::LazyLock;

use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde_json::{json, Value};

/// The key in `data` that marks the gateway's own error.
const MARK: &str = "junction.unreadable_answer";

/// The mark's value: this process's own.
static MARK_VALUE: LazyLock<String> = LazyLock::new(|| uuid::Uuid::new_v4().to_string());

/// The error answering request `id` whose answer could not be read, for
/// the reason `why`.
pub fn unreadable_answer(id: Option<RequestId>, why: String) -> ServerJsonRpcMessage {
    JsonRpcMessage::Error(rmcp::model::JsonRpcError::new(
        id,
        ErrorData::internal_error(why, Some(json!({ MARK: *MARK_VALUE }))),
    ))
}

/// The same, for an id as it was read off the wire (any JSON value; one
/// that is no valid id answers nothing).
pub fn unreadable_answer_to(id: Value, why: String) -> Option<ServerJsonRpcMessage> {
    let id = serde_json::from_value::<RequestId>(id).ok()?;
    Some(unreadable_answer(Some(id), why))
}

/// Whether `error` is one the gateway made for an answer it could not read.
pub fn is_unreadable_answer(error: &ErrorData) -> bool {
    error.code == ErrorCode::INTERNAL_ERROR
        && error
            .data
            .as_ref()
            .and_then(|data| data.get(MARK))
            .and_then(Value::as_str)
            .is_some_and(|mark| mark == MARK_VALUE.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_s_error_is_told_from_an_upstream_s() {
        let Some(JsonRpcMessage::Error(made)) =
            unreadable_answer_to(json!(7), "not JSON".to_owned())
        else {
            panic!("an error");
        };
        assert_eq!(made.id, Some(RequestId::Number(7)));
        assert!(is_unreadable_answer(&made.error));
        assert!(!is_unreadable_answer(&ErrorData::internal_error(
            "the upstream's own",
            Some(json!({MARK: true}))
        )));
        let mut forged = made.error.clone();
        forged.code = ErrorCode::INVALID_PARAMS;
        assert!(!is_unreadable_answer(&forged));
        assert!(unreadable_answer_to(json!({"no": "id"}), String::new()).is_none());
    }
}
