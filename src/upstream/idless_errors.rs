//! Errors without an id on a request's event stream, made its answer.
//!
//! A server that cannot tie an error to a request sends it with no id (or
//! `id: null`). On the event stream answering the `POST` of one request it
//! can only be that request's answer, as one answering the `POST` with JSON
//! is (`http_client`): rmcp, matching answers by id, would leave the
//! request waiting out its timeout. rmcp resumes a request's stream that
//! ended before its answer (broken, or closed by the server to be polled,
//! SEP-1699) with a `GET` carrying `Last-Event-ID`, which does not say
//! which request it continues: [`AnswerStreams`] remembers, for each
//! stream that ended unanswered, its last event id and its request, so
//! that the errors of the resumed stream answer the request too.

use std::{
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use futures::{stream::BoxStream, Stream, StreamExt};
use rmcp::{model::RequestId, transport::streamable_http_client::SseError};
use sse_stream::Sse;

use super::bounded_map::BoundedMap;

/// How many streams that ended unanswered one upstream session remembers:
/// rmcp resumes within seconds, and a stream whose resume never comes (its
/// request cancelled, rmcp giving up) is forgotten only by this bound.
const REMEMBERED_STREAMS: usize = 64;

/// The request streams of one upstream session that ended before their
/// answer, by the last event id they carried.
#[derive(Default)]
pub(super) struct AnswerStreams {
    unanswered: Mutex<BoundedMap<RequestId, REMEMBERED_STREAMS>>,
}

impl AnswerStreams {
    /// `events`, the stream answering the `POST` of request `id`, with its
    /// errors without an id given `id`.
    pub(super) fn answering(
        self: &Arc<Self>,
        events: BoxStream<'static, Result<Sse, SseError>>,
        id: RequestId,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        self.continuing(events, id, None)
    }

    /// [`Self::answering`] for a stream that continues one which ended at
    /// `last_event_id`: ended again before a new id, it is remembered
    /// there (rmcp resumes from the same id again).
    fn continuing(
        self: &Arc<Self>,
        events: BoxStream<'static, Result<Sse, SseError>>,
        id: RequestId,
        last_event_id: Option<String>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        AnsweringStream {
            events,
            id,
            last_event_id,
            answered: false,
            streams: self.clone(),
        }
        .boxed()
    }

    /// `events` of a `GET` with `last_event_id`: if that is where a
    /// request's stream ended unanswered, its continuation (as
    /// [`Self::answering`]); otherwise as they come.
    pub(super) fn resumed(
        self: &Arc<Self>,
        events: BoxStream<'static, Result<Sse, SseError>>,
        last_event_id: Option<&str>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        let Some(last) = last_event_id else {
            return events;
        };
        let request = self.lock().remove(last);
        match request {
            Some(id) => self.continuing(events, id, Some(last.to_owned())),
            None => events,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BoundedMap<RequestId, REMEMBERED_STREAMS>> {
        self.unanswered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The events of one request's stream; see [`AnswerStreams::answering`].
struct AnsweringStream {
    events: BoxStream<'static, Result<Sse, SseError>>,
    id: RequestId,
    /// The id of the last event that had one: where a resume starts.
    last_event_id: Option<String>,
    /// Whether an event that can only be an answer went by.
    answered: bool,
    streams: Arc<AnswerStreams>,
}

impl AnsweringStream {
    /// The stream closed or broke: if its answer has not come, it is
    /// remembered by its last event id for rmcp's resume.
    fn ended(&mut self) {
        if let Some(last) = self.last_event_id.take().filter(|_| !self.answered) {
            self.streams.lock().insert(last, self.id.clone());
        }
    }
}

impl Stream for AnsweringStream {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let event = match this.events.poll_next_unpin(context) {
            Poll::Ready(Some(Ok(event))) => event,
            Poll::Ready(ended) => {
                // Closed or broken: rmcp resumes it if it has an event id.
                this.ended();
                return Poll::Ready(ended);
            }
            Poll::Pending => return Poll::Pending,
        };
        let mut event = event;
        if let Some(event_id) = &event.id {
            this.last_event_id = Some(event_id.clone());
        }
        // Only `message` events carry JSON-RPC (others, a server's own
        // heartbeats, rmcp skips).
        let message = event
            .event
            .as_deref()
            .is_none_or(|kind| kind.is_empty() || kind == "message");
        if let Some(data) = event.data.as_deref().filter(|_| message) {
            // Requests and notifications have a method; an answer has
            // none (a method named inside a result only leaves this
            // unset, and the stream is remembered for nothing).
            if data.trim_start().starts_with('{') && !data.contains("\"method\"") {
                this.answered = true;
            }
            if let Some(answer) = idless_error_as_answer_to(data, &this.id) {
                event.data = Some(answer);
            }
        }
        Poll::Ready(Some(Ok(event)))
    }
}

/// `data` with `id` set, if it is a JSON-RPC error without an id (or with
/// a `null` one) that does not speak of the session (which ends the
/// session instead: `ordered::talks_of_the_session`).
fn idless_error_as_answer_to(data: &str, id: &RequestId) -> Option<String> {
    // Only errors are read: every other event goes by unparsed.
    if !data.contains("\"error\"") {
        return None;
    }
    let mut message: serde_json::Value = serde_json::from_str(data).ok()?;
    let object = message.as_object_mut()?;
    if object.contains_key("method") || !object.get("id").is_none_or(serde_json::Value::is_null) {
        return None;
    }
    let error: rmcp::ErrorData = serde_json::from_value(object.get("error")?.clone()).ok()?;
    if super::ordered::talks_of_the_session(&error) {
        return None;
    }
    object.insert("id".to_owned(), serde_json::to_value(id).ok()?);
    serde_json::to_string(&message).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a request's own event stream, an error without an id answers the
    /// request; any other message goes by as written.
    #[test]
    fn an_idless_error_on_a_requests_stream_becomes_its_answer() {
        let id = RequestId::Number(7);
        let answer = |data: &str| {
            idless_error_as_answer_to(data, &id)
                .map(|text| serde_json::from_str::<serde_json::Value>(&text).unwrap())
        };
        let error = r#"{"code":-32602,"message":"refused"}"#;
        for idless in [
            format!(r#"{{"jsonrpc":"2.0","id":null,"error":{error}}}"#),
            format!(r#"{{"jsonrpc":"2.0","error":{error}}}"#),
        ] {
            let answered = answer(&idless).expect("rewritten");
            assert_eq!(answered["id"], 7, "{answered}");
            assert_eq!(answered["error"]["message"], "refused", "{answered}");
        }
        for untouched in [
            format!(r#"{{"jsonrpc":"2.0","id":3,"error":{error}}}"#),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":null,"result":{"error":"a field"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"error"}}"#
                .to_owned(),
            "not json, with \"error\"".to_owned(),
        ] {
            assert_eq!(answer(&untouched), None, "{untouched}");
        }
    }

    fn event(id: Option<&str>, data: &str) -> Result<Sse, SseError> {
        Ok(Sse {
            event: None,
            data: Some(data.to_owned()),
            id: id.map(str::to_owned),
            retry: None,
        })
    }

    fn events(list: Vec<Result<Sse, SseError>>) -> BoxStream<'static, Result<Sse, SseError>> {
        futures::stream::iter(list).boxed()
    }

    const IDLESS: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"no"}}"#;
    const PROGRESS: &str = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;

    /// A stream that ended before its answer is remembered by its last
    /// event id; the `GET` resuming from there answers the request.
    #[tokio::test]
    async fn a_resumed_stream_answers_the_request_it_continues() {
        let streams = Arc::new(AnswerStreams::default());
        let id = RequestId::Number(7);
        let first: Vec<_> = streams
            .answering(
                events(vec![event(Some("e1"), ""), event(Some("e2"), PROGRESS)]),
                id.clone(),
            )
            .collect()
            .await;
        assert_eq!(first.len(), 2);
        // Another event id, or none (the session's own stream): untouched.
        for other in [Some("e1"), None] {
            let resumed: Vec<_> = streams
                .resumed(events(vec![event(None, IDLESS)]), other)
                .collect()
                .await;
            assert_eq!(resumed[0].as_ref().unwrap().data.as_deref(), Some(IDLESS));
        }
        let resumed: Vec<_> = streams
            .resumed(events(vec![event(Some("e3"), IDLESS)]), Some("e2"))
            .collect()
            .await;
        let answer: serde_json::Value =
            serde_json::from_str(resumed[0].as_ref().unwrap().data.as_deref().unwrap()).unwrap();
        assert_eq!(answer["id"], 7, "{answer}");
        // Taken by its resume; the answered resume is not remembered.
        assert!(streams.lock().get("e2").is_none());
        assert!(streams.lock().get("e3").is_none());
    }

    /// A resume that ends before a new event id is remembered where it
    /// started: rmcp resumes from that id again.
    #[tokio::test]
    async fn a_resume_that_ends_at_once_is_remembered_again() {
        let streams = Arc::new(AnswerStreams::default());
        let _: Vec<_> = streams
            .answering(events(vec![event(Some("e1"), "")]), RequestId::Number(7))
            .collect()
            .await;
        let nothing: Vec<_> = streams.resumed(events(vec![]), Some("e1")).collect().await;
        assert!(nothing.is_empty());
        let resumed: Vec<_> = streams
            .resumed(events(vec![event(None, IDLESS)]), Some("e1"))
            .collect()
            .await;
        let answer: serde_json::Value =
            serde_json::from_str(resumed[0].as_ref().unwrap().data.as_deref().unwrap()).unwrap();
        assert_eq!(answer["id"], 7, "{answer}");
    }

    /// A server's heartbeats (events of their own kind) and data that is
    /// no JSON are not taken for the answer: rmcp skips them.
    #[tokio::test]
    async fn heartbeats_are_not_an_answer() {
        let streams = Arc::new(AnswerStreams::default());
        let ping = Ok(Sse {
            event: Some("ping".to_owned()),
            data: Some("ping".to_owned()),
            id: Some("e1".to_owned()),
            retry: None,
        });
        let _: Vec<_> = streams
            .answering(
                events(vec![ping, event(Some("e2"), "not json")]),
                RequestId::Number(7),
            )
            .collect()
            .await;
        assert_eq!(streams.lock().get("e2"), Some(&RequestId::Number(7)));
    }

    /// A stream that carried its answer is not remembered.
    #[tokio::test]
    async fn an_answered_stream_is_not_remembered() {
        let streams = Arc::new(AnswerStreams::default());
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        let _: Vec<_> = streams
            .answering(
                events(vec![event(Some("e1"), PROGRESS), event(Some("e2"), answer)]),
                RequestId::Number(7),
            )
            .collect()
            .await;
        assert!(streams.lock().get("e2").is_none());
    }
}
