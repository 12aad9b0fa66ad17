//! The standalone (`GET`) stream: rmcp's, with four repairs.
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
//! And rmcp keeps only a session's latest [`RMCP_EVENTS_KEPT`] messages
//! for a resume, and reads none while no client does: a chatty server's
//! log lines outran a client that reconnected. The gateway keeps each
//! session's latest [`STANDALONE_KEPT`] events (for [`STANDALONE_KEPT_FOR`]
//! at most) itself
//! ([`SessionStandalone`]): those its streams gave out (the connection
//! they went to may have been dead) and, once a client's stream goes away,
//! those read for it by a task that goes on reading rmcp's stream
//! ([`keep_while_away`]) until the client comes back or the session ends.
//! A new stream replays what the gateway kept from its first event on, and
//! goes on with rmcp's from the first event rmcp still holds
//! ([`Streams::with_kept`]). What is kept is also bounded in bytes
//! ([`STANDALONE_KEPT_BYTES`]).
//!
//! A session that slept and woke is a new rmcp session, numbering from 0
//! again, while its client still holds ids of the streams before: its ids
//! therefore continue after the last one the session gave out
//! ([`StandaloneIds`]), and a resume naming an id from before the wake
//! replays all that this rmcp session has kept.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures::{task::AtomicWaker, FutureExt, Stream, StreamExt};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use super::{lock, Streams};

pub(super) type BoxedEvents = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// How many of a session's latest messages rmcp keeps for each of its
/// streams (its `channel_capacity`, 16 by default), and how many it
/// buffers for a stream its client reads slowly before the session's
/// worker waits. What a session's `GET` stream finds of what was sent
/// while the gateway read none of it (before the session's first `GET`,
/// and after a wake, when the registry tells it what it missed) is
/// rmcp's. rmcp reserves this many slots (~48 bytes each) for each
/// stream it opens.
pub(crate) const RMCP_EVENTS_KEPT: usize = 64;

/// How many of a session's latest standalone events the gateway keeps for
/// a resume ([`SessionStandalone`]). Older ones are lost, and said so in
/// the log.
pub(crate) const STANDALONE_KEPT: usize = 256;

/// How long the gateway keeps a standalone event for a resume: long
/// enough for a client to notice its connection is dead and come back;
/// not for the session's life (a session whose client keeps its `GET`
/// open never sleeps, and the events may be large log lines).
pub(crate) const STANDALONE_KEPT_FOR: Duration = Duration::from_secs(300);

/// How many bytes (of JSON) of a session's latest standalone events the
/// gateway keeps for a resume, at most: a server's large log lines or
/// updates would otherwise hold [`STANDALONE_KEPT`] times their size for
/// each busy session. The latest event is kept whatever its size.
pub(crate) const STANDALONE_KEPT_BYTES: usize = 4 * 1024 * 1024;

/// Each session's open standalone streams, and the task reading one whose
/// client went away ([`keep_while_away`]).
pub(super) type OpenStandalone = foldhash::HashMap<SessionId, Vec<Weak<Cuttable>>>;

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

    /// Whether a stream of this session gave out the client's id `id`
    /// (`0`: the priming event every stream starts with).
    pub(super) fn gave_out(&self, id: usize) -> bool {
        id <= self.last
    }

    fn woke(&mut self) {
        self.base = self.last;
    }
}

/// A session's standalone ids, and the latest events read from rmcp's
/// standalone stream (in rmcp's order), for a resume.
#[derive(Default)]
pub(super) struct SessionStandalone {
    ids: StandaloneIds,
    /// At most [`STANDALONE_KEPT`] and [`STANDALONE_KEPT_BYTES`], none
    /// older than [`STANDALONE_KEPT_FOR`] (once trimmed), events of this
    /// rmcp session only (a wake empties it: rmcp's indexes start again).
    kept: VecDeque<KeptEvent>,
    /// The sum of `kept`'s `bytes`.
    kept_bytes: usize,
}

/// A standalone event kept for a resume.
struct KeptEvent {
    /// rmcp's index of it.
    index: usize,
    /// When it was kept.
    at: Instant,
    /// Its message's size as JSON.
    bytes: usize,
    event: ServerSseMessage,
}

impl SessionStandalone {
    /// Keeps `event`, rmcp's `index`, unless kept already: a stream and the
    /// task it handed rmcp's over to may both read one event.
    fn keep(&mut self, index: usize, event: ServerSseMessage) {
        if self.kept.back().is_some_and(|kept| kept.index >= index) {
            return;
        }
        let now = Instant::now();
        self.trim(now);
        let bytes = json_size(&event);
        self.kept_bytes += bytes;
        self.kept.push_back(KeptEvent {
            index,
            at: now,
            bytes,
            event,
        });
        while self.kept.len() > STANDALONE_KEPT
            || (self.kept_bytes > STANDALONE_KEPT_BYTES && self.kept.len() > 1)
        {
            self.let_go_of_oldest();
        }
    }

    /// Lets go of the events kept longer than [`STANDALONE_KEPT_FOR`].
    fn trim(&mut self, now: Instant) {
        while self
            .kept
            .front()
            .is_some_and(|kept| now.duration_since(kept.at) > STANDALONE_KEPT_FOR)
        {
            self.let_go_of_oldest();
        }
        if self.kept.is_empty() {
            // Its buffer too: an idle session holds nothing.
            self.kept = VecDeque::new();
        }
    }

    fn let_go_of_oldest(&mut self) {
        if let Some(oldest) = self.kept.pop_front() {
            self.kept_bytes -= oldest.bytes;
        }
    }

    fn forget_kept(&mut self) {
        self.kept = VecDeque::new();
        self.kept_bytes = 0;
    }
}

/// The size of `event`'s message as JSON, counted without writing it out.
fn json_size(event: &ServerSseMessage) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    if let Some(message) = &event.message {
        // Writing to a counter fails only if the message cannot be
        // serialized, which rmcp's sending it would find too.
        let _ = serde_json::to_writer(&mut counter, message.as_ref());
    }
    counter.0
}

impl Streams {
    /// Wraps one of `session`'s standalone streams so that a later resume
    /// can cut it off.
    /// `resumed_from` is the rmcp index the stream was asked to replay from
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
            expected: resumed_from,
        }
    }

    /// `session`'s standalone events from rmcp's index `from` on, given
    /// `rmcp`, rmcp's replay asked from `from` (and its live stream after):
    /// the events the gateway kept from `from` up to the first rmcp still
    /// holds, then rmcp's. Call with the session's standalone streams cut:
    /// what they or their keeper read is then all kept.
    ///
    /// rmcp holds its latest [`RMCP_EVENTS_KEPT`] sent, the gateway up to
    /// [`STANDALONE_KEPT`] read (fewer, past its byte budget or age
    /// limit), so either may go back further; merged by index, neither's
    /// is skipped and none is given twice. rmcp's worker has put its
    /// replay in the stream's channel before its resume returns: its
    /// first event is there to be read now.
    pub(super) fn with_kept(
        &self,
        session: &SessionId,
        from: usize,
        mut rmcp: BoxedEvents,
    ) -> BoxedEvents {
        // Bounded: live events may arrive while the replay is read. Out of
        // tokio's budget, which could make a ready channel look empty.
        let mut replayed = Vec::new();
        while replayed.len() <= RMCP_EVENTS_KEPT {
            match tokio::task::coop::unconstrained(rmcp.next()).now_or_never() {
                Some(Some(event)) => replayed.push(event),
                _ => break,
            }
        }
        let rmcp_first = replayed.iter().find_map(rmcp_index);
        let kept: Vec<ServerSseMessage> = lock(&self.standalone_state)
            .get(session)
            .map(|state| {
                state
                    .kept
                    .iter()
                    .filter(|kept| {
                        kept.index >= from && rmcp_first.is_none_or(|first| kept.index < first)
                    })
                    .map(|kept| kept.event.clone())
                    .collect()
            })
            .unwrap_or_default();
        // Whatever the timing, nothing kept is given again by rmcp.
        let last_kept = kept.last().and_then(rmcp_index);
        let after_kept = move |event: &ServerSseMessage| {
            let again = rmcp_index(event).zip(last_kept);
            std::future::ready(again.is_none_or(|(index, last)| index > last))
        };
        Box::pin(
            futures::stream::iter(kept).chain(
                futures::stream::iter(replayed)
                    .chain(rmcp)
                    .filter(after_kept),
            ),
        )
    }

    /// Lets go of the standalone events every session kept longer than
    /// [`STANDALONE_KEPT_FOR`] (the sweep's, for sessions that receive
    /// nothing more).
    pub(super) fn trim_standalone(&self) {
        let now = Instant::now();
        for state in lock(&self.standalone_state).values_mut() {
            state.trim(now);
        }
    }

    /// A new standalone stream of `session` opens now: its priming event
    /// stands for what was given out so far. Returns the ids then.
    pub(super) fn standalone_opened(&self, session: &SessionId) -> StandaloneIds {
        let mut all = lock(&self.standalone_state);
        let ids = &mut all.entry(session.clone()).or_default().ids;
        ids.opened_after = ids.last;
        *ids
    }

    /// A standalone stream of `session` resumes now. Returns the ids then.
    pub(super) fn standalone_resumed(&self, session: &SessionId) -> StandaloneIds {
        lock(&self.standalone_state)
            .entry(session.clone())
            .or_default()
            .ids
    }

    /// `session`'s standalone ids now.
    pub(super) fn standalone_ids(&self, session: &SessionId) -> StandaloneIds {
        lock(&self.standalone_state)
            .get(session)
            .map(|state| state.ids)
            .unwrap_or_default()
    }

    /// `session` woke as a new rmcp session: its ids go on after the last.
    pub(super) fn standalone_woke(&self, session: &SessionId) {
        if let Some(state) = lock(&self.standalone_state).get_mut(session) {
            state.ids.woke();
            state.forget_kept();
        }
    }

    /// Keys `session`'s ids by `fresh` (the same id, allocated now), as
    /// `Activity::rekey` does, for the same reason, as it falls asleep:
    /// its kept events, read for the registry to keep
    /// (`ResumableSessions::keep_undelivered`), go.
    pub(super) fn rekey_standalone(&self, session: &SessionId, fresh: &SessionId) {
        let mut all = lock(&self.standalone_state);
        if let Some(state) = all.remove(session) {
            let asleep = SessionStandalone {
                ids: state.ids,
                ..Default::default()
            };
            all.insert(fresh.clone(), asleep);
        }
    }

    /// rmcp's event `index` of `session`'s standalone stream, given out to
    /// a client now: kept, and its id (the one its client sees) remembered
    /// as the last given.
    fn give_out(&self, session: &SessionId, index: usize, event: &ServerSseMessage) -> usize {
        let mut all = lock(&self.standalone_state);
        // Made by the stream's opening; gone only with the session, which
        // a stream still ending must not bring back.
        let Some(state) = all.get_mut(session) else {
            return StandaloneIds::default().client_id(index);
        };
        state.keep(index, event.clone());
        let id = state.ids.client_id(index);
        state.ids.last = state.ids.last.max(id);
        id
    }

    /// rmcp's event `index` of `session`'s standalone stream, read while
    /// no client reads it: kept for the client's return.
    fn keep_for_later(&self, session: &SessionId, index: usize, event: ServerSseMessage) {
        if let Some(state) = lock(&self.standalone_state).get_mut(session) {
            state.keep(index, event);
        }
    }

    /// Ends every standalone stream `session` has open, and the task
    /// reading one for a client that went away: rmcp sees its standalone
    /// stream closed, and replays from its own on the next.
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
        // The old response (or keeper) ends at once instead of at its
        // next keep-alive (or event).
        self.waker.wake();
    }

    /// rmcp's next event; `None` once rmcp ended the stream or it was cut.
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        self.waker.register(cx.waker());
        match lock(&self.stream).as_mut() {
            Some(events) => events.poll_next_unpin(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_cut(&self) -> bool {
        lock(&self.stream).is_none()
    }
}

/// rmcp's index of a standalone event (its id), if it has one.
fn rmcp_index(event: &ServerSseMessage) -> Option<usize> {
    event.event_id.as_deref().and_then(|id| id.parse().ok())
}

/// A standalone stream as its client sees it: rmcp's events with the ids
/// shifted, until rmcp ends it or a resume cuts it off.
pub(super) struct StandaloneStream {
    cuttable: Arc<Cuttable>,
    session: SessionId,
    streams: Weak<Streams>,
    /// The rmcp index the next event should have (from the one the stream
    /// was asked to start at): one past it shows events lost, whether
    /// before the first (older than what was kept) or between what the
    /// gateway kept and rmcp's replay after it.
    expected: Option<usize>,
}

impl Stream for StandaloneStream {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.cuttable.poll_next(cx).map(|event| {
            event.map(|mut event| {
                let Some(index) = rmcp_index(&event) else {
                    return event;
                };
                if let Some(expected) = this.expected {
                    lost_on_the_way(index.saturating_sub(expected));
                }
                this.expected = Some(index + 1);
                if let Some(streams) = this.streams.upgrade() {
                    let id = streams.give_out(&this.session, index, &event);
                    event.event_id = Some(id.to_string());
                }
                event
            })
        })
    }
}

/// A stream whose event came `lost` events after the one expected: those
/// were no longer kept ([`STANDALONE_KEPT`], [`STANDALONE_KEPT_FOR`], or
/// rmcp's [`RMCP_EVENTS_KEPT`]).
fn lost_on_the_way(lost: usize) {
    if lost > 0 {
        tracing::warn!(
            lost,
            kept = STANDALONE_KEPT,
            "a client's GET stream missed more messages than are kept: they are lost"
        );
    }
}

impl Drop for StandaloneStream {
    fn drop(&mut self) {
        let Some(streams) = self.streams.upgrade() else {
            return;
        };
        // Its client went away (not cut off for a newer stream, not ended
        // by rmcp): what rmcp sends from now on is read and kept for the
        // client's return, instead of lost past rmcp's few.
        if !self.cuttable.is_cut() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(keep_while_away(
                    self.cuttable.clone(),
                    self.session.clone(),
                    self.streams.clone(),
                ));
                return;
            }
        }
        streams.drop_standalone(&self.session, &self.cuttable);
    }
}

/// Reads the standalone stream of `session` whose client went away into
/// what the gateway keeps, until a new stream cuts it (the client is back),
/// or rmcp ends it (the session ended or fell asleep). Stays registered as
/// the session's open stream meanwhile, so that a new one cuts it first.
async fn keep_while_away(cuttable: Arc<Cuttable>, session: SessionId, streams: Weak<Streams>) {
    while let Some(event) = futures::future::poll_fn(|cx| cuttable.poll_next(cx)).await {
        let Some(streams) = streams.upgrade() else {
            return;
        };
        if let Some(index) = rmcp_index(&event) {
            streams.keep_for_later(&session, index, event);
        }
    }
    if let Some(streams) = streams.upgrade() {
        streams.drop_standalone(&session, &cuttable);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(id: &str) -> ServerSseMessage {
        ServerSseMessage::priming(id, Duration::from_secs(1))
    }

    /// rmcp's event `index`, given out: its client's id.
    fn give_id(streams: &Streams, session: &SessionId, index: usize) -> usize {
        streams.give_out(session, index, &event(&index.to_string()))
    }

    /// The ids (rmcp's indexes) a stream from `from` carries, given that
    /// rmcp's replay from there holds `rmcp` (a range of indexes).
    fn merged_ids(
        streams: &Streams,
        session: &SessionId,
        from: usize,
        rmcp: std::ops::Range<usize>,
    ) -> Vec<String> {
        let replay: BoxedEvents = Box::pin(futures::stream::iter(
            rmcp.map(|index| event(&index.to_string())),
        ));
        let merged = streams.with_kept(session, from, replay);
        futures::executor::block_on(merged.filter_map(|e| async { e.event_id }).collect())
    }

    /// `range` as ids.
    fn ids_of(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|index| index.to_string()).collect()
    }

    /// What the gateway keeps from `from` on (rmcp's replay empty).
    fn kept_ids(streams: &Streams, session: &SessionId, from: usize) -> Vec<String> {
        merged_ids(streams, session, from, 0..0)
    }

    #[test]
    fn ids_start_after_the_priming_zero_and_go_on_after_a_wake() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        streams.standalone_opened(&session);
        assert_eq!(give_id(&streams, &session, 0), 1);
        assert_eq!(give_id(&streams, &session, 4), 5);
        // Resuming after 3: rmcp's index 3 is the next event.
        assert_eq!(streams.standalone_ids(&session).replay_from(3), 3);
        streams.standalone_woke(&session);
        // rmcp starts from 0 again; its ids go on after 5.
        assert_eq!(give_id(&streams, &session, 0), 6);
        assert_eq!(give_id(&streams, &session, 1), 7);
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
        streams.standalone_opened(&session);
        // A first stream carried ids 1 to 3 (rmcp's 0 to 2).
        for index in 0..3 {
            give_id(&streams, &session, index);
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
        // `new`'s client went away: a task reads on, and finds rmcp's end.
        settle(|| lock(&streams.standalone).is_empty()).await;
        assert!(lock(&streams.standalone).is_empty(), "nothing left behind");
    }

    /// Lets spawned tasks run until `done` (a bounded number of turns).
    async fn settle(done: impl Fn() -> bool) {
        for _ in 0..100 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn what_was_given_out_is_kept_for_a_replay_and_rmcp_goes_on_after_it() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        streams.standalone_opened(&session);
        for index in 0..4 {
            give_id(&streams, &session, index);
        }
        let merged = |from, rmcp| merged_ids(&streams, &session, from, rmcp);
        assert_eq!(merged(1, 0..0), ids_of(1..4));
        assert_eq!(merged(1, 2..4), ids_of(1..4), "rmcp's from its first");
        assert_eq!(merged(4, 4..5), ids_of(4..5), "nothing kept from 4: rmcp's");
        // Only the latest are kept; rmcp's latest 64 go on after them.
        let last = STANDALONE_KEPT + 10;
        for index in 4..last {
            give_id(&streams, &session, index);
        }
        let rmcp_holds = last - RMCP_EVENTS_KEPT..last;
        assert_eq!(merged(0, rmcp_holds), ids_of(10..last));
        // A wake starts rmcp's indexes again: none of those stand.
        streams.standalone_woke(&session);
        assert_eq!(kept_ids(&streams, &session, 0), ids_of(0..0));
    }

    /// A stream whose client went away is read on while nobody reads it:
    /// what rmcp sends meanwhile is kept, until a new stream cuts the
    /// reader off, which closes rmcp's channel (rmcp then replays into the
    /// new one).
    #[tokio::test]
    async fn a_stream_whose_client_went_away_is_kept_until_one_comes_back() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        // Room for all: without a reader, the test fails rather than waits.
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        let rmcp: BoxedEvents = Box::pin(tokio_stream_of(receiver));
        let from = streams.standalone_opened(&session).undelivered_from();
        let mut stream = streams.standalone(&session, rmcp, Some(from));
        sender.send(event("0")).await.unwrap();
        assert_eq!(
            stream.next().await.and_then(|e| e.event_id),
            Some("1".into())
        );
        drop(stream);
        for index in 1..=10 {
            sender.try_send(event(&index.to_string())).unwrap();
        }
        settle(|| kept_ids(&streams, &session, 1).len() == 10).await;
        assert_eq!(kept_ids(&streams, &session, 1), ids_of(1..11));
        assert!(!sender.is_closed(), "read on while the client is away");
        streams.cut_standalone(&session);
        settle(|| sender.is_closed()).await;
        assert!(sender.is_closed(), "cut: rmcp sees its stream closed");
        assert!(lock(&streams.standalone).is_empty(), "nothing left behind");
    }

    /// Events kept past [`STANDALONE_KEPT_FOR`] go, the buffer with the
    /// last of them; a session whose stream ended keeps its ids; a stream
    /// still ending after its session was forgotten brings nothing back.
    #[test]
    fn kept_events_go_with_time_and_a_forgotten_session_stays_forgotten() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        streams.standalone_opened(&session);
        give_id(&streams, &session, 0);
        give_id(&streams, &session, 1);
        let long_ago = Instant::now() - STANDALONE_KEPT_FOR - Duration::from_secs(1);
        if let Some(state) = lock(&streams.standalone_state).get_mut(&session) {
            state.kept[0].at = long_ago;
        }
        streams.trim_standalone();
        assert_eq!(kept_ids(&streams, &session, 0), ids_of(1..2));
        assert_eq!(
            merged_ids(&streams, &session, 0, 0..2),
            ids_of(0..2),
            "rmcp's replay, which goes back further"
        );
        if let Some(state) = lock(&streams.standalone_state).get_mut(&session) {
            state.kept[0].at = long_ago;
        }
        streams.trim_standalone();
        assert_eq!(kept_ids(&streams, &session, 0), ids_of(0..0));
        let capacity = lock(&streams.standalone_state)
            .get(&session)
            .map(|state| state.kept.capacity());
        assert_eq!(capacity, Some(0), "nothing held");
        assert_eq!(streams.standalone_ids(&session).undelivered_from(), 2);
        streams.forget_session(&session);
        give_id(&streams, &session, 2);
        assert!(lock(&streams.standalone_state).is_empty());
    }

    /// A log notification of about `bytes` bytes, rmcp's `index`.
    fn large_event(index: usize, bytes: usize) -> ServerSseMessage {
        let message = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "x".repeat(bytes)},
        }))
        .expect("a log notification");
        ServerSseMessage::new(index.to_string(), message)
    }

    /// Large events are kept up to [`STANDALONE_KEPT_BYTES`] (the latest
    /// whatever its size); a resume from before the oldest kept takes
    /// rmcp's, which keeps more of them, and the gateway's where rmcp is
    /// ahead of it (its stream's channel held events no client read).
    #[test]
    fn kept_events_are_bounded_in_bytes() {
        const MIB: usize = 1024 * 1024;
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        streams.standalone_opened(&session);
        for index in 0..10 {
            streams.give_out(&session, index, &large_event(index, MIB));
        }
        let held = |streams: &Streams| {
            let all = lock(&streams.standalone_state);
            let state = all.get(&session).expect("the session's state");
            let counted: usize = state.kept.iter().map(|kept| json_size(&kept.event)).sum();
            assert_eq!(state.kept_bytes, counted, "the running sum is right");
            (state.kept.len(), state.kept_bytes)
        };
        let (events, bytes) = held(&streams);
        assert_eq!(events, STANDALONE_KEPT_BYTES / MIB - 1, "{bytes} bytes");
        assert!(bytes <= STANDALONE_KEPT_BYTES && bytes > 2 * MIB, "{bytes}");
        assert_eq!(kept_ids(&streams, &session, 7), ids_of(7..10));
        let merged = |from, rmcp| merged_ids(&streams, &session, from, rmcp);
        assert_eq!(merged(2, 2..10), ids_of(2..10), "rmcp's, further back");
        let mut ahead = ids_of(7..10);
        ahead.extend(ids_of(11..75));
        assert_eq!(merged(5, 11..75), ahead, "the gateway's, then rmcp's");
        streams.give_out(&session, 10, &large_event(10, 2 * STANDALONE_KEPT_BYTES));
        let (events, bytes) = held(&streams);
        assert_eq!(events, 1, "only the latest, larger than the budget");
        assert!(bytes > STANDALONE_KEPT_BYTES);
    }

    /// rmcp's replay not ready when it is looked at (it always is, as rmcp
    /// answers a resume once its replay is sent, but that is rmcp's to
    /// keep): the kept events go first, and rmcp's of the same indexes are
    /// not given again.
    #[tokio::test]
    async fn a_replay_read_late_gives_nothing_twice() {
        let streams = Streams::default();
        let session: SessionId = Arc::from("s1");
        streams.standalone_opened(&session);
        for index in 0..4 {
            give_id(&streams, &session, index);
        }
        let (sender, receiver) = tokio::sync::mpsc::channel(8);
        let rmcp: BoxedEvents = Box::pin(tokio_stream_of(receiver));
        let merged = streams.with_kept(&session, 1, rmcp);
        for index in 2..6 {
            sender.send(event(&index.to_string())).await.unwrap();
        }
        drop(sender);
        let ids: Vec<String> = merged.filter_map(|e| async { e.event_id }).collect().await;
        assert_eq!(ids, ids_of(1..6));
    }

    /// A stream's events that skip indexes say so in the log, between
    /// what the gateway kept and rmcp's replay as before the first.
    #[tokio::test]
    async fn a_gap_in_a_streams_events_is_logged_wherever_it_is() {
        let (log, _captured) = crate::telemetry::captured_log::capture();
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        let from = streams.standalone_opened(&session).undelivered_from();
        let rmcp: BoxedEvents = Box::pin(futures::stream::iter(["0", "1", "2"].map(event)));
        let mut stream = streams.standalone(&session, rmcp, Some(from));
        while stream.next().await.is_some() {}
        assert!(
            !log.text().contains("more messages than are kept"),
            "{}",
            log.text()
        );
        let rmcp: BoxedEvents = Box::pin(futures::stream::iter(["3", "4", "9"].map(event)));
        let mut stream = streams.standalone(&session, rmcp, Some(3));
        while stream.next().await.is_some() {}
        let text = log.text();
        assert!(
            text.contains("more messages than are kept") && text.contains("lost=4"),
            "{text}"
        );
    }

    fn tokio_stream_of(
        mut receiver: tokio::sync::mpsc::Receiver<ServerSseMessage>,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync {
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
