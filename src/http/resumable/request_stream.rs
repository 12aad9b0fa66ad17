//! A request's SSE stream, recorded so that it can be resumed.
//!
//! [`Recorded`] is what a POST's response body reads: rmcp's stream, with
//! the messages the relay queued for this request merged in ahead of
//! rmcp's next event (their ids, `<index>.<n>/<stream>`, place them after
//! rmcp's event `<index>`), and every event also written to the stream's
//! [`StreamLog`]. `<stream>` is the gateway's number for the stream, unique
//! in its session for the session's life (counted per session: a count
//! across sessions told a client how much the others were sent), in place
//! of rmcp's HTTP request id: rmcp numbers a
//! session's requests from 0 again after the session wakes from sleep
//! (a new rmcp session), while the streams from before stay resumable, and
//! two streams must never share an id. If the client
//! drops it before the end, the rest is read into the log in the background
//! until the response, and the log is kept [`ORPHAN_RETENTION`] after that
//! (the latest [`MAX_ORPHANS_PER_SESSION`] of a session).
//! [`follow`] is what a resume reads: the log from an index on, then each
//! new event until the stream ends. A resume first cuts the connection the
//! stream is still being written to, if any ([`StreamLog::cut_writer`]):
//! its client has given up on it, the server may not have noticed it is
//! dead, and a writer stuck on its full socket would read no more of the
//! stream (hyper reads a body only as it can write) until TCP gives up,
//! many minutes later.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt};
use rmcp::{
    model::ServerJsonRpcMessage,
    transport::streamable_http_server::session::{ServerSseMessage, SessionId},
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{lock, parse_event_id, EventPosition, Position, StreamKey, Streams};
use crate::downstream::request_streams::OpenQueue;

/// How long the events of a stream whose client went away are kept after
/// the stream ended, for the client to come back for its response.
const ORPHAN_RETENTION: Duration = Duration::from_secs(60);

/// Most ended streams kept per session for clients that went away; past
/// it the oldest goes. The session's limit on requests in flight bounds
/// the streams still running, not these: a client calling and hanging up
/// in a loop would otherwise have a minute of answers held.
const MAX_ORPHANS_PER_SESSION: usize = 16;

/// Most events kept per stream; the oldest go first. A long call's early
/// progress may be gone by the time a late client resumes; the rest and the
/// response are still there.
const MAX_KEPT_EVENTS: usize = 256;

/// Events a resume has read ahead of its client.
const RESUME_BUFFER: usize = 16;

impl Streams {
    fn logs(&self) -> MutexGuard<'_, foldhash::HashMap<StreamKey, Arc<StreamLog>>> {
        lock(&self.logs)
    }

    /// `session` began: its request streams are numbered from 1.
    pub(super) fn session_began(&self, session: &SessionId) {
        lock(&self.stream_numbers)
            .entry(session.clone())
            .or_insert(0);
    }

    /// A number for a new request stream of `session`, never given to one
    /// of its streams before, wakes included (rmcp's request ids start
    /// again at a wake). Counted per session: a number counted across
    /// sessions told every client how many streams the others had.
    /// A session already forgotten (a stream still ending) gets `0`, which
    /// no stream of a live session has, without coming back.
    fn new_stream(&self, session: &SessionId) -> u64 {
        let mut numbers = lock(&self.stream_numbers);
        let Some(last) = numbers.get_mut(session) else {
            return 0;
        };
        *last += 1;
        *last
    }

    /// Whether `stream` is a request stream of `session` that has ended
    /// and is no longer kept: numbered already, and gone.
    pub(super) fn ended(&self, session: &SessionId, stream: u64) -> bool {
        let numbered = lock(&self.stream_numbers)
            .get(session)
            .is_some_and(|last| (1..=*last).contains(&stream));
        numbered && self.get(&(session.clone(), stream)).is_none()
    }

    /// Keys `session`'s stream count by `fresh` (the same id, allocated
    /// now) as it falls asleep, as `rekey_standalone` does.
    pub(super) fn rekey_stream_numbers(&self, session: &SessionId, fresh: &SessionId) {
        let mut numbers = lock(&self.stream_numbers);
        if let Some(last) = numbers.remove(session) {
            numbers.insert(fresh.clone(), last);
        }
    }

    pub(super) fn get(&self, key: &StreamKey) -> Option<Arc<StreamLog>> {
        self.logs().get(key).cloned()
    }

    fn insert(&self, key: StreamKey, log: Arc<StreamLog>) {
        self.logs().insert(key, log);
    }

    /// Removes `key` if it still names `log` (a newer stream never shares a
    /// key, but removal must not depend on that).
    fn remove(&self, key: &StreamKey, log: &Arc<StreamLog>) {
        let mut logs = self.logs();
        if logs.get(key).is_some_and(|kept| Arc::ptr_eq(kept, log)) {
            logs.remove(key);
        }
    }

    /// Keeps `key`'s ended stream for a client that went away, making room
    /// by forgetting the session's oldest such stream.
    fn keep_orphan(&self, key: &StreamKey) {
        let evicted = {
            let mut orphans = lock(&self.orphans);
            let kept = orphans.entry(key.0.clone()).or_default();
            kept.push_back(key.clone());
            (kept.len() > MAX_ORPHANS_PER_SESSION).then(|| kept.pop_front())
        };
        // Its reader holds the log until its retention ends: emptied here,
        // or the bound would bound the map and not the memory.
        if let Some(Some(oldest)) = evicted {
            if let Some(log) = self.logs().remove(&oldest) {
                log.state().events.clear();
            }
        }
    }

    /// Forgets an orphan [`Self::keep_orphan`] kept, once its time is up.
    fn drop_orphan(&self, key: &StreamKey, log: &Arc<StreamLog>) {
        {
            let mut orphans = lock(&self.orphans);
            if let Some(kept) = orphans.get_mut(&key.0) {
                kept.retain(|kept| kept != key);
                if kept.is_empty() {
                    orphans.remove(&key.0);
                }
            }
        }
        self.remove(key, log);
    }

    /// Ends and forgets `session`'s request streams.
    pub(super) fn forget_request_streams(&self, session: &SessionId) {
        lock(&self.orphans).remove(session);
        self.logs().retain(|(owner, _), log| {
            let keep = owner != session;
            if !keep {
                log.finish();
            }
            keep
        });
    }

    /// `stream`, a request's stream of `session`, recorded on its way,
    /// with what the relay queues in `related` merged in.
    pub(super) fn recorded<S>(
        self: &Arc<Self>,
        session: &SessionId,
        stream: S,
        related: Option<OpenQueue>,
    ) -> Recorded<S>
    where
        S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
    {
        Recorded {
            inner: Some(stream),
            unended: None,
            related,
            log: None,
            session: session.clone(),
            streams: self.clone(),
            connection: crate::http::connections::this_connection(),
        }
    }
}

/// The recent events of one request's stream, and whether it has ended.
pub(super) struct StreamLog {
    state: Mutex<LogState>,
    /// Bumped after each change, for resumes waiting on the log.
    changed: watch::Sender<()>,
}

#[derive(Default)]
struct LogState {
    /// In order; at most [`MAX_KEPT_EVENTS`].
    events: VecDeque<(Position, ServerSseMessage)>,
    ended: bool,
    /// Closes the connection the stream is written to, while it is.
    writer: Option<CancellationToken>,
}

impl StreamLog {
    fn new() -> Self {
        Self {
            state: Mutex::default(),
            changed: watch::Sender::new(()),
        }
    }

    fn state(&self) -> MutexGuard<'_, LogState> {
        lock(&self.state)
    }

    fn record(&self, at: Position, event: ServerSseMessage) {
        {
            let mut state = self.state();
            if state.events.len() == MAX_KEPT_EVENTS {
                state.events.pop_front();
            }
            state.events.push_back((at, event));
        }
        self.announce();
    }

    fn finish(&self) {
        self.state().ended = true;
        self.announce();
    }

    /// Cuts the connection the stream is still being written to, if any:
    /// its rest is then read into the log instead (see [`Recorded`]'s
    /// drop), where a resume finds it.
    pub(super) fn cut_writer(&self) {
        let writer = self.state().writer.take();
        if let Some(writer) = writer {
            tracing::debug!("a request stream resumed elsewhere; closing its old connection");
            writer.cancel();
        }
    }

    /// The stream is no longer written to a connection.
    fn detach_writer(&self) {
        self.state().writer = None;
    }

    /// A resume subscribes before it reads, so a change made after its read
    /// always finds a receiver here.
    fn announce(&self) {
        if self.changed.receiver_count() > 0 {
            self.changed.send_replace(());
        }
    }

    /// The kept events after `after`, and whether the stream ended.
    fn after(&self, after: Position) -> (Vec<(Position, ServerSseMessage)>, bool) {
        let state = self.state();
        let events = state
            .events
            .iter()
            .filter(|(at, _)| *at > after)
            .cloned()
            .collect();
        (events, state.ended)
    }
}

/// `event` (rmcp's) under the gateway's number for its stream.
fn on_stream(mut event: ServerSseMessage, at: Position, stream: u64) -> ServerSseMessage {
    event.event_id = Some(format!("{}/{stream}", at.index));
    event
}

/// Where an event of a request's stream is, from rmcp's
/// `<index>/<http request id>` id.
fn request_position(event: &ServerSseMessage) -> Option<(Position, u64)> {
    match parse_event_id(event.event_id.as_deref()?)? {
        EventPosition::Request { at, stream } => Some((at, stream)),
        EventPosition::Standalone { .. } => None,
    }
}

/// A request stream's log and the place of its latest event.
struct Logged {
    key: StreamKey,
    log: Arc<StreamLog>,
    last: Position,
}

impl Logged {
    fn record_rmcp(&mut self, at: Position, event: &ServerSseMessage) {
        self.last = at;
        self.log.record(at, event.clone());
    }

    /// A queued message as the stream's next event, recorded.
    fn record_related(&mut self, message: rmcp::model::ServerNotification) -> ServerSseMessage {
        self.last.related += 1;
        let (index, related, stream) = (self.last.index, self.last.related, self.key.1);
        let event = ServerSseMessage::new(
            format!("{index}.{related}/{stream}"),
            ServerJsonRpcMessage::notification(message),
        );
        self.log.record(self.last, event.clone());
        event
    }
}

/// A request's stream as rmcp produces it plus what the relay queued for
/// it, recorded on the way to its client; dropped unfinished, it is read to
/// its end in the background.
pub(super) struct Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    /// `None` once rmcp ended the stream.
    inner: Option<S>,
    /// For a handed-over call's stream, which a closing session waits
    /// for: dropped when rmcp ends the stream, or when its client goes
    /// (the session's end forgets what would be read on).
    unended: Option<Unended>,
    related: Option<OpenQueue>,
    /// Registered at the first event with an id (which names the stream).
    log: Option<Logged>,
    session: SessionId,
    streams: Arc<Streams>,
    /// Closes the connection this stream is written to; moved into the
    /// log with the first event.
    connection: Option<CancellationToken>,
}

impl<S> Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    /// Counts this stream, a handed-over call's, among those its session's
    /// close waits for (`Streams::request_streams_ended`): the session's
    /// end answers the call, through rmcp, and rmcp's close would cut the
    /// stream before that answer.
    pub(super) fn awaited_at_session_end(mut self) -> Self {
        self.unended = Some(Unended::new(&self.streams, &self.session));
        self
    }

    /// Records one of rmcp's events, renamed for the gateway's stream
    /// number, and returns it as renamed.
    fn record(&mut self, event: ServerSseMessage) -> ServerSseMessage {
        let Some((at, _rmcp_request)) = request_position(&event) else {
            return event;
        };
        let logged = self.log.get_or_insert_with(|| {
            let key = (self.session.clone(), self.streams.new_stream(&self.session));
            let log = Arc::new(StreamLog::new());
            log.state().writer = self.connection.take();
            self.streams.insert(key.clone(), log.clone());
            Logged { key, log, last: at }
        });
        let event = on_stream(event, at, logged.key.1);
        logged.record_rmcp(at, &event);
        event
    }
}

impl<S> Stream for Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        // Queued messages first: the relay queues one before the request's
        // answer is even produced, so it goes out before that answer. Not
        // before rmcp's first event (the priming event), which names the
        // stream.
        if let (Some(related), Some(logged)) = (&this.related, &mut this.log) {
            if let Poll::Ready(message) = related.poll_next(cx) {
                return Poll::Ready(Some(logged.record_related(message)));
            }
        }
        match inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(event)) => Poll::Ready(Some(this.record(event))),
            Poll::Ready(None) => {
                this.inner = None;
                this.unended = None;
                this.related = None;
                // Read to the end by its own client: nothing left to resume.
                if let Some(logged) = this.log.take() {
                    // Its connection goes on to other requests: a resume
                    // racing this end must not cut it.
                    logged.log.detach_writer();
                    logged.log.finish();
                    this.streams.remove(&logged.key, &logged.log);
                }
                Poll::Ready(None)
            }
        }
    }
}

impl<S> Drop for Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    fn drop(&mut self) {
        let (Some(inner), Some(logged)) = (self.inner.take(), self.log.take()) else {
            // Ended, or dropped before its first event: no client can know
            // an id to resume it with.
            return;
        };
        logged.log.detach_writer();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let streams = self.streams.clone();
        // Bounded by the request itself: rmcp ends the stream with the
        // response, the request's timeouts bound that, and a closed
        // session ends all of its streams.
        runtime.spawn(keep_reading(inner, self.related.take(), logged, streams));
    }
}

/// Counts a handed-over call's stream among its session's unended ones
/// while held (see `Streams::request_streams_ended`).
pub(super) struct Unended {
    session: SessionId,
    streams: Arc<Streams>,
}

impl Unended {
    fn new(streams: &Arc<Streams>, session: &SessionId) -> Self {
        *lock(&streams.unended).entry(session.clone()).or_default() += 1;
        Self {
            session: session.clone(),
            streams: streams.clone(),
        }
    }
}

impl Drop for Unended {
    fn drop(&mut self) {
        {
            let mut unended = lock(&self.streams.unended);
            if let Some(count) = unended.get_mut(&self.session) {
                *count -= 1;
                if *count == 0 {
                    unended.remove(&self.session);
                }
            }
        }
        self.streams.unended_changed.notify_waiters();
    }
}

impl Streams {
    /// Waits until every handed-over call's stream of `session` has ended
    /// (`Recorded::awaited_at_session_end`), for at most `bound`.
    pub(super) async fn request_streams_ended(&self, session: &SessionId, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let changed = self.unended_changed.notified();
            if !lock(&self.unended).contains_key(session) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }
}

/// Reads an abandoned stream (and its queue) into its log until the
/// response, then keeps the log for [`ORPHAN_RETENTION`].
async fn keep_reading<S>(
    mut inner: S,
    related: Option<OpenQueue>,
    mut logged: Logged,
    streams: Arc<Streams>,
) where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    loop {
        let next = match &related {
            Some(related) => tokio::select! {
                biased;
                message = related.next() => {
                    logged.record_related(message);
                    continue;
                }
                event = inner.next() => event,
            },
            None => inner.next().await,
        };
        let Some(event) = next else { break };
        if let Some((at, _)) = request_position(&event) {
            logged.record_rmcp(at, &on_stream(event, at, logged.key.1));
        }
    }
    drop(related);
    logged.log.finish();
    streams.keep_orphan(&logged.key);
    tokio::time::sleep(ORPHAN_RETENTION).await;
    streams.drop_orphan(&logged.key, &logged.log);
}

/// A resumed stream: the log's events after `after`, then each new one
/// until the stream ends or the client goes away.
pub(super) fn follow(
    log: Arc<StreamLog>,
    after: Position,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    let (sender, mut receiver) = mpsc::channel(RESUME_BUFFER);
    tokio::spawn(async move {
        let mut changed = log.changed.subscribe();
        let mut last = after;
        loop {
            let (events, ended) = log.after(last);
            for (at, event) in events {
                if sender.send(event).await.is_err() {
                    return;
                }
                last = at;
            }
            if ended {
                return;
            }
            tokio::select! {
                change = changed.changed() => if change.is_err() { return },
                () = sender.closed() => return,
            }
        }
    });
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use rmcp::model::RequestId;

    use super::*;
    use crate::downstream::request_streams::RequestStreams;

    fn event(id: &str) -> ServerSseMessage {
        ServerSseMessage::priming(id, Duration::from_secs(1))
    }

    fn list_changed() -> rmcp::model::ServerNotification {
        rmcp::model::ServerNotification::ToolListChangedNotification(Default::default())
    }

    fn ids(events: &[ServerSseMessage]) -> Vec<String> {
        events.iter().filter_map(|e| e.event_id.clone()).collect()
    }

    #[tokio::test]
    async fn a_dropped_stream_is_read_to_its_end_and_resumed_after_the_last_id() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        streams.session_began(&session);
        let (sender, receiver) = mpsc::channel(8);
        let mut recorded = streams.recorded(
            &session,
            Box::pin(futures::stream::unfold(receiver, |mut r| async move {
                r.recv().await.map(|e| (e, r))
            })),
            None,
        );
        sender.send(event("0/5")).await.unwrap();
        sender.send(event("1/5")).await.unwrap();
        // The gateway numbers the stream (the first here: 1).
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["0/1"]);
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["1/1"]);
        drop(recorded);
        // What rmcp sends after the client left still lands in the log.
        sender.send(event("2/5")).await.unwrap();
        sender.send(event("3/5")).await.unwrap();
        drop(sender);

        let log = streams.get(&(session.clone(), 1)).expect("kept");
        let resumed: Vec<_> = follow(
            log,
            Position {
                index: 1,
                related: 0,
            },
        )
        .collect()
        .await;
        assert_eq!(ids(&resumed), ["2/1", "3/1"]);
        // Another session never finds it.
        assert!(streams.get(&(Arc::from("s2"), 1)).is_none());
        streams.forget_request_streams(&session);
        assert!(streams.get(&(session, 1)).is_none());
    }

    /// A client that calls and hangs up in a loop: only the latest
    /// [`MAX_ORPHANS_PER_SESSION`] ended streams stay; another session's
    /// are not touched.
    #[tokio::test(start_paused = true)]
    async fn a_session_keeps_a_bounded_number_of_ended_orphans() {
        let streams = Arc::new(Streams::default());
        let (session, other): (SessionId, SessionId) = (Arc::from("s1"), Arc::from("s2"));
        streams.session_began(&session);
        streams.session_began(&other);
        let abandon = |session: &SessionId| {
            let mut recorded = streams.recorded(
                session,
                Box::pin(futures::stream::iter([event("0/1"), event("1/1")])),
                None,
            );
            async move {
                recorded.next().await.expect("the priming event");
                // Dropped before the answer: read to the end in the background.
            }
        };
        abandon(&other).await;
        abandon(&session).await;
        // Held as its background reader holds it, through the retention.
        let first = streams
            .get(&(session.clone(), 1))
            .expect("the first orphan (streams are numbered per session)");
        for _ in 0..MAX_ORPHANS_PER_SESSION + 3 {
            abandon(&session).await;
        }
        // Let every background reader reach its end (time is paused: the
        // retention does not run out meanwhile).
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let kept = |owner: &SessionId| {
            (1..=MAX_ORPHANS_PER_SESSION as u64 + 5)
                .filter(|n| streams.get(&(owner.clone(), *n)).is_some())
                .collect::<Vec<_>>()
        };
        let expected: Vec<u64> = (5..=MAX_ORPHANS_PER_SESSION as u64 + 4).collect();
        assert_eq!(kept(&session), expected, "the latest, the oldest gone");
        assert_eq!(kept(&other), [1]);
        assert!(
            first.state().events.is_empty(),
            "an evicted log holds nothing"
        );
        tokio::time::sleep(ORPHAN_RETENTION + Duration::from_secs(1)).await;
        assert!(kept(&session).is_empty() && kept(&other).is_empty());
        assert!(lock(&streams.orphans).is_empty(), "nothing left behind");
    }

    #[tokio::test]
    async fn queued_messages_go_out_between_rmcp_events_and_resume_in_place() {
        let streams = Arc::new(Streams::default());
        let requests = Arc::new(RequestStreams::default());
        let session: SessionId = Arc::from("s1");
        streams.session_began(&session);
        let related = requests.open(&session, RequestId::Number(1));
        let queue = requests.queue("s1", &RequestId::Number(1)).expect("open");
        let (sender, receiver) = mpsc::channel(8);
        let mut recorded = streams.recorded(
            &session,
            Box::pin(futures::stream::unfold(receiver, |mut r| async move {
                r.recv().await.map(|e| (e, r))
            })),
            related,
        );
        // Queued before the priming event: held until it names the stream.
        assert!(queue.push(list_changed()).is_none(), "open");
        sender.send(event("0/9")).await.unwrap();
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["0/1"]);
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["0.1/1"]);
        assert!(queue.push(list_changed()).is_none(), "open");
        // Queued ahead of what rmcp has ready.
        sender.send(event("1/9")).await.unwrap();
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["0.2/1"]);
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["1/1"]);
        drop(recorded);
        sender.send(event("2/9")).await.unwrap();
        drop(sender);

        let log = streams.get(&(session, 1)).expect("kept");
        let after = |index, related| Position { index, related };
        let all: Vec<_> = follow(log.clone(), after(0, 0)).collect().await;
        assert_eq!(ids(&all), ["0.1/1", "0.2/1", "1/1", "2/1"]);
        // The queue closed with the stream: the relay falls back.
        assert!(queue.push(list_changed()).is_some());
        let rest: Vec<_> = follow(log, after(0, 1)).collect().await;
        assert_eq!(ids(&rest), ["0.2/1", "1/1", "2/1"]);
    }

    /// rmcp numbers a session's requests from 0 again after the session
    /// wakes; a stream from before, still resumable, keeps its own events.
    #[tokio::test]
    async fn streams_rmcp_numbered_alike_keep_their_own_ids_and_logs() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        streams.session_began(&session);
        let mut before = streams.recorded(
            &session,
            futures::stream::iter([event("0/0"), event("1/0")]),
            None,
        );
        let first = ids(&[before.next().await.unwrap()]);
        // The client went away; rmcp's session slept and woke meanwhile.
        drop(before);
        let after = streams.recorded(
            &session,
            futures::stream::iter([event("0/0"), event("1/0"), event("2/0")]),
            None,
        );
        let second: Vec<_> = after.collect().await;
        assert_ne!(first[0], ids(&second)[0], "two streams, one id");
        let (_, first_stream) = first[0].split_once('/').unwrap();
        let log = streams
            .get(&(session, first_stream.parse().unwrap()))
            .expect("the first stream is still resumable");
        let resumed: Vec<_> = follow(log, Position::default()).collect().await;
        assert_eq!(ids(&resumed), [format!("1/{first_stream}")]);
    }

    #[tokio::test]
    async fn a_stream_read_to_its_end_is_forgotten() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        streams.session_began(&session);
        let recorded = streams.recorded(
            &session,
            futures::stream::iter([event("0/1"), event("1/1")]),
            None,
        );
        assert_eq!(ids(&recorded.collect::<Vec<_>>().await), ["0/1", "1/1"]);
        assert!(streams.get(&(session, 1)).is_none());
    }

    #[test]
    fn a_log_keeps_only_its_newest_events() {
        let log = StreamLog::new();
        for index in 0..MAX_KEPT_EVENTS + 10 {
            let at = Position { index, related: 0 };
            log.record(at, event(&format!("{index}/1")));
        }
        let (events, ended) = log.after(Position::default());
        assert_eq!(events.len(), MAX_KEPT_EVENTS);
        assert_eq!(events[0].0.index, 10);
        assert!(!ended);
    }
}
