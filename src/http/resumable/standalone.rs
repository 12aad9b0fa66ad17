//! The standalone (`GET`) stream: rmcp's, with three repairs.
//!
//! rmcp numbers its events from 0, the id of the priming event it sends
//! first, and replays *from* the index a resume names; its ids are shifted
//! by one here, so the first message is `1` and rmcp's "from" means the
//! spec's "after". And rmcp makes a new `GET` the live stream only once it
//! sees the old one closed; a client that resumes before the server noticed
//! its dead connection would get a keep-alive-only "shadow" stream that
//! never carries a message. So each session's standalone streams stay
//! cuttable, and a resume cuts the old ones first. And rmcp replays all
//! it keeps on every new `GET`, what an earlier stream carried included; a
//! new stream starts after the last event given out
//! ([`StandaloneIds::undelivered_from`]).
//!
//! A session that slept and woke is a new rmcp session, numbering from 0
//! again, while its client still holds ids of the streams before: its ids
//! therefore continue after the last one the session gave out
//! ([`StandaloneIds`]), and a resume naming an id from before the wake
//! replays all that this rmcp session has kept.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll},
};

use futures::{task::AtomicWaker, Stream, StreamExt};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use super::{lock, Streams};

pub(super) type BoxedEvents = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// How many of a session's latest standalone events rmcp keeps for a
/// resume (its `channel_capacity`, 16 by default, which a chatty server's
/// log lines outran while a client reconnected: the ones before were lost
/// without a word). rmcp reserves this many slots (~48 bytes each) for
/// each stream it opens, and holds the messages themselves for the
/// session's life. Older ones are lost, and said so in the log.
pub(crate) const STANDALONE_EVENTS_KEPT: usize = 64;

/// Each session's open standalone streams.
pub(super) type OpenStandalone = std::collections::HashMap<SessionId, Vec<Weak<Cuttable>>>;

/// The ids a session's standalone streams give out: rmcp's index `n` is
/// `base + n + 1`, and `last` the highest given so far. `base` moves past
/// `last` each time the session wakes (a new rmcp session, from 0 again).
/// `opened_after` is `last` when the newest stream opened: what its
/// priming event (rmcp's, id `0` on every stream) stands for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct StandaloneIds {
    base: usize,
    last: usize,
    opened_after: usize,
}

impl StandaloneIds {
    /// The client's id for rmcp's index `n`.
    fn client_id(&self, index: usize) -> usize {
        self.base + index + 1
    }

    /// The rmcp index to replay from after the client's id `after`: the
    /// event after it, or (an id from before the session woke) all.
    pub(super) fn replay_from(&self, after: usize) -> usize {
        after.saturating_sub(self.base)
    }

    /// The rmcp index of the first event no stream has given out yet.
    pub(super) fn undelivered_from(&self) -> usize {
        self.replay_from(self.last)
    }

    /// The rmcp index to resume from after the client's id `after`. `0`
    /// is the priming event every new stream starts with: the client saw
    /// none of what that stream carried, which is what came after the
    /// newest stream opened (not all rmcp keeps: earlier streams carried
    /// that).
    pub(super) fn resume_from(&self, after: usize) -> usize {
        match after {
            0 => self.replay_from(self.opened_after),
            after => self.replay_from(after),
        }
    }

    fn woke(&mut self) {
        self.base = self.last;
    }
}

impl Streams {
    /// Wraps one of `session`'s standalone streams so that a later resume
    /// can cut it off.
    /// `resumed_from` is the rmcp index rmcp was asked to replay from
    /// (a resume's, or a new stream's first undelivered one), if any.
    pub(super) fn standalone(
        self: &Arc<Self>,
        session: &SessionId,
        stream: BoxedEvents,
        resumed_from: Option<usize>,
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
            resumed_from,
        }
    }

    /// A new standalone stream of `session` opens now: its priming event
    /// stands for what was given out so far. Returns the ids then.
    pub(super) fn standalone_opened(&self, session: &SessionId) -> StandaloneIds {
        let mut all = lock(&self.standalone_ids);
        let ids = all.entry(session.clone()).or_default();
        ids.opened_after = ids.last;
        *ids
    }

    /// `session`'s standalone ids now.
    pub(super) fn standalone_ids(&self, session: &SessionId) -> StandaloneIds {
        lock(&self.standalone_ids)
            .get(session)
            .copied()
            .unwrap_or_default()
    }

    /// `session` woke as a new rmcp session: its ids go on after the last.
    pub(super) fn standalone_woke(&self, session: &SessionId) {
        if let Some(ids) = lock(&self.standalone_ids).get_mut(session) {
            ids.woke();
        }
    }

    /// Keys `session`'s ids by `fresh` (the same id, allocated now), as
    /// `Activity::rekey` does, for the same reason.
    pub(super) fn rekey_standalone_ids(&self, session: &SessionId, fresh: &SessionId) {
        let mut all = lock(&self.standalone_ids);
        if let Some(ids) = all.remove(session) {
            all.insert(fresh.clone(), ids);
        }
    }

    /// rmcp's event `index` of `session`'s standalone stream, by the id its
    /// client sees; remembered as the last given.
    fn give_id(&self, session: &SessionId, index: usize) -> usize {
        let mut all = lock(&self.standalone_ids);
        let ids = all.entry(session.clone()).or_default();
        let id = ids.client_id(index);
        ids.last = ids.last.max(id);
        id
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
    /// A resume's first index, until its first event shows whether rmcp
    /// still had it.
    resumed_from: Option<usize>,
}

impl Stream for StandaloneStream {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.cuttable.waker.register(cx.waker());
        let mut stream = lock(&this.cuttable.stream);
        let Some(events) = stream.as_mut() else {
            return Poll::Ready(None);
        };
        let streams = this.streams.upgrade();
        events.poll_next_unpin(cx).map(|event| {
            event.map(|mut event| {
                let index: Option<usize> = event.event_id.as_deref().and_then(|id| id.parse().ok());
                if let Some(index) = index {
                    if let Some(from) = this.resumed_from.take() {
                        lost_before_resume(index.saturating_sub(from));
                    }
                }
                if let (Some(index), Some(streams)) = (index, &streams) {
                    event.event_id = Some(streams.give_id(&this.session, index).to_string());
                }
                event
            })
        })
    }
}

/// A stream whose first event came `lost` events after the one asked for:
/// those were older than rmcp keeps ([`STANDALONE_EVENTS_KEPT`]).
fn lost_before_resume(lost: usize) {
    if lost > 0 {
        tracing::warn!(
            lost,
            kept = STANDALONE_EVENTS_KEPT,
            "a client's GET stream starts after more messages than are kept: the oldest are lost"
        );
    }
}

impl Drop for StandaloneStream {
    fn drop(&mut self) {
        if let Some(streams) = self.streams.upgrade() {
            streams.drop_standalone(&self.session, &self.cuttable);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(id: &str) -> ServerSseMessage {
        ServerSseMessage::priming(id, Duration::from_secs(1))
    }

    #[test]
    fn ids_start_after_the_priming_zero_and_go_on_after_a_wake() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        assert_eq!(streams.give_id(&session, 0), 1);
        assert_eq!(streams.give_id(&session, 4), 5);
        // Resuming after 3: rmcp's index 3 is the next event.
        assert_eq!(streams.standalone_ids(&session).replay_from(3), 3);
        streams.standalone_woke(&session);
        // rmcp starts from 0 again; its ids go on after 5.
        assert_eq!(streams.give_id(&session, 0), 6);
        assert_eq!(streams.give_id(&session, 1), 7);
        let ids = streams.standalone_ids(&session);
        assert_eq!(ids.replay_from(6), 1, "after an id of this life");
        assert_eq!(ids.replay_from(3), 0, "an id from before the wake: all");
        assert_eq!(ids.replay_from(5), 0);
    }

    /// Every new stream's priming event is rmcp's `0`: resuming after it
    /// replays what came after that stream opened, not what an earlier
    /// stream carried (all that rmcp keeps).
    #[test]
    fn resuming_after_a_priming_event_replays_only_that_streams_events() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        // A first stream carried ids 1 to 3 (rmcp's 0 to 2).
        for index in 0..3 {
            streams.give_id(&session, index);
        }
        let ids = streams.standalone_opened(&session);
        assert_eq!(ids.undelivered_from(), 3);
        assert_eq!(ids.resume_from(0), 3, "after the second stream's priming");
        assert_eq!(ids.resume_from(2), 2, "after a real id, as before");
        // A wake: this rmcp session's events are all new to the client.
        streams.standalone_woke(&session);
        assert_eq!(streams.standalone_ids(&session).resume_from(0), 0);
    }

    #[tokio::test]
    async fn a_cut_stream_ends_and_a_dropped_one_is_forgotten() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        let pending: BoxedEvents = Box::pin(futures::stream::pending());
        let mut old = streams.standalone(&session, pending, None);
        let kept: BoxedEvents = Box::pin(futures::stream::iter([event("0")]));
        streams.cut_standalone(&session);
        assert!(old.next().await.is_none(), "a cut stream ends");
        let mut new = streams.standalone(&session, kept, None);
        assert_eq!(new.next().await.and_then(|e| e.event_id), Some("1".into()));
        drop(old);
        drop(new);
        assert!(lock(&streams.standalone).is_empty(), "nothing left behind");
    }
}
