//! An answer made before rmcp's handler, handed back to the route.
//!
//! Some requests are answered at the point where rmcp hands a session's
//! request to the session layer (`http/resumable`): a `tools/list` from
//! bytes already made (`downstream/prebuilt.rs`), a `tools/call` whose
//! answer comes quickly (`downstream/quick_call.rs`). rmcp has checked
//! Host, Origin, headers and session by then, and it calls that layer
//! inside the POST's own future. The route opens a slot around rmcp's
//! `handle` ([`around`]), with the deadline until which an answer may be
//! waited for ([`deadline`]); the session layer puts the answer in it
//! ([`fill`]) and gives rmcp an empty stream; the route then sends the
//! answer as `application/json` in place of rmcp's empty SSE response.

use std::{cell::RefCell, future::Future};

use tokio::time::Instant;

use super::whole_body::WholeBody;

use axum::{
    body::{Body, Bytes},
    http::{header, HeaderValue},
    response::Response,
};

tokio::task_local! {
    static SLOT: Slot;
}

struct Slot {
    answer: RefCell<Option<Vec<Bytes>>>,
    /// Until when an answer may be waited for before the response starts
    /// (`one_write::HOLD` after the request came in).
    deadline: Instant,
}

/// Runs `handle` with a slot open until `deadline`; answers with what
/// filled it, if anything did, and with `handle`'s own response otherwise.
pub async fn around(deadline: Instant, handle: impl Future<Output = Response>) -> Response {
    let slot = Slot {
        answer: RefCell::new(None),
        deadline,
    };
    let (response, answer) = SLOT
        .scope(slot, async {
            let response = handle.await;
            (response, SLOT.with(|slot| slot.answer.borrow_mut().take()))
        })
        .await;
    match answer {
        Some(pieces) => {
            let body: WholeBody = pieces.into_iter().collect();
            let mut response = Response::new(Body::new(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        None => response,
    }
}

/// Until when this request's answer may be waited for, if it can be
/// answered through a slot.
pub fn deadline() -> Option<Instant> {
    SLOT.try_with(|slot| slot.deadline).ok()
}

/// Puts `answer`, the JSON-RPC answer in pieces that go out in order
/// (not joined: see `whole_body.rs`), in this request's slot; `false`
/// when there is none.
pub fn fill(answer: Vec<Bytes>) -> bool {
    SLOT.try_with(|slot| *slot.answer.borrow_mut() = Some(answer))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_filled_slot_replaces_the_response() {
        let until = Instant::now();
        let response = around(until, async {
            assert_eq!(deadline(), Some(until));
            assert!(fill(vec![
                Bytes::from_static(b"{\"jsonrpc\":"),
                Bytes::from_static(b"\"2.0\"}")
            ]));
            Response::new(Body::from("rmcp's"))
        })
        .await;
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"{\"jsonrpc\":\"2.0\"}");
    }

    #[tokio::test]
    async fn an_empty_slot_keeps_the_response_and_none_is_open_outside() {
        assert_eq!(deadline(), None);
        assert!(!fill(vec![Bytes::new()]));
        let response = around(Instant::now(), async {
            Response::new(Body::from("rmcp's"))
        })
        .await;
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"rmcp's");
    }
}
