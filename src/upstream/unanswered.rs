//! Which request an error without an id answers, on a transport every
//! request passes through (stdio, legacy SSE).
//!
//! A server that cannot read a request's id answers with an error whose
//! id is null (JSON-RPC 2.0: a parse error or an invalid request). rmcp
//! matches it to no request, which then waits out its whole timeout. The
//! transport sees every request go out and every answer come in, so it
//! knows which are unanswered; while exactly one is, and nothing else was
//! sent after it or just before it that the error could be about (a
//! notification, an answer to a request of the server's: the server may
//! read it after the request, as `notifications/initialized` is followed at
//! once by the first `tools/list`), the error is that one's.
//!
//! Only those two codes: a hand-written server that answers every message
//! it has no handler for (a notification included) sends `-32601` with
//! id null, and taking that for a request's answer failed the request and
//! lost its real answer. A request the gateway stopped waiting for without
//! a cancel (a bounded wait that dropped its future) is never answered:
//! one older than the mount's request ceiling is no longer counted, or it
//! would leave two unanswered for the session's life, and the attribution
//! off.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use rmcp::model::{ErrorCode, ErrorData, RequestId};

/// The requests sent on one transport and not answered (nor cancelled).
#[derive(Debug)]
pub struct Unanswered {
    sent: HashMap<RequestId, Instant>,
    /// When a message other than a request (a notification, an answer)
    /// last went out: an error after it may be about it rather than the
    /// request.
    other_sent_at: Option<Instant>,
    /// No request waits longer than this; one older was given up without
    /// a cancel.
    ceiling: Duration,
}

/// A message sent this shortly before a request may be read after it.
const JUST_BEFORE: Duration = Duration::from_secs(1);

/// Past this many unanswered, the ones older than the ceiling are
/// forgotten as a request goes out (they are otherwise forgotten only when
/// an error without an id is matched).
const PRUNE_ABOVE: usize = 64;

impl Unanswered {
    pub fn new(ceiling: Duration) -> Self {
        Self {
            sent: HashMap::new(),
            other_sent_at: None,
            ceiling,
        }
    }

    /// Request `id` goes out.
    pub fn request_sent(&mut self, id: &RequestId) {
        let now = Instant::now();
        if self.sent.len() >= PRUNE_ABOVE {
            self.forget_given_up(now);
        }
        self.sent.insert(id.clone(), now);
    }

    /// A notification, or an answer to a request of the server's, goes out.
    pub fn other_message_sent(&mut self) {
        self.other_sent_at = Some(Instant::now());
    }

    /// Request `id` is answered or cancelled: matched as rmcp matches an
    /// answer, so `"7"` settles request 7 too.
    pub fn settled(&mut self, id: &RequestId) {
        if self.sent.remove(id).is_some() {
            return;
        }
        if let RequestId::String(text) = id {
            if let Ok(number) = text.parse() {
                self.sent.remove(&RequestId::Number(number));
            }
        }
    }

    /// The request an error without an id answers, if it can be told.
    pub fn answered_by(&mut self, error: &ErrorData) -> Option<RequestId> {
        if ![ErrorCode::PARSE_ERROR, ErrorCode::INVALID_REQUEST].contains(&error.code) {
            return None;
        }
        self.forget_given_up(Instant::now());
        let mut sent = self.sent.iter();
        let (Some((id, at)), None) = (sent.next(), sent.next()) else {
            return None;
        };
        if self
            .other_sent_at
            .is_some_and(|other| other + JUST_BEFORE >= *at)
        {
            return None;
        }
        Some(id.clone())
    }

    /// As if no notification or answer had gone out for long.
    #[cfg(test)]
    pub fn forget_other_messages(&mut self) {
        self.other_sent_at = None;
    }

    fn forget_given_up(&mut self, now: Instant) {
        let ceiling = self.ceiling;
        self.sent
            .retain(|_, at| now.saturating_duration_since(*at) <= ceiling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid() -> ErrorData {
        ErrorData::invalid_request("could not read the request", None)
    }

    #[test]
    fn the_only_request_unanswered_gets_the_error() {
        let mut unanswered = Unanswered::new(Duration::from_secs(60));
        unanswered.request_sent(&RequestId::Number(1));
        assert_eq!(
            unanswered.answered_by(&invalid()),
            Some(RequestId::Number(1))
        );
        unanswered.request_sent(&RequestId::Number(2));
        assert_eq!(unanswered.answered_by(&invalid()), None, "two unanswered");
        unanswered.settled(&RequestId::String("2".into()));
        unanswered.settled(&RequestId::Number(1));
        unanswered.request_sent(&RequestId::Number(3));
        assert_eq!(
            unanswered.answered_by(&invalid()),
            Some(RequestId::Number(3))
        );
    }

    /// `-32601` with id null is what a server answering every message
    /// sends for a notification; and an error after a notification (sent
    /// after the request, or just before it) may be about it.
    #[test]
    fn an_error_that_may_be_about_a_notification_answers_nothing() {
        let mut unanswered = Unanswered::new(Duration::from_secs(60));
        unanswered.request_sent(&RequestId::Number(1));
        let not_found = ErrorData::method_not_found::<rmcp::model::CallToolRequestMethod>();
        assert_eq!(unanswered.answered_by(&not_found), None);
        unanswered.other_message_sent();
        assert_eq!(unanswered.answered_by(&invalid()), None);
        unanswered.settled(&RequestId::Number(1));
        unanswered.request_sent(&RequestId::Number(2));
        assert_eq!(unanswered.answered_by(&invalid()), None, "just before");
        unanswered.settled(&RequestId::Number(2));
        unanswered.forget_other_messages();
        unanswered.request_sent(&RequestId::Number(3));
        assert_eq!(
            unanswered.answered_by(&invalid()),
            Some(RequestId::Number(3)),
            "long before"
        );
    }

    /// A request given up without a cancel stops counting at the ceiling.
    #[test]
    fn a_request_older_than_the_ceiling_no_longer_counts() {
        let mut unanswered = Unanswered::new(Duration::from_millis(30));
        unanswered.request_sent(&RequestId::Number(1));
        std::thread::sleep(Duration::from_millis(60));
        unanswered.request_sent(&RequestId::Number(2));
        assert_eq!(
            unanswered.answered_by(&invalid()),
            Some(RequestId::Number(2))
        );
    }
}
