//! Messages that belong on one downstream request's own SSE stream.
//!
//! The transport says a POST's stream carries the messages related to its
//! request, and the `GET` stream the unrelated ones. rmcp routes only
//! progress, cancellations and server requests by their request; any other
//! notification a handler sends goes to the `GET` stream. So the HTTP layer
//! opens a [`RelatedQueue`] for each POSTed request (`http/resumable`
//! merges it into that request's stream, ahead of rmcp's events), and the
//! relay puts what an upstream sends in the course of that request (its log
//! messages and progress, so that the two keep their order) there. A
//! message that finds no queue goes the old way (a log message on the
//! `GET` stream, progress by rmcp); one that finds the queue still full
//! after a moment marks it stalled and is dropped, as are the next ones
//! until its client reads again (see [`RelatedQueue::push_waiting`]).

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::{Context, Poll},
};

use foldhash::HashMap;

use futures::task::AtomicWaker;
use rmcp::model::{RequestId, ServerNotification};

/// Messages waiting for the request's stream; beyond this the relay waits
/// for room ([`ROOM_WAIT`]), then gives the message up rather than hold
/// more for a reader that does not read.
const MAX_WAITING: usize = 64;

/// How long a message waits for room in a full queue.
const ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Queues by HTTP session id, then request id.
type OpenQueues = HashMap<Arc<str>, HashMap<RequestId, Arc<RelatedQueue>>>;

/// The open request streams, by HTTP session id and request id.
#[derive(Default)]
pub struct RequestStreams {
    open: Mutex<OpenQueues>,
}

impl RequestStreams {
    fn open_streams(&self) -> MutexGuard<'_, OpenQueues> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the queue of `request` on HTTP session `session`; it closes
    /// when the returned [`OpenQueue`] is dropped. `None` if a request with
    /// that id is in flight on the session (its queue open): a JSON-RPC id
    /// may not be used twice in a session.
    pub fn open(self: &Arc<Self>, session: &Arc<str>, request: RequestId) -> Option<OpenQueue> {
        self.adopt(session, request, Arc::default())
    }

    /// Like [`Self::open`], with a queue already in use: a quick call's,
    /// handed over with its request (`downstream/quick_call.rs`).
    pub fn adopt(
        self: &Arc<Self>,
        session: &Arc<str>,
        request: RequestId,
        queue: Arc<RelatedQueue>,
    ) -> Option<OpenQueue> {
        match self
            .open_streams()
            .entry(session.clone())
            .or_default()
            .entry(request.clone())
        {
            std::collections::hash_map::Entry::Occupied(_) => return None,
            std::collections::hash_map::Entry::Vacant(place) => {
                place.insert(queue.clone());
            }
        }
        Some(OpenQueue(Arc::new(Open {
            queue,
            session: session.clone(),
            request,
            streams: self.clone(),
        })))
    }

    /// The queue of `request` on `session`, while its stream is open.
    pub fn queue(&self, session: &str, request: &RequestId) -> Option<Arc<RelatedQueue>> {
        self.open_streams().get(session)?.get(request).cloned()
    }

    fn close(&self, session: &Arc<str>, request: &RequestId, queue: &Arc<RelatedQueue>) {
        queue.close();
        let mut open = self.open_streams();
        let Some(requests) = open.get_mut(session) else {
            return;
        };
        // A client may reuse a request id once its request is answered; a
        // newer stream's queue stays.
        if requests
            .get(request)
            .is_some_and(|kept| Arc::ptr_eq(kept, queue))
        {
            requests.remove(request);
        }
        if requests.is_empty() {
            open.remove(session);
        }
    }
}

/// Notifications for one request's stream, in order.
#[derive(Default)]
pub struct RelatedQueue {
    waiting: Mutex<VecDeque<ServerNotification>>,
    waker: AtomicWaker,
    /// Woken when the stream takes a message (room for another).
    room: tokio::sync::Notify,
    /// Set when the stream ended: what comes later goes the other way.
    closed: AtomicBool,
    /// Set when a message waited [`ROOM_WAIT`] for room in vain: the
    /// client is not reading. Until the stream takes a message again, a
    /// full queue is not waited on (see [`Self::is_stalled`]).
    stalled: AtomicBool,
}

impl RelatedQueue {
    fn waiting(&self) -> MutexGuard<'_, VecDeque<ServerNotification>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `message`; gives it back when the queue is full or its stream
    /// has ended.
    #[must_use = "a message not queued must go another way"]
    pub fn push(&self, message: ServerNotification) -> Option<ServerNotification> {
        {
            let mut waiting = self.waiting();
            // Checked under the lock `close` takes, so nothing is queued
            // after the stream let go of its queue.
            if waiting.len() >= MAX_WAITING || self.closed.load(Ordering::Relaxed) {
                return Some(message);
            }
            waiting.push_back(message);
        }
        self.waker.wake();
        None
    }

    /// Like [`Self::push`], but a full queue is waited on (bounded,
    /// [`ROOM_WAIT`]) before the message is given back: an upstream writing
    /// faster than the client reads would otherwise have its messages
    /// overflow onto another way, out of order or off the request's stream.
    ///
    /// Once one message has waited in vain, the next are not waited for
    /// until the stream takes one: a client that stopped reading costs one
    /// wait, not one per message, and the upstream's other sessions, whose
    /// messages keep their turn behind these, are held up that once.
    pub async fn push_waiting(&self, message: ServerNotification) -> Option<ServerNotification> {
        if self.is_stalled() {
            return self.push(message);
        }
        let deadline = tokio::time::Instant::now() + ROOM_WAIT;
        let mut message = message;
        loop {
            // Registered before the attempt: room made in between wakes it.
            let room = self.room.notified();
            message = self.push(message)?;
            if self.closed.load(Ordering::Relaxed) {
                return Some(message);
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                // Room made as the wait ran out is room all the same.
                let message = self.push(message)?;
                self.stalled.store(true, Ordering::Relaxed);
                return Some(message);
            }
        }
    }

    /// Whether the stream's reader stopped taking messages with the queue
    /// full (see [`Self::push_waiting`]).
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    /// Ends the queue: what is pushed from now on is given back.
    pub fn close(&self) {
        {
            let _waiting = self.waiting();
            self.closed.store(true, Ordering::Relaxed);
        }
        // Whoever waits for room goes the other way now.
        self.room.notify_waiters();
    }

    /// The next queued message, if any; wakes `cx` on the next push.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<ServerNotification> {
        self.waker.register(cx.waker());
        let next = self.waiting().pop_front();
        match next {
            Some(message) => {
                self.stalled.store(false, Ordering::Relaxed);
                self.room.notify_waiters();
                Poll::Ready(message)
            }
            None => Poll::Pending,
        }
    }

    /// Waits for the next message.
    pub async fn next(&self) -> ServerNotification {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// A request stream's end of its queue, which holds the request's id on
/// its session; closes it when the last clone is dropped (a quick call
/// whose client went away holds one while it runs on).
#[derive(Clone)]
pub struct OpenQueue(Arc<Open>);

struct Open {
    queue: Arc<RelatedQueue>,
    session: Arc<str>,
    request: RequestId,
    streams: Arc<RequestStreams>,
}

impl OpenQueue {
    /// The queue itself.
    pub fn queue(&self) -> &Arc<RelatedQueue> {
        &self.0.queue
    }
}

impl std::ops::Deref for OpenQueue {
    type Target = RelatedQueue;

    fn deref(&self) -> &RelatedQueue {
        &self.0.queue
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.streams
            .close(&self.session, &self.request, &self.queue);
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use rmcp::model::ToolListChangedNotification;

    use super::*;

    fn message() -> ServerNotification {
        ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default())
    }

    #[test]
    fn a_queue_is_found_while_open_and_bounded() {
        let streams = Arc::new(RequestStreams::default());
        let session: Arc<str> = Arc::from("s1");
        let request = RequestId::Number(7);
        let open = streams.open(&session, request.clone()).expect("free");
        let queue = streams.queue("s1", &request).expect("open");
        assert!(streams.queue("s2", &request).is_none());
        assert!(streams.queue("s1", &RequestId::Number(8)).is_none());
        for _ in 0..MAX_WAITING {
            assert!(queue.push(message()).is_none(), "room");
        }
        assert!(queue.push(message()).is_some(), "full");
        assert!(open.next().now_or_never().is_some());
        drop(open);
        assert!(streams.queue("s1", &request).is_none());
        assert!(queue.push(message()).is_some(), "closed with its stream");
        assert!(streams.open_streams().is_empty());
    }

    /// A reader that stopped reading costs one wait for room, not one per
    /// message; once it takes a message, a full queue is waited on again.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_reader_is_waited_for_once() {
        let streams = Arc::new(RequestStreams::default());
        let open = streams
            .open(&Arc::from("s1"), RequestId::Number(1))
            .expect("free");
        for _ in 0..MAX_WAITING {
            assert!(open.push(message()).is_none());
        }
        let started = tokio::time::Instant::now();
        assert!(open.push_waiting(message()).await.is_some());
        assert_eq!(started.elapsed(), ROOM_WAIT, "waited once");
        assert!(open.is_stalled());
        let again = tokio::time::Instant::now();
        assert!(open.push_waiting(message()).await.is_some());
        assert_eq!(again.elapsed(), std::time::Duration::ZERO, "not again");
        assert!(open.next().now_or_never().is_some());
        assert!(!open.is_stalled(), "reading again");
        assert!(open.push_waiting(message()).await.is_none(), "room made");
    }

    /// An id is taken while its request's queue is open, on its session
    /// only, and free again once it closes.
    #[test]
    fn an_id_in_flight_is_not_opened_again() {
        let streams = Arc::new(RequestStreams::default());
        let (session, other): (Arc<str>, Arc<str>) = (Arc::from("s1"), Arc::from("s2"));
        let request = RequestId::Number(1);
        let first = streams.open(&session, request.clone()).expect("free");
        assert!(streams.open(&session, request.clone()).is_none(), "in use");
        let elsewhere = streams.open(&other, request.clone());
        assert!(elsewhere.is_some(), "another session's ids are its own");
        drop(first);
        assert!(streams.queue("s1", &request).is_none());
        assert!(
            streams.open(&session, request.clone()).is_some(),
            "free again"
        );
    }
}
