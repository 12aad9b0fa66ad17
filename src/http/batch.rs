//! The answer to a JSON-RPC batch, made of the answers to its messages.
//!
//! Protocol 2025-03-26 lets a client POST a batch and says a server must
//! take it; later versions dropped batches (`json_guard` decides which
//! bodies are split). rmcp takes one message per POST, so each message of
//! a batch is checked and run as if posted alone (its own request stream,
//! resumable by its own event ids), and their answers are merged here: a
//! message that needs no answer (a notification, a response) adds nothing;
//! a JSON answer (a quick call's, or an error for an invalid message)
//! becomes one event; an SSE answer's events (progress, server requests,
//! the response) are passed on as they come, interleaved with the others'.
//! With nothing to say the batch gets 202, as a lone notification does.
//! An answer that is none of these (the session is unknown: rmcp's plain
//! 404) is the batch's answer when every message got it; otherwise it
//! becomes a JSON-RPC error to its request (a `DELETE` raced the batch,
//! and the other messages' answers still go out).
//!
//! A batch's stream cannot be resumed as a whole: each event keeps the id
//! of the message stream it came from, so a `Last-Event-ID` resumes that
//! one message's stream. Clients of 2025-03-26 had no resumption to lose.

use axum::{
    body::Body,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use futures::{future::BoxFuture, stream::BoxStream, StreamExt};
use sse_stream::{Sse, SseStream};

use serde_json::{json, Value};

/// A message's answer as SSE bytes on the wire, event by event.
type Events = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// What one message's answer adds to the batch's.
enum Part {
    Nothing,
    Events(Events),
    /// Neither: the batch's whole answer if every message got one.
    Other(Response),
}

/// The batch's answer, from its messages' answers, each with the
/// message's id (see the module doc).
pub fn answer(answers: Vec<(Value, BoxFuture<'static, Response>)>) -> BoxFuture<'static, Response> {
    Box::pin(async move {
        let (ids, answers): (Vec<Value>, Vec<_>) = answers.into_iter().unzip();
        let answers = futures::future::join_all(answers).await;
        let mut parts = Vec::with_capacity(answers.len());
        for answer in answers {
            parts.push(part_of(answer).await);
        }
        if parts.iter().all(|part| matches!(part, Part::Other(_))) {
            if let Some(Part::Other(response)) = parts.into_iter().next() {
                return response;
            }
            return StatusCode::ACCEPTED.into_response();
        }
        let mut streams = Vec::new();
        for (id, part) in ids.into_iter().zip(parts) {
            match part {
                Part::Nothing => {}
                Part::Events(events) => streams.push(events),
                Part::Other(response) if !id.is_null() => {
                    streams.push(one_event(refusal(id, response)))
                }
                Part::Other(_) => {}
            }
        }
        if streams.is_empty() {
            return StatusCode::ACCEPTED.into_response();
        }
        let events = futures::stream::select_all(streams);
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from_stream(events),
        )
            .into_response()
    })
}

/// `event` as it goes on the wire: each line of its data a `data:` line
/// of its own (a field may not hold a line break).
fn written(event: Sse) -> Bytes {
    let mut out = String::new();
    if let Some(id) = &event.id {
        out.push_str(&format!("id: {id}\n"));
    }
    if let Some(name) = &event.event {
        out.push_str(&format!("event: {name}\n"));
    }
    if let Some(retry) = event.retry {
        out.push_str(&format!("retry: {retry}\n"));
    }
    if let Some(data) = &event.data {
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}\n"));
        }
    }
    out.push('\n');
    Bytes::from(out)
}

async fn part_of(answer: Response) -> Part {
    let status = answer.status();
    if status == StatusCode::ACCEPTED {
        return Part::Nothing;
    }
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("text/event-stream") && status.is_success() {
        let bytes = answer.into_body().into_data_stream();
        let events = SseStream::from_bytes_stream(bytes)
            .map(|event| event.map(written).map_err(std::io::Error::other))
            .boxed();
        return Part::Events(events);
    }
    if content_type.starts_with("application/json") {
        // A JSON-RPC answer, whatever the status (an invalid message's is
        // 400): one event of the batch's stream. The gateway wrote it (a
        // quick call's answer, or an error): one line of JSON.
        let bytes = match axum::body::to_bytes(answer.into_body(), usize::MAX).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(%error, "a batch message's answer could not be read");
                return Part::Nothing;
            }
        };
        return Part::Events(one_event(bytes));
    }
    Part::Other(answer)
}

/// One `message` event carrying `message` (one line of JSON).
fn one_event(message: Bytes) -> Events {
    let mut event = Vec::with_capacity(message.len() + 24);
    event.extend_from_slice(b"event: message\ndata: ");
    event.extend_from_slice(&message);
    event.extend_from_slice(b"\n\n");
    futures::stream::once(async move { Ok(Bytes::from(event)) }).boxed()
}

/// A JSON-RPC error to request `id` saying what `response` (neither JSON
/// nor SSE: rmcp's plain refusals) was. Its body is not quoted: rmcp's
/// internal errors name the session's id, which the gateway never
/// repeats (see `without_internal_details` in `http/mod.rs`).
fn refusal(id: Value, response: Response) -> Bytes {
    let status = response.status();
    let error = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": format!(
                "HTTP {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or_default()
            ),
        },
    });
    Bytes::from(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(response: Response) -> BoxFuture<'static, Response> {
        Box::pin(async move { response })
    }

    fn json_answer(text: &'static str) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], text).into_response()
    }

    async fn body_text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn answers_are_merged_and_a_lone_refusal_becomes_an_error() {
        let merged = answer(vec![
            (Value::Null, ready(StatusCode::ACCEPTED.into_response())),
            (
                json!(1),
                ready(json_answer(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)),
            ),
            (
                json!("gone"),
                ready((StatusCode::NOT_FOUND, "session abc123 not found").into_response()),
            ),
        ])
        .await;
        assert_eq!(merged.status(), StatusCode::OK);
        assert_eq!(merged.headers()[header::CONTENT_TYPE], "text/event-stream");
        let text = body_text(merged).await;
        assert!(
            text.contains("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            "{text}"
        );
        assert!(
            text.contains(r#""id":"gone","error":{"code":-32603,"message":"HTTP 404 Not Found"}"#),
            "{text}"
        );
        assert!(!text.contains("abc123"), "the body is not quoted: {text}");
    }

    #[tokio::test]
    async fn a_refusal_every_message_got_is_the_batchs() {
        let refused = || ready((StatusCode::NOT_FOUND, "Not Found").into_response());
        let merged = answer(vec![(json!(1), refused()), (json!(2), refused())]).await;
        assert_eq!(merged.status(), StatusCode::NOT_FOUND);
        let quiet = answer(vec![(
            Value::Null,
            ready(StatusCode::ACCEPTED.into_response()),
        )])
        .await;
        assert_eq!(quiet.status(), StatusCode::ACCEPTED);
    }

    #[test]
    fn a_multi_line_data_field_is_written_line_by_line() {
        let event = Sse::default().id("7").event("message").data("a\nb");
        assert_eq!(
            &written(event)[..],
            b"id: 7\nevent: message\ndata: a\ndata: b\n\n"
        );
    }
}
