//! Streamable HTTP resumption that replays exactly the rest of the stream
//! that dropped: [`ResumableSessions`] wraps rmcp's `LocalSessionManager`
//! and takes over what happens to a request's SSE stream once its client
//! goes away.
//!
//! rmcp 3.11 alone loses or repeats messages on a resume: it replays from
//! the event named by `Last-Event-ID` (the spec says strictly after it), and
//! it forgets a request's stream as soon as the response is sent, so a
//! client that reconnects after the response was produced (rmcp itself
//! tells clients to wait 3 s) never gets it. Here:
//!
//! - every event of a request's stream is recorded in a [`StreamLog`] keyed
//!   by `(session, rmcp's http request id)` while the stream is open;
//! - when the client drops the stream before it ends, a task keeps reading
//!   it into the log until the response, and the log is kept for
//!   [`ORPHAN_RETENTION`] after that;
//! - `GET` + `Last-Event-ID: <index>/<http request id>` on the same session
//!   replays the events after that index and follows the log until the
//!   response; an id of another session or of an unknown stream gets an
//!   empty stream (rmcp answers an error from `resume` that way);
//! - the standalone (`GET`) stream stays rmcp's; its event ids are shifted
//!   by one so that rmcp's "from this index" replay means "after this id",
//!   and so that they no longer collide with the priming event's `0`. A
//!   resume of it first cuts the session's earlier standalone streams off:
//!   the client has given up on them, but the server may not have noticed
//!   the dead connection yet, and rmcp would then make the resumed stream a
//!   keep-alive-only "shadow" that never carries a message.
//!
//! A stream that ended while its client was reading it is forgotten at
//! once: its response was handed to the connection. (If the connection
//! died in that instant, the response is lost, as with any HTTP response.)

use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    task::{Context, Poll},
    time::Duration,
};

use futures::{task::AtomicWaker, Stream, StreamExt};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_server::session::{
        local::{LocalSessionManager, LocalSessionManagerError},
        EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
    },
};
use tokio::sync::{mpsc, watch};

/// How long the events of a stream whose client went away are kept after
/// the stream ended, for the client to come back for its response.
pub const ORPHAN_RETENTION: Duration = Duration::from_secs(60);

/// Most events kept per stream; the oldest go first. A long call's early
/// progress may be gone by the time a late client resumes; the rest and the
/// response are still there.
const MAX_KEPT_EVENTS: usize = 256;

/// Events a resume has read ahead of its client.
const RESUME_BUFFER: usize = 16;

/// `(session, rmcp's http request id)`: one request's stream.
type StreamKey = (SessionId, u64);

/// rmcp's session manager with resumable request streams.
pub struct ResumableSessions {
    sessions: LocalSessionManager,
    streams: Arc<Streams>,
}

impl ResumableSessions {
    pub fn new(sessions: LocalSessionManager) -> Self {
        Self {
            sessions,
            streams: Arc::default(),
        }
    }
}

/// Why a `Last-Event-ID` cannot be resumed, or rmcp's own error.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(transparent)]
    Sessions(#[from] LocalSessionManagerError),
    #[error("Last-Event-ID {0:?} names no resumable stream of this session")]
    UnknownStream(String),
}

impl SessionManager for ResumableSessions {
    type Error = ResumeError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        Ok(self.sessions.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.sessions.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.sessions.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.streams.forget_session(id);
        Ok(self.sessions.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.sessions.create_stream(id, message).await?;
        Ok(Recorded {
            inner: Some(stream),
            log: None,
            session: id.clone(),
            streams: self.streams.clone(),
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.sessions.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.sessions.create_standalone_stream(id).await?;
        Ok(self.streams.standalone(id, Box::pin(stream)))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        match parse_event_id(&last_event_id) {
            Some(EventPosition::Request {
                index,
                http_request,
            }) => {
                let log = self
                    .streams
                    .get(&(id.clone(), http_request))
                    .ok_or_else(|| ResumeError::UnknownStream(last_event_id.clone()))?;
                Ok(follow(log, index + 1).left_stream())
            }
            Some(EventPosition::Standalone { index }) => {
                // rmcp replaces its standalone stream only once it sees the
                // old one closed.
                self.streams.cut_standalone(id);
                // Ours are rmcp's plus one, and rmcp replays from the index
                // it is given: rmcp's `index` is the first event after ours.
                let stream = self.sessions.resume(id, index.to_string()).await?;
                Ok(self.streams.standalone(id, Box::pin(stream)).right_stream())
            }
            None => Err(ResumeError::UnknownStream(last_event_id)),
        }
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.sessions.restore_session(id).await?)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.sessions.event_store()
    }
}

/// Where an event id of this session points.
#[derive(Debug, PartialEq, Eq)]
enum EventPosition {
    /// `<index>/<http request id>`: rmcp's id for an event of a request's
    /// stream.
    Request { index: usize, http_request: u64 },
    /// `<index>`: an event of the standalone stream (after the shift).
    Standalone { index: usize },
}

fn parse_event_id(id: &str) -> Option<EventPosition> {
    match id.split_once('/') {
        Some((index, http_request)) => Some(EventPosition::Request {
            index: index.parse().ok()?,
            http_request: http_request.parse().ok()?,
        }),
        None => Some(EventPosition::Standalone {
            index: id.parse().ok()?,
        }),
    }
}

/// rmcp numbers the standalone stream's events from 0, the same id as the
/// priming event it sends first; ours start at 1.
fn shift_standalone_id(mut event: ServerSseMessage) -> ServerSseMessage {
    if let Some(index) = event
        .event_id
        .as_deref()
        .and_then(|id| id.parse::<usize>().ok())
    {
        event.event_id = Some((index + 1).to_string());
    }
    event
}

/// The request streams that can be resumed, by session.
#[derive(Default)]
struct Streams {
    logs: Mutex<HashMap<StreamKey, Arc<StreamLog>>>,
    /// Each session's open standalone streams, for a resume to cut off.
    standalone: Mutex<HashMap<SessionId, Vec<Weak<Cuttable>>>>,
}

impl Streams {
    fn logs(&self) -> MutexGuard<'_, HashMap<StreamKey, Arc<StreamLog>>> {
        lock(&self.logs)
    }

    fn get(&self, key: &StreamKey) -> Option<Arc<StreamLog>> {
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

    /// Wraps one of `session`'s standalone streams so that a later resume
    /// can cut it off.
    fn standalone(&self, session: &SessionId, stream: BoxedEvents) -> StandaloneStream {
        let cuttable = Arc::new(Cuttable {
            stream: Mutex::new(Some(stream)),
            waker: AtomicWaker::new(),
        });
        let mut standalone = lock(&self.standalone);
        let open = standalone.entry(session.clone()).or_default();
        open.retain(|stream| stream.strong_count() > 0);
        open.push(Arc::downgrade(&cuttable));
        StandaloneStream(cuttable)
    }

    /// Ends every standalone stream `session` has open.
    fn cut_standalone(&self, session: &SessionId) {
        let open = lock(&self.standalone).remove(session).unwrap_or_default();
        for stream in open.iter().filter_map(Weak::upgrade) {
            stream.cut();
        }
    }

    /// A closed session's streams end and can no longer be resumed.
    fn forget_session(&self, session: &SessionId) {
        self.cut_standalone(session);
        self.logs().retain(|(owner, _), log| {
            let keep = owner != session;
            if !keep {
                log.finish();
            }
            keep
        });
    }
}

/// A lock that outlives a panic elsewhere: every state here stays
/// consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

type BoxedEvents = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// rmcp's receiving end of a standalone stream, which can be dropped from
/// outside: dropping it is what tells rmcp the stream is closed.
struct Cuttable {
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
struct StandaloneStream(Arc<Cuttable>);

impl Stream for StandaloneStream {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.waker.register(cx.waker());
        let mut stream = lock(&self.0.stream);
        let Some(events) = stream.as_mut() else {
            return Poll::Ready(None);
        };
        events
            .poll_next_unpin(cx)
            .map(|event| event.map(shift_standalone_id))
    }
}

/// The recent events of one request's stream, and whether it has ended.
struct StreamLog {
    state: Mutex<LogState>,
    /// Bumped after each change, for resumes waiting on the log.
    changed: watch::Sender<()>,
}

#[derive(Default)]
struct LogState {
    /// `(index, event)` in order; at most [`MAX_KEPT_EVENTS`].
    events: VecDeque<(usize, ServerSseMessage)>,
    ended: bool,
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

    fn record(&self, index: usize, event: ServerSseMessage) {
        {
            let mut state = self.state();
            if state.events.len() == MAX_KEPT_EVENTS {
                state.events.pop_front();
            }
            state.events.push_back((index, event));
        }
        self.announce();
    }

    fn finish(&self) {
        self.state().ended = true;
        self.announce();
    }

    /// A resume subscribes before it reads, so a change made after its read
    /// always finds a receiver here.
    fn announce(&self) {
        if self.changed.receiver_count() > 0 {
            self.changed.send_replace(());
        }
    }

    /// The kept events from index `from` on, and whether the stream ended.
    fn since(&self, from: usize) -> (Vec<(usize, ServerSseMessage)>, bool) {
        let state = self.state();
        let events = state
            .events
            .iter()
            .filter(|(index, _)| *index >= from)
            .cloned()
            .collect();
        (events, state.ended)
    }
}

/// The index of an event of a request's stream, from rmcp's
/// `<index>/<http request id>` id.
fn request_position(event: &ServerSseMessage) -> Option<(usize, u64)> {
    match parse_event_id(event.event_id.as_deref()?)? {
        EventPosition::Request {
            index,
            http_request,
        } => Some((index, http_request)),
        EventPosition::Standalone { .. } => None,
    }
}

/// A request's stream as rmcp produces it, recorded on the way to its
/// client; dropped unfinished, it is read to its end in the background.
struct Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    /// `None` once rmcp ended the stream.
    inner: Option<S>,
    /// Registered at the first event with an id (which names the stream).
    log: Option<(StreamKey, Arc<StreamLog>)>,
    session: SessionId,
    streams: Arc<Streams>,
}

impl<S> Recorded<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    fn record(&mut self, event: &ServerSseMessage) {
        let Some((index, http_request)) = request_position(event) else {
            return;
        };
        let (_, log) = self.log.get_or_insert_with(|| {
            let key = (self.session.clone(), http_request);
            let log = Arc::new(StreamLog::new());
            self.streams.insert(key.clone(), log.clone());
            (key, log)
        });
        log.record(index, event.clone());
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
        match inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(event)) => {
                this.record(&event);
                Poll::Ready(Some(event))
            }
            Poll::Ready(None) => {
                this.inner = None;
                // Read to the end by its own client: nothing left to resume.
                if let Some((key, log)) = this.log.take() {
                    log.finish();
                    this.streams.remove(&key, &log);
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
        let (Some(inner), Some((key, log))) = (self.inner.take(), self.log.take()) else {
            // Ended, or dropped before its first event: no client can know
            // an id to resume it with.
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let streams = self.streams.clone();
        // Bounded by the request itself: rmcp ends the stream with the
        // response, the request's timeouts bound that, and a closed
        // session ends all of its streams.
        runtime.spawn(keep_reading(inner, key, log, streams));
    }
}

/// Reads an abandoned stream into its log until the response, then keeps
/// the log for [`ORPHAN_RETENTION`].
async fn keep_reading<S>(mut inner: S, key: StreamKey, log: Arc<StreamLog>, streams: Arc<Streams>)
where
    S: Stream<Item = ServerSseMessage> + Unpin + Send + 'static,
{
    while let Some(event) = inner.next().await {
        if let Some((index, _)) = request_position(&event) {
            log.record(index, event);
        }
    }
    log.finish();
    tokio::time::sleep(ORPHAN_RETENTION).await;
    streams.remove(&key, &log);
}

/// A resumed stream: the log's events from index `from` on, then each new
/// one until the stream ends or the client goes away.
fn follow(
    log: Arc<StreamLog>,
    from: usize,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    let (sender, mut receiver) = mpsc::channel(RESUME_BUFFER);
    tokio::spawn(async move {
        let mut changed = log.changed.subscribe();
        let mut next = from;
        loop {
            let (events, ended) = log.since(next);
            for (index, event) in events {
                if sender.send(event).await.is_err() {
                    return;
                }
                next = index + 1;
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
    use super::*;

    fn event(id: &str) -> ServerSseMessage {
        ServerSseMessage::priming(id, Duration::from_secs(1))
    }

    fn ids(events: &[ServerSseMessage]) -> Vec<String> {
        events.iter().filter_map(|e| e.event_id.clone()).collect()
    }

    #[test]
    fn event_ids_parse_into_their_stream() {
        assert_eq!(
            parse_event_id("3/17"),
            Some(EventPosition::Request {
                index: 3,
                http_request: 17
            })
        );
        assert_eq!(
            parse_event_id("4"),
            Some(EventPosition::Standalone { index: 4 })
        );
        for bad in ["", "x", "-1", "1/", "/2", "1/x", "1/2/3"] {
            assert_eq!(parse_event_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn standalone_ids_start_after_the_priming_zero() {
        assert_eq!(
            shift_standalone_id(event("0")).event_id.as_deref(),
            Some("1")
        );
        assert_eq!(
            shift_standalone_id(event("9")).event_id.as_deref(),
            Some("10")
        );
    }

    #[tokio::test]
    async fn a_dropped_stream_is_read_to_its_end_and_resumed_after_the_last_id() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        let (sender, receiver) = mpsc::channel(8);
        let mut recorded = Recorded {
            inner: Some(Box::pin(futures::stream::unfold(
                receiver,
                |mut r| async move { r.recv().await.map(|e| (e, r)) },
            ))),
            log: None,
            session: session.clone(),
            streams: streams.clone(),
        };
        sender.send(event("0/5")).await.unwrap();
        sender.send(event("1/5")).await.unwrap();
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["0/5"]);
        assert_eq!(ids(&[recorded.next().await.unwrap()]), ["1/5"]);
        drop(recorded);
        // What rmcp sends after the client left still lands in the log.
        sender.send(event("2/5")).await.unwrap();
        sender.send(event("3/5")).await.unwrap();
        drop(sender);

        let log = streams.get(&(session.clone(), 5)).expect("kept");
        let resumed: Vec<_> = follow(log, 1 + 1).collect().await;
        assert_eq!(ids(&resumed), ["2/5", "3/5"]);
        // Another session never finds it.
        assert!(streams.get(&(Arc::from("s2"), 5)).is_none());
        streams.forget_session(&session);
        assert!(streams.get(&(session, 5)).is_none());
    }

    #[tokio::test]
    async fn a_stream_read_to_its_end_is_forgotten() {
        let streams = Arc::new(Streams::default());
        let session: SessionId = Arc::from("s1");
        let recorded = Recorded {
            inner: Some(futures::stream::iter([event("0/1"), event("1/1")])),
            log: None,
            session: session.clone(),
            streams: streams.clone(),
        };
        assert_eq!(ids(&recorded.collect::<Vec<_>>().await), ["0/1", "1/1"]);
        assert!(streams.get(&(session, 1)).is_none());
    }

    #[test]
    fn a_log_keeps_only_its_newest_events() {
        let log = StreamLog::new();
        for index in 0..MAX_KEPT_EVENTS + 10 {
            log.record(index, event(&format!("{index}/1")));
        }
        let (events, ended) = log.since(0);
        assert_eq!(events.len(), MAX_KEPT_EVENTS);
        assert_eq!(events[0].0, 10);
        assert!(!ended);
    }
}
