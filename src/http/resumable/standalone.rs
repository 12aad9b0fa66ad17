//! The standalone (`GET`) stream: rmcp's, with two repairs.
//!
//! rmcp numbers its events from 0, the id of the priming event it sends
//! first, and replays *from* the index a resume names; its ids are shifted
//! by one here, so the first message is `1` and rmcp's "from" means the
//! spec's "after". And rmcp makes a new `GET` the live stream only once it
//! sees the old one closed; a client that resumes before the server noticed
//! its dead connection would get a keep-alive-only "shadow" stream that
//! never carries a message. So each session's standalone streams stay
//! cuttable, and a resume cuts the old ones first.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll},
};

use futures::{task::AtomicWaker, Stream, StreamExt};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use super::{lock, Streams};

pub(super) type BoxedEvents = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// Each session's open standalone streams.
pub(super) type OpenStandalone = std::collections::HashMap<SessionId, Vec<Weak<Cuttable>>>;

impl Streams {
    /// Wraps one of `session`'s standalone streams so that a later resume
    /// can cut it off.
    pub(super) fn standalone(
        self: &Arc<Self>,
        session: &SessionId,
        stream: BoxedEvents,
    ) -> StandaloneStream {
        let cuttable = Arc::new(Cuttable {
            stream: Mutex::new(Some(stream)),
            waker: AtomicWaker::new(),
        });
        lock(&self.standalone)
            .entry(session.clone())
            .or_default()
            .push(Arc::downgrade(&cuttable));
        StandaloneStream {
            cuttable,
            session: session.clone(),
            streams: Arc::downgrade(self),
        }
    }

    /// Ends every standalone stream `session` has open.
    pub(super) fn cut_standalone(&self, session: &SessionId) {
        let open = lock(&self.standalone).remove(session).unwrap_or_default();
        for stream in open.iter().filter_map(Weak::upgrade) {
            stream.cut();
        }
    }

    /// Forgets a stream that is gone, and the session's entry with its last.
    fn drop_standalone(&self, session: &SessionId, gone: &Arc<Cuttable>) {
        let mut standalone = lock(&self.standalone);
        if let Some(open) = standalone.get_mut(session) {
            open.retain(|stream| !std::ptr::eq(stream.as_ptr(), Arc::as_ptr(gone)));
            if open.is_empty() {
                standalone.remove(session);
            }
        }
    }
}

/// rmcp's receiving end of a standalone stream, which can be dropped from
/// outside: dropping it is what tells rmcp the stream is closed.
pub(super) struct Cuttable {
    stream: Mutex<Option<BoxedEvents>>,
    waker: AtomicWaker,
}

impl Cuttable {
    fn cut(&self) {
        drop(lock(&self.stream).take());
        // The old response ends at once instead of at its next keep-alive.
        self.waker.wake();
    }
}

/// A standalone stream as its client sees it: rmcp's events with the ids
/// shifted, until rmcp ends it or a resume cuts it off.
pub(super) struct StandaloneStream {
    cuttable: Arc<Cuttable>,
    session: SessionId,
    streams: Weak<Streams>,
}

impl Stream for StandaloneStream {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.cuttable.waker.register(cx.waker());
        let mut stream = lock(&self.cuttable.stream);
        let Some(events) = stream.as_mut() else {
            return Poll::Ready(None);
        };
        events.poll_next_unpin(cx).map(|event| event.map(shift_id))
    }
}

impl Drop for StandaloneStream {
    fn drop(&mut self) {
        if let Some(streams) = self.streams.upgrade() {
            streams.drop_standalone(&self.session, &self.cuttable);
        }
    }
}

/// rmcp's id `n` becomes `n + 1`.
pub(super) fn shift_id(mut event: ServerSseMessage) -> ServerSseMessage {
    if let Some(index) = event
        .event_id
        .as_deref()
        .and_then(|id| id.parse::<usize>().ok())
    {
        event.event_id = Some((index + 1).to_string());
    }
    event
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(id: &str) -> ServerSseMessage {
        ServerSseMessage::priming(id, Duration::from_secs(1))
    }

    #[test]
    fn ids_start_after_the_priming_zero() {
        assert_eq!(shift_id(event("0")).event_id.as_deref(), Some("1"));
        assert_eq!(shift_id(event("9")).event_id.as_deref(), Some("10"));
    }

    #[tokio::test]
    async fn a_cut_stream_ends_and_a_dropped_one_is_forgotten() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        let pending: BoxedEvents = Box::pin(futures::stream::pending());
        let mut old = streams.standalone(&session, pending);
        let kept: BoxedEvents = Box::pin(futures::stream::iter([event("0")]));
        streams.cut_standalone(&session);
        assert!(old.next().await.is_none(), "a cut stream ends");
        let mut new = streams.standalone(&session, kept);
        assert_eq!(new.next().await.and_then(|e| e.event_id), Some("1".into()));
        drop(old);
        drop(new);
        assert!(lock(&streams.standalone).is_empty(), "nothing left behind");
    }
}
