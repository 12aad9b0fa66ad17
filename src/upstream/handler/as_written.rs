//! Server requests relayed to a client as JSON rather than through rmcp's
//! model, where the model would change or lose them.
//!
//! rmcp reads some numbers as `f32` (a sampling request's `temperature`,
//! its model preferences' priorities, content annotations' `priority`),
//! and `serde_json::to_value` writes those through an `f64`: the client
//! got 0.699999988079071 for 0.7. Written to text, serde writes an `f32`'s
//! shortest form, the upstream's digits. And a request rmcp could not read
//! at all (a sampling message with content of a kind it does not know)
//! reaches the handler as a custom request, which rmcp's default answered
//! -32601 with the method as its message, from a gateway that declared
//! sampling: such a sampling request goes to the client as written, for
//! the client to accept or refuse; an elicitation or roots request rmcp
//! could not read is refused as invalid, saying why.

use rmcp::{
    model::{
        ClientResult, CreateMessageRequestParams, CustomRequest, CustomResult, GetMeta,
        ServerRequest,
    },
    service::RequestContext,
    ErrorData, RoleClient,
};
use serde::Serialize;

use super::{metrics, missing_capability, unexpected_answer, UpstreamHandler};

/// The `sampling/createMessage` request to the client, its `f32`s as the
/// upstream wrote them.
pub(super) fn sampling_request(
    params: CreateMessageRequestParams,
) -> Result<ServerRequest, ErrorData> {
    let params = through_text(&params).map_err(|error| {
        ErrorData::internal_error(
            format!("the sampling request could not be written: {error}"),
            None,
        )
    })?;
    Ok(ServerRequest::CustomRequest(CustomRequest::new(
        "sampling/createMessage",
        Some(params),
    )))
}

/// `value` as JSON, written to text and read back (see the module's doc).
fn through_text(value: &impl Serialize) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_string(value).and_then(|text| serde_json::from_str(&text))
}

/// The client's answer to a sampling request relayed as written, as the
/// upstream gets it.
fn sampling_answer(answer: ClientResult) -> Result<CustomResult, ErrorData> {
    let result = match answer {
        ClientResult::CreateMessageResult(result) => through_text(&result),
        ClientResult::CustomResult(result) => return Ok(result),
        _ => return Err(unexpected_answer()),
    };
    result.map(CustomResult).map_err(|error| {
        ErrorData::internal_error(
            format!("the client's answer could not be written: {error}"),
            None,
        )
    })
}

/// A request of a method rmcp knows whose params it could not read as a
/// `P`: invalid params, saying why.
pub(super) fn unreadable<P: serde::de::DeserializeOwned>(request: &CustomRequest) -> ErrorData {
    let params = request.params.clone().unwrap_or(serde_json::Value::Null);
    let why = match serde_json::from_value::<P>(params) {
        Err(why) => why.to_string(),
        Ok(_) => "its params".to_owned(),
    };
    ErrorData::invalid_params(
        format!(
            "the gateway could not read this {} request: {}",
            request.method,
            crate::telemetry::redact::bounded(&why)
        ),
        None,
    )
}

impl UpstreamHandler {
    /// A `sampling/createMessage` rmcp could not read, to its client as
    /// written (with `_meta` as its client gets it), checked as
    /// [`rmcp::ClientHandler::create_message`] checks one it read.
    pub(super) async fn relay_sampling_as_written(
        &self,
        request: CustomRequest,
        context: &RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        let caller = self.target(context).await?;
        if !caller.profile.sampling {
            return Err(missing_capability("sampling"));
        }
        metrics().count_relayed(crate::telemetry::Relayed::Sampling);
        tracing::debug!("relaying a sampling request rmcp could not read, as written");
        let mut relayed = CustomRequest::new("sampling/createMessage", request.params);
        if let Some(meta) = self.passed_meta(context) {
            *relayed.get_meta_mut() = meta;
        }
        let answer = self
            .forward(&caller, ServerRequest::CustomRequest(relayed), context)
            .await?;
        sampling_answer(answer)
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CreateMessageResult, ElicitRequestParams, ErrorCode};
    use serde_json::json;

    use super::*;

    /// An elicitation rmcp could not read is invalid, and says why.
    #[test]
    fn an_unreadable_request_is_invalid_params_saying_why() {
        let request = CustomRequest::new("elicitation/create", Some(json!({"message": 5})));
        let error = unreadable::<ElicitRequestParams>(&request);
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        assert!(
            error
                .message
                .starts_with("the gateway could not read this elicitation/create request: ")
                && error.message.contains("did not match any variant"),
            "{}",
            error.message
        );
    }

    /// The client's answer reaches the upstream with its `f32`s as the
    /// client wrote them, and one rmcp could not read as it came.
    #[test]
    fn a_sampling_answer_keeps_its_numbers() {
        let written = json!({"role": "assistant", "model": "m",
            "content": {"type": "text", "text": "hi", "annotations": {"priority": 0.3}}});
        let typed: CreateMessageResult = serde_json::from_value(written).unwrap();
        let CustomResult(answer) =
            sampling_answer(ClientResult::CreateMessageResult(Box::new(typed))).unwrap();
        assert_eq!(
            answer["content"]["annotations"]["priority"].to_string(),
            "0.3"
        );
        let odd = json!({"role": "assistant", "content": {"type": "hologram"}});
        let CustomResult(passed) =
            sampling_answer(ClientResult::CustomResult(CustomResult(odd.clone()))).unwrap();
        assert_eq!(passed, odd);
    }
}
