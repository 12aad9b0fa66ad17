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
//! - every event of a request's stream is recorded in a log keyed
//!   by `(session, stream number)` while the stream is open, with the
//!   messages the relay queued for that request merged in
//!   (`downstream/request_streams.rs`: rmcp would send those on the `GET`
//!   stream). The stream number is the gateway's own, counted per session
//!   for the session's life (a process-wide count told every client how
//!   much the others were sent), not rmcp's HTTP request id, which starts
//!   from 0 again when a session wakes from sleep (`request_stream.rs`);
//! - when the client drops the stream before it ends, a task keeps reading
//!   it into the log until the response, and the log is kept for
//!   60 s after that (`request_stream.rs`);
//! - `GET` + `Last-Event-ID: <index>/<stream number>` (a queued message's
//!   id: `<index>.<n>/<stream number>`) on the same session replays the
//!   events after that one and follows the log until the response (the
//!   connection still writing that stream, if any, is closed first: its
//!   client gave up on it, and a writer stuck on a full socket would hold
//!   the rest of the stream back); an id of another session or of an
//!   unknown stream gets 400 (`http/mod.rs` asks [`ResumableSessions::can_resume`]
//!   first: rmcp would answer an empty stream, which the TypeScript SDK
//!   takes for a stream to reopen, as a second `GET` stream that cuts the
//!   first off, which reopens and cuts it in turn, every 3 s for ever);
//! - the standalone (`GET`) stream stays rmcp's; its event ids are shifted
//!   by one so that rmcp's "from this index" replay means "after this id",
//!   and so that they no longer collide with the priming event's `0`. A
//!   new `GET` or a resume of one first cuts the session's earlier
//!   standalone streams off:
//!   the client has given up on them, but the server may not have noticed
//!   the dead connection yet, and rmcp would then make the resumed stream a
//!   keep-alive-only "shadow" that never carries a message. The gateway
//!   keeps the session's latest events of that stream, and reads it on
//!   while the client is away, so that a resume finds more than rmcp's
//!   few (`standalone.rs`).
//!
//! A stream that ended while its client was reading it is forgotten at
//! once: its response was handed to the connection. (If the connection
//! died in that instant, the response is lost, as with any HTTP response.)

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use foldhash::HashMap;

use futures::{FutureExt, Stream, StreamExt};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, JsonRpcRequest, ServerJsonRpcMessage},
    transport::streamable_http_server::session::{
        local::{LocalSessionManager, LocalSessionManagerError},
        EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
    },
};

mod idle;
mod opening;
mod request_stream;
mod standalone;

pub use idle::take_waking;
pub(crate) use standalone::RMCP_EVENTS_KEPT;

use super::answer_slot;
use crate::telemetry::redact::without_session_ids;
use crate::{
    downstream::{
        hibernation::Hibernation,
        prebuilt,
        quick_call::{self, Quick, QuickCalls},
        request_streams::{OpenQueue, RequestStreams},
        tasks::{self, TaskToolsListed},
    },
    gateway::Gateway,
};
use idle::{Activity, Phase};

use request_stream::{follow, StreamLog};

/// `(session, the gateway's number for the stream)`: one request's
/// stream (see `request_stream.rs`).
type StreamKey = (SessionId, u64);

/// rmcp's session manager with resumable request streams.
pub struct ResumableSessions {
    sessions: LocalSessionManager,
    streams: Arc<Streams>,
    /// Where the relay puts messages related to one request.
    request_streams: Arc<RequestStreams>,
    /// Whether any catalog lists a tool with an `execution`, which only
    /// the custom-request path can show.
    task_tools: Arc<TaskToolsListed>,
    /// When each session was last used, for putting idle ones to sleep.
    activity: Arc<Activity>,
    hibernation: Arc<Hibernation>,
    /// `session_idle_timeout`: an awake session unused this long, with no
    /// stream open, is ended here (rmcp's own idle timer is off: it sees
    /// only the requests that reach its session worker, not those answered
    /// before it, so it would end sessions in use).
    idle_timeout: Duration,
    /// For the requests answered before rmcp's handler.
    gateway: Weak<Gateway>,
    /// Calls answered before rmcp's handler, until answered or handed over.
    quick_calls: Arc<QuickCalls>,
    /// Each session's turn to open a standalone stream (`opening.rs`).
    openings: opening::Openings,
}

impl ResumableSessions {
    pub fn new(
        gateway: &Arc<Gateway>,
        sessions: LocalSessionManager,
        request_streams: Arc<RequestStreams>,
        task_tools: Arc<TaskToolsListed>,
        hibernation: Arc<Hibernation>,
    ) -> Self {
        Self {
            sessions,
            streams: Arc::default(),
            request_streams,
            task_tools,
            activity: Arc::default(),
            hibernation,
            idle_timeout: gateway.config().server.session_idle_timeout,
            gateway: Arc::downgrade(gateway),
            quick_calls: Arc::default(),
            openings: opening::Openings::default(),
        }
    }

    /// Whether `id` names a session here, awake or asleep.
    pub async fn knows_session(&self, id: &SessionId) -> bool {
        self.activity.used(id).await.is_some()
    }

    /// Whether `last_event_id` names a stream of session `id` that can be
    /// resumed: the standalone one by an id it gave out (rmcp answers one
    /// from the future with an empty stream that ends at once, which a
    /// client takes for a stream to reopen, with the same id, for ever); a
    /// request's while its log is kept (open, or ended unread within the
    /// last minute).
    pub fn can_resume(&self, id: &SessionId, last_event_id: &str) -> bool {
        match parse_event_id(last_event_id) {
            Some(EventPosition::Standalone { index }) => {
                self.streams.standalone_ids(id).gave_out(index)
            }
            Some(EventPosition::Request { stream, .. }) => {
                self.streams.get(&(id.clone(), stream)).is_some()
            }
            None => false,
        }
    }

    /// Whether session `id` is one rmcp serves now, awake: for the bypass
    /// of rmcp's `handle_post` (`call_bypass.rs`), which goes to
    /// [`SessionManager::create_stream`] only then. A use of the session, as [`SessionManager::has_session`]
    /// is; unlike it, waits for nothing and claims no wake: a session
    /// asleep, waking or closing is rmcp's (the request goes its way and
    /// `has_session` waits, once).
    pub(crate) async fn is_awake(&self, id: &SessionId) -> bool {
        self.activity.used_if_awake(id) && self.sessions.has_session(id).await.unwrap_or(false)
    }

    /// Whether `last_event_id` names a request stream of session `id`
    /// that has ended (answered and read, or given up) and is no longer
    /// kept: nothing more will ever be sent on it.
    pub fn names_ended_stream(&self, id: &SessionId, last_event_id: &str) -> bool {
        match parse_event_id(last_event_id) {
            Some(EventPosition::Request { stream, .. }) => self.streams.ended(id, stream),
            _ => false,
        }
    }

    /// Ends the awake sessions idle for `session_idle_timeout`, puts the
    /// sessions idle long enough to sleep, and ends those asleep past their
    /// idle timeout (see `downstream::hibernation`). Returns how many fell
    /// asleep.
    pub async fn sweep(&self) -> usize {
        self.end_sessions_of_removed_endpoints().await;
        for id in self.activity.idle_for(self.idle_timeout) {
            // Never the id itself: it is all a client shows to act in it.
            let session = crate::telemetry::redact::session_fingerprint(&id);
            tracing::debug!(%session, "idle session ended");
            if let Err(error) = self.close_session(&id).await {
                tracing::debug!(error = %without_session_ids(error.to_string()), "ending an idle session");
            }
        }
        self.streams.trim_standalone();
        let Some(after) = self.hibernation.after() else {
            return 0;
        };
        let mut slept = 0;
        for (id, unused_for) in self.activity.begin_sleep(after) {
            if !self.sessions.has_session(&id).await.unwrap_or(false) {
                // rmcp ended it (idle timeout, a failed start).
                self.activity.forget(&id);
                continue;
            }
            let fresh_id = SessionId::from(&*id);
            if let Some(key) = self.hibernation.put_to_sleep(&id, &fresh_id, unused_for) {
                self.keep_undelivered(&id, key).await;
                // Its request streams stay resumable: only rmcp's session goes.
                self.activity.closing_for_sleep(&id);
                if let Err(error) = self.sessions.close_session(&id).await {
                    tracing::debug!(error = %without_session_ids(error.to_string()), "closing a session put to sleep");
                }
                self.activity.set_phase(&id, Phase::Asleep);
                self.activity.rekey(&id, &fresh_id);
                self.streams.rekey_standalone(&id, &fresh_id);
                self.streams.rekey_stream_numbers(&id, &fresh_id);
                slept += 1;
            } else {
                self.activity.set_phase(&id, Phase::Awake);
            }
        }
        for id in self.hibernation.expire(std::time::Instant::now()) {
            // rmcp has no session for a sleeper, so it never calls
            // `close_session` for one: its streams' state goes here.
            self.streams.forget_session(&id);
            self.activity.forget(&id);
        }
        if slept > 0 {
            tracing::debug!(slept, "idle sessions put to sleep");
            release_freed_memory().await;
        }
        slept
    }
}

impl ResumableSessions {
    /// Ends the sessions opened on an `[endpoints]` table a reload removed,
    /// awake or asleep: their clients get 404 on that path anyway, and a
    /// stream held open (a `GET`, the older transport's) would keep such a
    /// session, and its place under `max_sessions`, for good. Its client,
    /// told its session is gone, opens a new one and learns the endpoint
    /// is gone.
    async fn end_sessions_of_removed_endpoints(&self) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let config = gateway.config();
        let (awake, asleep) = self
            .hibernation
            .of_removed_endpoints(|name| config.endpoint(name).is_some());
        for id in awake {
            if let Err(error) = self.close_session(&SessionId::from(&*id)).await {
                tracing::debug!(error = %without_session_ids(error.to_string()), "ending a session of a removed endpoint");
            }
        }
        for id in asleep {
            let id = SessionId::from(&*id);
            self.streams.forget_session(&id);
            self.activity.forget(&id);
        }
    }

    /// What rmcp holds for session `id`'s next `GET` that no stream has
    /// taken (sent while no `GET` was open), handed to the session registry
    /// to be told when the session wakes: closing rmcp's session to sleep
    /// drops it. The session is asleep in the registry already, so what is
    /// sent from now on is kept there; a send spawned just before (the
    /// registry sends from tasks of their own) may still reach rmcp's
    /// session after this read and be lost with it, a window of a task's
    /// scheduling.
    async fn keep_undelivered(&self, id: &SessionId, key: crate::gateway::SessionKey) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        // No client's `GET` is open (or the session would not sleep); a
        // task may be reading one whose client went away.
        let Some(_turn) = self.openings.turn_within_limit(id).await else {
            tracing::debug!("a session put to sleep was held up: what it had not sent is lost");
            return;
        };
        self.streams.cut_standalone(id);
        let from = self.streams.standalone_ids(id).undelivered_from();
        let stream = match self.standalone_from(id, from).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(error = %without_session_ids(error.to_string()), "reading what a session put to sleep had not been sent");
                return;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Some(event)) = stream.next().now_or_never() {
            let Some(message) = event.message else {
                continue;
            };
            match Arc::unwrap_or_clone(message) {
                rmcp::model::ServerJsonRpcMessage::Notification(notification) => {
                    gateway.sessions().tell(key, notification.notification);
                }
                _ => tracing::debug!(
                    "a request or answer for no request, dropped as its session sleeps"
                ),
            }
        }
    }
}

impl ResumableSessions {
    /// `id`'s standalone events from rmcp's index `from` on: those the
    /// gateway kept that rmcp no longer holds, then rmcp's replay and its
    /// live stream (`Streams::with_kept`). Call with the session's standalone streams cut:
    /// rmcp replays only into a stream that replaces a closed one.
    async fn standalone_from(
        &self,
        id: &SessionId,
        from: usize,
    ) -> Result<standalone::BoxedEvents, ResumeError> {
        let rmcp = tokio::time::timeout(
            opening::OPENING_LIMIT,
            self.sessions.resume(id, from.to_string()),
        )
        .await
        .map_err(|_| ResumeError::WorkerStuck)??;
        Ok(self.streams.with_kept(id, from, Box::pin(rmcp)))
    }
}

/// Sweeps `sessions` (see [`ResumableSessions::sweep`]) for as long as
/// they exist, a few times per `session_hibernate_after` (or
/// `session_idle_timeout`, if shorter or without sleep).
pub fn spawn_sweeper(sessions: &Arc<ResumableSessions>) {
    let shortest = sessions
        .hibernation
        .after()
        .map_or(sessions.idle_timeout, |after| {
            after.min(sessions.idle_timeout)
        });
    let every = (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(15));
    let sessions = Arc::downgrade(sessions);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            sessions.sweep().await;
        }
    });
}

/// The answer to `request`, whose id is that of a request still in flight
/// on the session.
fn id_in_use(request: &JsonRpcRequest<ClientRequest>) -> Vec<bytes::Bytes> {
    let error = rmcp::ErrorData::invalid_request(
        format!(
            "request id {} is already in use by a request in flight on this session",
            request.id
        ),
        None,
    );
    let answer = ServerJsonRpcMessage::error(error, Some(request.id.clone()));
    serde_json::to_vec(&answer)
        .map(|json| vec![json.into()])
        .unwrap_or_default()
}

/// Gives the heap pages freed by sessions put to sleep back to the system:
/// glibc keeps them otherwise, and resident memory would not go down.
async fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let _ = tokio::task::spawn_blocking(|| {
        // SAFETY: `malloc_trim` takes no pointers; it only returns free
        // pages of the heap to the kernel.
        unsafe { libc::malloc_trim(0) };
    })
    .await;
}

impl ResumableSessions {
    /// What becomes of `request` before rmcp's handler, when the route can
    /// take an answer and the session is awake: a list answered from its
    /// prebuilt page (`downstream/prebuilt.rs`), or a call answered or
    /// handed over by the quick path (`downstream/quick_call.rs`).
    async fn before_handler(
        &self,
        id: &SessionId,
        request: &mut JsonRpcRequest<ClientRequest>,
        open: &OpenQueue,
    ) -> Quick {
        let Some(deadline) = answer_slot::deadline() else {
            return Quick::Declined;
        };
        let (Some(gateway), Some(state)) = (self.gateway.upgrade(), self.hibernation.awake(id))
        else {
            return Quick::Declined;
        };
        // Answered here, not by the handler, which reads every other
        // request's headers for the values mounts forward.
        {
            use rmcp::model::GetExtensions;
            if let Some(parts) = request
                .request
                .extensions()
                .get::<axum::http::request::Parts>()
            {
                state.note_client_headers(&gateway, &parts.headers);
            }
        }
        if let Some(answer) = prebuilt::list(&gateway, &state, request).await {
            return Quick::Answered(answer);
        }
        quick_call::offer(
            &gateway,
            &state,
            &self.quick_calls,
            id,
            request,
            deadline,
            open,
        )
        .await
    }
}

/// Holds `open` for as long as `stream` is open.
fn counted<S: Stream<Item = ServerSseMessage>>(
    stream: S,
    open: idle::OpenStream,
) -> impl Stream<Item = ServerSseMessage> {
    stream.map(move |message| {
        let _ = &open;
        message
    })
}

/// Why a `Last-Event-ID` cannot be resumed, or rmcp's own error.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(transparent)]
    Sessions(#[from] LocalSessionManagerError),
    #[error("Last-Event-ID {0:?} names no resumable stream of this session")]
    UnknownStream(String),
    /// The session's rmcp worker did not answer within
    /// [`opening::OPENING_LIMIT`]: it waits on a stream its client does not
    /// read.
    #[error("the session is busy writing to a client that does not read; try again later")]
    WorkerStuck,
}

impl SessionManager for ResumableSessions {
    type Error = ResumeError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.sessions.create_session().await?;
        self.activity.created(&id);
        self.streams.session_began(&id);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let answer = self.sessions.initialize_session(id, message).await?;
        Ok(tasks::declare_tasks(answer))
    }

    /// Every request asks this first: it marks the session used. `false`
    /// for a session asleep, so that rmcp wakes it (`restore_session`);
    /// to the first request only, the others wait for its wake.
    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        if self.activity.used_claiming_wake(id).await == Some(Phase::Asleep) {
            return Ok(false);
        }
        Ok(self.sessions.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if self.activity.take_close_for_sleep(id) {
            return Ok(());
        }
        self.streams.forget_session(id);
        if let Some(state) = self.hibernation.awake(id) {
            state.end_quick_calls();
            // The handed-over calls that end answers ("the session has
            // ended") go through rmcp to their streams, which rmcp's close
            // would cut first: they get a moment to arrive. (Only theirs:
            // what rmcp's close ends unanswered, or a stream whose client
            // is gone, is not waited for.)
            self.streams
                .request_streams_ended(id, ANSWERS_AT_SESSION_END)
                .await;
        }
        let asleep = self.activity.used(id).await == Some(Phase::Asleep);
        self.activity.forget(id);
        if asleep && self.hibernation.end_asleep(id) {
            return Ok(());
        }
        Ok(self.sessions.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let mut handed_over = None;
        let mut related = None;
        if let ClientJsonRpcMessage::Request(request) = &mut message {
            // The request takes its id on the session before anything runs:
            // the quick path's answer, rmcp's handler, and what the relay
            // sends for it all go by that id. A request whose id is that of
            // one in flight on the session is refused: it would take the
            // first one's place in the routing of answers (rmcp's too), and
            // the first would never be answered; and, told its request is
            // invalid, its client must find that nothing of it ran. The
            // queue is open before rmcp sees the request: its handler may
            // relay a related message at once. (A quick call answered
            // gives the id back at once; one whose client went away holds
            // it until it ends: see `quick_call::Pending`.)
            match self
                .request_streams
                .adopt(id, request.id.clone(), Arc::default())
            {
                Some(open) => related = Some(open),
                None if answer_slot::fill(id_in_use(request)) => {
                    return Ok(futures::stream::empty().left_stream());
                }
                None => {}
            }
            if let Some(open) = &related {
                match self.before_handler(id, request, open).await {
                    Quick::Answered(answer) => {
                        answer_slot::fill(answer);
                        return Ok(futures::stream::empty().left_stream());
                    }
                    Quick::HandedOver(pending) => handed_over = Some(pending),
                    Quick::Declined => {}
                }
            }
        }
        let message = tasks::as_custom_request(message, self.task_tools.any());
        let stream = self.sessions.create_stream(id, message).await?;
        // rmcp has the request queued now: a cancel of it may follow.
        let was_handed_over = handed_over.take().is_some();
        let open = self.activity.stream_opened(id);
        let recorded = self.streams.recorded(id, stream, related);
        let recorded = match was_handed_over {
            true => recorded.awaited_at_session_end(),
            false => recorded,
        };
        Ok(counted(recorded, open).right_stream())
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.quick_calls.before(id, &message).await;
        let replayed_handshake_done = is_replayed_initialized(&message);
        self.sessions.accept_message(id, message).await?;
        if replayed_handshake_done {
            // Queued behind the replayed handshake from here: requests
            // waiting for the session to wake may go on.
            self.activity.set_phase(id, Phase::Awake);
        }
        Ok(())
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // A client opens a new `GET` once it has given up on the old one,
        // which the server may not know is dead (a network change, a
        // laptop waking): rmcp would make the new one a "shadow" that
        // never carries a message while the old one lives. The newest
        // stream is the session's.
        let _turn = self
            .openings
            .turn_within_limit(id)
            .await
            .ok_or(ResumeError::WorkerStuck)?;
        self.streams.cut_standalone(id);
        // rmcp would replay all it keeps (`sync(0)`), events an earlier
        // `GET` already carried included; a new stream carries only what
        // no stream has.
        let from = self.streams.standalone_opened(id).undelivered_from();
        let stream = self.standalone_from(id, from).await?;
        let open = self.activity.stream_opened(id);
        Ok(counted(
            self.streams.standalone(id, stream, Some(from)),
            open,
        ))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let open = self.activity.stream_opened(id);
        match parse_event_id(&last_event_id) {
            Some(EventPosition::Request { at, stream }) => {
                let log = self
                    .streams
                    .get(&(id.clone(), stream))
                    .ok_or_else(|| ResumeError::UnknownStream(last_event_id.clone()))?;
                log.cut_writer();
                Ok(counted(follow(log, at), open).left_stream())
            }
            Some(EventPosition::Standalone { index }) => {
                // rmcp replaces its standalone stream only once it sees the
                // old one closed.
                let _turn = self
                    .openings
                    .turn_within_limit(id)
                    .await
                    .ok_or(ResumeError::WorkerStuck)?;
                self.streams.cut_standalone(id);
                // The replay starts at the first event after the client's,
                // or, after a priming event, after what was given out
                // before its stream opened (`standalone.rs`).
                let from = self.streams.standalone_resumed(id).resume_from(index);
                let stream = self.standalone_from(id, from).await?;
                let stream = self.streams.standalone(id, stream, Some(from));
                Ok(counted(stream, open).right_stream())
            }
            None => Err(ResumeError::UnknownStream(last_event_id)),
        }
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // A session still being put to sleep is let settle first.
        self.activity.closed(&id).await;
        let outcome = self.sessions.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            // Awake once its replayed `initialized` is in (see
            // `accept_message`).
            self.activity.waking(&id);
            self.streams.standalone_woke(&id);
            // Its count goes on (kept while it slept); one this process
            // never counted for starts.
            self.streams.session_began(&id);
            // rmcp calls the session factory next, without an await between.
            idle::mark_waking();
        }
        Ok(outcome)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.sessions.event_store()
    }
}

/// Whether `message` is the `notifications/initialized` rmcp replays to
/// wake a session: the last of its handshake.
fn is_replayed_initialized(message: &ClientJsonRpcMessage) -> bool {
    use rmcp::model::GetExtensions;
    matches!(
        message,
        ClientJsonRpcMessage::Notification(notification)
            if matches!(notification.notification, rmcp::model::ClientNotification::InitializedNotification(_))
                && notification
                    .notification
                    .extensions()
                    .get::<rmcp::transport::streamable_http_server::session::SessionRestoreMarker>()
                    .is_some()
    )
}

/// Where an event id of this session points.
#[derive(Debug, PartialEq, Eq)]
enum EventPosition {
    /// `<index>/<stream>`: an event of a request's stream (rmcp's
    /// `<index>/<http request id>`, renamed for the gateway's stream
    /// number); `<index>.<n>/<stream>`: the `n`th message the gateway put on
    /// that stream after rmcp's event `<index>` (`request_stream.rs`).
    Request { at: Position, stream: u64 },
    /// `<index>`: an event of the standalone stream (after the shift).
    Standalone { index: usize },
}

/// An event's place in a request's stream: after rmcp's event `index`,
/// the `related`th message the gateway added (0: rmcp's event itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    index: usize,
    related: usize,
}

fn parse_event_id(id: &str) -> Option<EventPosition> {
    match id.split_once('/') {
        Some((at, stream)) => {
            let at = match at.split_once('.') {
                Some((index, related)) => Position {
                    index: index.parse().ok()?,
                    related: related.parse().ok()?,
                },
                None => Position {
                    index: at.parse().ok()?,
                    related: 0,
                },
            };
            Some(EventPosition::Request {
                at,
                stream: stream.parse().ok()?,
            })
        }
        None => Some(EventPosition::Standalone {
            index: id.parse().ok()?,
        }),
    }
}

/// How long a closing session waits for its handed-over calls' streams to
/// end, each with the answer its end made, before rmcp closes them: a few
/// task hops each, so this bound is for a machine too busy to make them.
const ANSWERS_AT_SESSION_END: Duration = Duration::from_millis(500);

/// The streams that can be resumed or cut off, by session.
#[derive(Default)]
struct Streams {
    logs: Mutex<HashMap<StreamKey, Arc<StreamLog>>>,
    /// Each session's streams kept after their end for a client that went
    /// away, oldest first (see `request_stream.rs`).
    orphans: Mutex<HashMap<SessionId, std::collections::VecDeque<StreamKey>>>,
    /// Each session's last request stream number (see
    /// `request_stream.rs`), kept while it sleeps.
    stream_numbers: Mutex<HashMap<SessionId, u64>>,
    standalone: Mutex<standalone::OpenStandalone>,
    /// Each session's standalone event ids and latest events (see
    /// `standalone.rs`).
    standalone_state: Mutex<HashMap<SessionId, standalone::SessionStandalone>>,
    /// Each session's handed-over calls' streams rmcp has not ended yet
    /// (see [`request_stream::Unended`]), and a wake-up at each end.
    unended: Mutex<HashMap<SessionId, usize>>,
    unended_changed: tokio::sync::Notify,
}

impl Streams {
    /// A closed session's streams end and can no longer be resumed.
    fn forget_session(&self, session: &SessionId) {
        self.cut_standalone(session);
        lock(&self.standalone_state).remove(session);
        lock(&self.stream_numbers).remove(session);
        self.forget_request_streams(session);
    }
}

/// A lock that outlives a panic elsewhere: every state here stays
/// consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_parse_into_their_stream() {
        assert_eq!(
            parse_event_id("3/17"),
            Some(EventPosition::Request {
                at: Position {
                    index: 3,
                    related: 0
                },
                stream: 17
            })
        );
        assert_eq!(
            parse_event_id("3.2/17"),
            Some(EventPosition::Request {
                at: Position {
                    index: 3,
                    related: 2
                },
                stream: 17
            })
        );
        assert_eq!(
            parse_event_id("4"),
            Some(EventPosition::Standalone { index: 4 })
        );
        for bad in [
            "", "x", "-1", "1/", "/2", "1/x", "1/2/3", "1./2", ".1/2", "1.x/2",
        ] {
            assert_eq!(parse_event_id(bad), None, "{bad:?}");
        }
    }
}
