//! Sends a quick POST answer in one write instead of three.
//!
//! rmcp answers every POSTed request with an SSE stream. The response head
//! and the stream's priming event go out as soon as the request is taken,
//! the answer when the handler has it, and then the end of the chunked
//! body: on loopback that is two or three writes by the gateway and as many
//! wake-ups and reads for the client, for every call (the profile's largest
//! share is the kernel's). [`gather_quick_answer`] holds the head for up to
//! [`HOLD`]: a stream that ends by then (the usual case: a call answered in
//! microseconds) goes out whole, as one body with a `Content-Length`; one
//! that does not gets what it has so far at [`HOLD`] and the rest as it
//! comes, as before. The events are rmcp's, unchanged, ids included, so
//! resumption works the same; a client only learns a slow request's
//! priming event id [`HOLD`] later.

use std::time::Duration;

use axum::{body::Body, http::header, response::Response};
use futures::{stream, StreamExt};
use tokio::time::Instant;

use super::whole_body::WholeBody;

/// How long a POST's answer stream may be held back to go out in one write.
/// Short enough that nobody waits on it for a slow request's first event,
/// long enough for a quick upstream's answer.
pub const HOLD: Duration = Duration::from_millis(20);

/// `response`, with its SSE body gathered into one piece when the stream
/// ends by `deadline`. Other responses pass as they are.
pub async fn gather_quick_answer(response: Response, deadline: Instant) -> Response {
    let is_event_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if !is_event_stream {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut frames = body.into_data_stream();
    let mut gathered = WholeBody::default();
    loop {
        match tokio::time::timeout_at(deadline, frames.next()).await {
            Ok(Some(Ok(data))) => gathered.push(data),
            Ok(None) => return Response::from_parts(parts, Body::new(gathered)),
            // An error ends the body either way; hand it on as it came.
            Ok(Some(Err(error))) => {
                let so_far = stream::iter(gathered.into_frames().into_iter().map(Ok));
                let body = so_far.chain(stream::once(async { Err(error) }));
                return Response::from_parts(parts, Body::from_stream(body));
            }
            Err(_slow) => {
                let so_far = stream::iter(gathered.into_frames().into_iter().map(Ok));
                return Response::from_parts(parts, Body::from_stream(so_far.chain(frames)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use futures::FutureExt;
    use http_body::Body as _;

    use super::*;

    fn event_stream(
        frames: impl futures::Stream<Item = &'static str> + Send + 'static,
    ) -> Response {
        let mut response = Response::new(Body::from_stream(
            frames.map(Ok::<_, std::convert::Infallible>),
        ));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    }

    async fn read_all(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    #[tokio::test]
    async fn a_stream_that_ends_in_time_goes_out_whole_with_its_length() {
        let sent = ["id: 0/1\ndata:\n\n", "data: {\"result\":{}}\n\n"];
        let response =
            gather_quick_answer(event_stream(stream::iter(sent)), Instant::now() + HOLD).await;
        let whole = sent.concat();
        assert_eq!(
            response.body().size_hint().exact(),
            Some(whole.len() as u64)
        );
        assert_eq!(read_all(response).await, whole);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_stream_gets_what_it_has_at_the_hold_and_the_rest_later() {
        let answer = async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "data: {\"result\":{}}\n\n"
        };
        let frames = stream::iter(["id: 0/1\ndata:\n\n"]).chain(stream::once(answer));
        let started = tokio::time::Instant::now();
        let response = gather_quick_answer(event_stream(frames), Instant::now() + HOLD).await;
        assert_eq!(started.elapsed(), HOLD, "the head waits for the hold only");
        let mut body = response.into_body().into_data_stream();
        let first = body.next().now_or_never().expect("ready").expect("a frame");
        assert_eq!(&first.expect("data")[..], b"id: 0/1\ndata:\n\n");
        assert!(
            body.next().now_or_never().is_none(),
            "the answer is not here yet"
        );
        let answer = body.next().await.expect("the answer").expect("data");
        assert_eq!(&answer[..], b"data: {\"result\":{}}\n\n");
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn other_responses_pass_at_once() {
        let never = stream::pending::<&'static str>();
        let mut response = Response::new(Body::from_stream(
            never.map(Ok::<_, std::convert::Infallible>),
        ));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let started = tokio::time::Instant::now();
        let response = gather_quick_answer(response, Instant::now() + HOLD).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(response.body().size_hint().exact(), None);
    }
}
