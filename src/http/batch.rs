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
//! An answer that is none of these (the session is unknown, the gateway is
//! draining) is the batch's answer: the same would have been said of every
//! message.

use axum::{
    body::Body,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use futures::{future::BoxFuture, stream::BoxStream, StreamExt};
use sse_stream::{Sse, SseStream};

type Events = BoxStream<'static, Result<Sse, std::io::Error>>;

/// What one message's answer adds to the batch's.
enum Part {
    Nothing,
    Events(Events),
    /// The batch's whole answer.
    Final(Response),
}

/// The batch's answer, from its messages' answers (see the module doc).
pub fn answer(answers: Vec<BoxFuture<'static, Response>>) -> BoxFuture<'static, Response> {
    Box::pin(async move {
        let answers = futures::future::join_all(answers).await;
        let mut streams = Vec::new();
        for answer in answers {
            match part_of(answer).await {
                Part::Nothing => {}
                Part::Events(events) => streams.push(events),
                Part::Final(response) => return response,
            }
        }
        if streams.is_empty() {
            return StatusCode::ACCEPTED.into_response();
        }
        let events = futures::stream::select_all(streams).map(|event| event.map(written));
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
            .map(|event| event.map_err(std::io::Error::other))
            .boxed();
        return Part::Events(events);
    }
    if content_type.starts_with("application/json") {
        // A JSON-RPC answer, whatever the status (an invalid message's is
        // 400): one event of the batch's stream. Bounded: the gateway
        // wrote it (a quick call's answer, or an error).
        let bytes = match axum::body::to_bytes(answer.into_body(), usize::MAX).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(%error, "a batch message's answer could not be read");
                return Part::Nothing;
            }
        };
        let data = String::from_utf8_lossy(&bytes).into_owned();
        let event = Sse::default().event("message").data(data);
        return Part::Events(futures::stream::once(async { Ok(event) }).boxed());
    }
    Part::Final(answer)
}
