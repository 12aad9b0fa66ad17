//! The HTTP client of Streamable HTTP upstreams: reqwest, plus trace context.
//!
//! rmcp's transport sends each message with headers fixed at connect time;
//! this wrapper adds the W3C `traceparent`/`tracestate` of the message being
//! posted (taken from its `_meta`, where the upstream request span put it)
//! as HTTP headers too, so HTTP-level tracing in front of the upstream sees
//! the same trace. It also tells [`StandaloneStream`] when the server has
//! answered the session's first `GET` (the stream for messages that belong
//! to no request), and posts the requests marked in [`RawAnswers`] itself
//! ([`RawPost`]), so their answers are seen before rmcp parses them (and
//! shows it what comes on `GET` streams, where a resumed answer comes), and
//! shows the direct path ([`DirectCalls`]) how posts on the session look,
//! and makes an error without an id on a request's event stream, resumed
//! or not, that request's answer ([`AnswerStreams`]). Everything else is
//! rmcp's reqwest implementation.

use std::{borrow::Cow, collections::HashMap, sync::Arc, time::Duration};

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, GetMeta, JsonRpcMessage},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    direct_call::{DirectCalls, SessionPost},
    idless_errors::AnswerStreams,
    raw::RawAnswers,
    raw_post::RawPost,
    same_task_http::SameTaskError,
};

#[derive(Clone)]
pub struct TracingHttpClient {
    client: reqwest::Client,
    standalone: Arc<watch::Sender<bool>>,
    raw: Arc<RawAnswers>,
    direct: Arc<DirectCalls>,
    /// The upstream session's end (`UpstreamSession::ended`), cancelled
    /// when a `GET` shows the session gone (see [`Self::saw_get`]).
    ended: CancellationToken,
    /// `UpstreamSession::expired`: cancelled with `ended` when the server
    /// said it does not know the session.
    expired: CancellationToken,
    /// Whether a `GET` of the session's stream has been served once.
    stream_served: Arc<std::sync::atomic::AtomicBool>,
    /// The mount's name, for the log lines of rmcp's tasks (no span
    /// names it there).
    mount: Arc<str>,
    /// Since when every `GET` has failed to reach the server, and when
    /// the last did, if the last did.
    unconnected: Arc<std::sync::Mutex<Option<Unconnected>>>,
    /// Whether the session ends once its server has been unreachable for
    /// [`UNCONNECTED_ENDS_AFTER`] (see [`Self::saw_get`]).
    ends_when_unreachable: bool,
    /// Laid over the configured headers of every request.
    live: Option<super::LiveHeaders>,
    /// The mount's configured headers, whose values an error answer that
    /// echoes them must not show (`quoted_error.rs`).
    configured: Arc<HashMap<HeaderName, HeaderValue>>,
    /// Request streams that ended before their answer, for their resumes.
    answer_streams: Arc<AnswerStreams>,
    /// How the server refused `notifications/initialized`, if it did:
    /// rmcp then fails the handshake saying only that its channel closed.
    handshake_refusal: Arc<std::sync::OnceLock<String>>,
}

/// Once the session's `GET`s have failed to connect for this long (a
/// stream that was served broke), the session ends (see
/// [`TracingHttpClient::saw_get`]).
const UNCONNECTED_ENDS_AFTER: Duration = Duration::from_secs(2);

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The most of an error answer's body rmcp reads for its quote.
const ERROR_BODY_READ: usize = 4096;

/// The least wait, in milliseconds, before a stream is reopened, whatever
/// a server's `retry` says.
const RETRY_MIN_MS: u64 = 250;

/// After this many failed first `GET`s of a session's message stream, it
/// is said at `warn`, once.
const FIRST_GET_FAILURES_WARNED: usize = 5;

impl TracingHttpClient {
    pub fn new(
        client: reqwest::Client,
        raw: Arc<RawAnswers>,
        direct: Arc<DirectCalls>,
        ended: CancellationToken,
        expired: CancellationToken,
    ) -> (Self, StandaloneStream) {
        let (standalone, settled) = watch::channel(false);
        let client = Self {
            client,
            standalone: Arc::new(standalone),
            raw,
            direct,
            ended,
            expired,
            stream_served: Default::default(),
            unconnected: Default::default(),
            ends_when_unreachable: true,
            mount: Arc::from(""),
            live: None,
            configured: Arc::default(),
            answer_streams: Default::default(),
            handshake_refusal: Arc::default(),
        };
        (client, StandaloneStream(settled))
    }

    /// Where the server's refusal of `notifications/initialized` is kept
    /// (see [`Self::handshake_refusal`]'s field).
    pub fn handshake_refusal(&self) -> Arc<std::sync::OnceLock<String>> {
        self.handshake_refusal.clone()
    }

    /// Keeps the session open however long its server cannot be reached
    /// (`false`): a client's own session, whose server may hold its state
    /// through a network's blip, rather than one the supervisor watches
    /// (see [`Self::saw_get`]).
    pub fn ending_when_unreachable(mut self, ends: bool) -> Self {
        self.ends_when_unreachable = ends;
        self
    }

    /// Names mount `mount` in what it logs.
    pub fn for_mount(mut self, mount: &str) -> Self {
        self.mount = Arc::from(mount);
        self
    }

    /// Keeps `configured`'s values (the mount's headers, sent by rmcp
    /// with every request) out of the error answers it quotes.
    pub fn with_configured_headers(mut self, configured: HashMap<HeaderName, HeaderValue>) -> Self {
        self.configured = Arc::new(configured);
        self
    }

    /// Sends `live`'s current values with every request (see
    /// [`super::live_headers`]).
    pub fn with_live_headers(mut self, live: Option<super::LiveHeaders>) -> Self {
        self.live = live;
        self
    }

    /// `events` of a `GET`, each shown to [`RawAnswers`] first. rmcp
    /// resumes a request's stream that broke (or that a server closed to
    /// be polled, SEP-1699) with a `GET`: the answer of a request marked
    /// there can come on it, and was lost (`tools/list` without its tools'
    /// `execution`).
    fn tapped(
        &self,
        events: BoxStream<'static, Result<Sse, SseError>>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        use futures::StreamExt;
        let raw = self.raw.clone();
        as_read(events)
            .inspect(move |event| {
                if let Ok(Sse {
                    data: Some(data), ..
                }) = event
                {
                    raw.offer(data.as_bytes());
                }
            })
            .boxed()
    }

    /// `events` of a `GET` from `last_event_id`: a request's stream
    /// resumed is that request's (see [`AnswerStreams`]), then each event
    /// is shown to [`RawAnswers`] as written for its request.
    fn resumed(
        &self,
        events: BoxStream<'static, Result<Sse, SseError>>,
        last_event_id: Option<&str>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        self.tapped(self.answer_streams.resumed(events, last_event_id))
    }

    fn standalone_settled(&self) {
        self.standalone.send_replace(true);
    }

    /// What a `GET` of a session's stream says about the session. rmcp
    /// opens it again whenever it drops, and on an error only logs and
    /// retries, for ever: an upstream that forgot the session (idle
    /// expiry, a restart: 404) would be noticed only when a client's call
    /// failed on it, and meanwhile its list changes and resource updates
    /// would go nowhere. Such a `GET` ends the session now, as a `POST`
    /// answered 404 does, so the supervisor (or the next per-session call)
    /// reconnects. So does a 400 once a `GET` of the session has been
    /// served: the TypeScript SDK's examples (and servers copied from
    /// them) answer 400 "Invalid or missing session ID" for a session they
    /// no longer know. Not before: a server may answer 400 to a `GET` it
    /// does not serve at all (instead of 405), and its sessions are fine.
    fn saw_get<T>(&self, session: bool, result: &Result<T, StreamableHttpError<reqwest::Error>>) {
        use std::sync::atomic::Ordering;
        let Err(error) = result else {
            self.stream_served.store(true, Ordering::Release);
            *lock(&self.unconnected) = None;
            return;
        };
        let unconnected_for = {
            let mut unconnected = lock(&self.unconnected);
            match get_unreachable(error) {
                true => Unconnected::failed_again(&mut unconnected),
                false => {
                    *unconnected = None;
                    Duration::ZERO
                }
            }
        };
        let served_before = self.stream_served.load(Ordering::Acquire);
        if !session || self.ended.is_cancelled() {
            return;
        }
        if get_means_session_gone(error, served_before) {
            tracing::warn!(error = %with_causes(error), "upstream session gone (its message stream)");
            self.expired.cancel();
            self.ended.cancel();
        } else if self.ends_when_unreachable
            && served_before
            && unconnected_for >= UNCONNECTED_ENDS_AFTER
        {
            // A stream broke and the server has taken no connection since,
            // for a while: rmcp reopens every broken stream (the session's,
            // and each call's answer stream it can resume) at once, then
            // after the server's `retry`, a few seconds. So the server is
            // down. Left running, the session showed the mount ready
            // (`/readyz`, `junction_mount_state`) for as long as no client
            // called; ended, it is reconnected with backoff as after a
            // crash, and shows `degraded`, then `down`, until the server
            // is back. A server restarted in place is back before that,
            // and its 404 ends the session without a failure counted. A
            // client's own (per-session) session is not ended so: it shows
            // no mount's state, and its server may still hold its state
            // once the network is back; a call meanwhile fails, and a
            // server that forgot the session says so with a 404.
            tracing::warn!(error = %with_causes(error), mount = %self.mount, "the upstream cannot be reached (its message stream broke); ending the session");
            self.ended.cancel();
        }
    }
}

/// Whether a failed `GET` of a session's stream means the session is over:
/// the server answered that it does not know it (404, which rmcp reports
/// for a `GET` as a plain HTTP error; 400 too if such a `GET` was
/// `served_before`, see [`TracingHttpClient::saw_get`]). Not a refused
/// connection: the server may be on its way back with the session (see
/// [`get_cannot_connect`] for what is done then).
fn get_means_session_gone(
    error: &StreamableHttpError<reqwest::Error>,
    served_before: bool,
) -> bool {
    match error {
        StreamableHttpError::SessionExpired => true,
        StreamableHttpError::Client(error) => match error.status() {
            Some(reqwest::StatusCode::NOT_FOUND) => true,
            Some(reqwest::StatusCode::BAD_REQUEST) => served_before,
            _ => false,
        },
        _ => false,
    }
}

/// Whether a failed `GET` did not reach the server: not connected at all
/// (refused, no route, the connect timed out), or a proxy in front of it
/// said it cannot (502, 503, 504).
fn get_unreachable(error: &StreamableHttpError<reqwest::Error>) -> bool {
    let unreachable = |status: u16| matches!(status, 502..=504);
    match error {
        StreamableHttpError::Client(error) => {
            error.is_connect() || error.status().is_some_and(|s| unreachable(s.as_u16()))
        }
        StreamableHttpError::HttpStatus(error) => unreachable(error.status),
        _ => false,
    }
}

/// A run of `GET`s that did not reach the server.
#[derive(Clone, Copy, Debug)]
struct Unconnected {
    since: std::time::Instant,
    last: std::time::Instant,
}

/// Failures further apart than rmcp's longest wait between tries belong
/// to different runs: one of a stream dropped before its next try (a
/// call's answer stream, its call over) says nothing of a failure hours
/// later.
const SAME_RUN_WITHIN: Duration = Duration::from_secs(12);

impl Unconnected {
    /// Another `GET` did not reach the server: how long the run has lasted.
    fn failed_again(run: &mut Option<Unconnected>) -> Duration {
        let now = std::time::Instant::now();
        let since = match *run {
            Some(Unconnected { since, last }) if now.duration_since(last) <= SAME_RUN_WITHIN => {
                since
            }
            _ => now,
        };
        *run = Some(Unconnected { since, last: now });
        now.duration_since(since)
    }
}

/// Whether an upstream session's stream for unsolicited messages is up.
///
/// rmcp opens it (`GET`) only after `notifications/initialized`, in the
/// background, and a server typically drops what it has to send there while
/// no such stream exists (the TypeScript SDK does): a `list_changed` sent
/// in answer to the session's first call would be lost. So a new session is
/// used once the server has answered that `GET`, either way.
pub struct StandaloneStream(watch::Receiver<bool>);

impl StandaloneStream {
    /// Waits until the server answered the `GET` (or no `GET` will be
    /// made: a session without an id has none), for at most `limit`.
    pub async fn settled(mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.0.wait_for(|settled| *settled))
            .await
            .is_ok_and(|result| result.is_ok())
    }
}

/// `custom_headers` plus the message's trace context, if it has one.
fn with_trace_headers(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let JsonRpcMessage::Request(request) = message {
        headers.extend(trace_headers(&request.request));
    }
    headers
}

/// The request's W3C trace context (from its `_meta`, where the upstream
/// request span put it) as HTTP headers.
pub(super) fn trace_headers(
    request: &ClientRequest,
) -> impl Iterator<Item = (HeaderName, HeaderValue)> + use<'_> {
    let meta = &request.get_meta().0;
    [
        ("traceparent", meta.get_traceparent()),
        ("tracestate", meta.get_tracestate()),
    ]
    .into_iter()
    .filter_map(|(name, value)| {
        let value = HeaderValue::from_str(value?).ok()?;
        Some((HeaderName::from_static(name), value))
    })
}

impl StreamableHttpClient for TracingHttpClient {
    type Error = reqwest::Error;

    /// rmcp's transport posts through `post_message_with_response_limits`;
    /// this (required by the trait) and the trait's other defaults lead there.
    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        super::live_headers::apply(&self.live, &mut custom_headers);
        let initialize = matches!(
            &message,
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::InitializeRequest(_))
        );
        let initialized = matches!(
            &message,
            JsonRpcMessage::Notification(notification)
                if matches!(notification.notification, ClientNotification::InitializedNotification(_))
        );
        if initialized {
            // The session id and protocol version are negotiated by now.
            // The URL is parsed once here rather than on every call (a
            // URL rmcp could post to always parses; if not, calls simply
            // stay on rmcp's path).
            if let Ok(url) = reqwest::Url::parse(&uri) {
                self.direct.session_ready(SessionPost {
                    url,
                    session_id: session_id.clone(),
                    auth_header: auth_header.clone(),
                    headers: custom_headers.clone(),
                });
            }
        }
        let raw_wanted = matches!(
            &message,
            JsonRpcMessage::Request(request) if self.raw.is_wanted(&request.id)
        );
        let session_known = session_id.is_some();
        // Quoted errors hide these too: an upstream session id lets whoever
        // reaches the server act in the session.
        let not_quoted = [session_id.clone(), auth_header.as_deref().map(Arc::from)];
        let request_id = match &message {
            JsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let headers = with_trace_headers(&message, custom_headers);
        // Enough to find a header value echoed across the quote's end.
        let mut limits = limits;
        limits.max_error_response_size = limits.max_error_response_size.min(ERROR_BODY_READ);
        let response = if raw_wanted {
            let post = RawPost {
                client: &self.client,
                raw: &self.raw,
                uri: &uri,
                session_id: session_id.as_deref(),
                auth_header,
                headers,
                limits,
            };
            post.send(&message).await
        } else {
            self.client
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    limits,
                )
                .await
        }
        .map_err(|error| quoting_safely(error, &self.configured, &self.live, &not_quoted));
        // A server's refusal of a session it does not know, sent as a
        // JSON-RPC error (with a 400, which rmcp reads as a message): the
        // session is over, as a 404 says (`direct_call::refuses_unknown_session`
        // for the paths that read the body themselves).
        let response = match response {
            Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), _))
                if session_known && refuses_session(&error) =>
            {
                Err(StreamableHttpError::SessionExpired)
            }
            // An error without an id answering the POST of one request is
            // that request's (as `direct_call::answer_to` takes it): rmcp,
            // matching answers by id, would leave it waiting out its
            // timeout. Unless it says the session is gone, which ends the
            // session (`ordered::says_session_is_gone`).
            Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(mut error), session))
                if error.id.is_none()
                    && request_id.is_some()
                    && !super::ordered::talks_of_the_session(&error.error) =>
            {
                error.id = request_id;
                Ok(StreamableHttpPostResponse::Json(
                    JsonRpcMessage::Error(error),
                    session,
                ))
            }
            // A JSON answer to the POST of one request is that request's:
            // one naming another id would be matched to nothing, and the
            // request would wait out its timeout (the direct path fails
            // such a call at once).
            Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Response(answer), session))
                if request_id
                    .as_ref()
                    .is_some_and(|id| !answers_id(id, &answer.id)) =>
            {
                Ok(StreamableHttpPostResponse::Json(
                    super::unreadable_answer::unreadable_answer(
                        request_id,
                        format!(
                            "the upstream answered the request with another id ({})",
                            answer.id
                        ),
                    ),
                    session,
                ))
            }
            // So is a request accepted without an answer (HTTP 202), which
            // the spec does not allow: none would come.
            Ok(StreamableHttpPostResponse::Accepted) if request_id.is_some() => {
                Ok(StreamableHttpPostResponse::Json(
                    super::unreadable_answer::unreadable_answer(
                        request_id,
                        "the upstream accepted the request without answering it (HTTP 202 or 204)"
                            .to_owned(),
                    ),
                    None,
                ))
            }
            // So is one on the request's own event stream.
            // Its text made readable where it is not valid Unicode.
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let events = as_read(events);
                match request_id {
                    Some(id) => Ok(StreamableHttpPostResponse::Sse(
                        self.answer_streams.answering(events, id),
                        session,
                    )),
                    None => Ok(StreamableHttpPostResponse::Sse(events, session)),
                }
            }
            other => other,
        };
        if initialized {
            let refusal = match &response {
                Ok(StreamableHttpPostResponse::Accepted) => None,
                Ok(_) => Some(
                    "it answered notifications/initialized with a body, where 202 Accepted is due"
                        .to_owned(),
                ),
                Err(error) => Some(format!(
                    "it refused notifications/initialized: {}",
                    with_causes(error)
                )),
            };
            if let Some(refusal) = refusal {
                let _ = self.handshake_refusal.set(refusal);
            }
        }
        // rmcp opens the stream only for a session with an id.
        if initialize
            && !matches!(
                &response,
                Ok(StreamableHttpPostResponse::Json(_, Some(_))
                    | StreamableHttpPostResponse::Sse(_, Some(_)))
            )
        {
            self.standalone_settled();
        }
        response
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        super::live_headers::apply(&self.live, &mut custom_headers);
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        super::live_headers::apply(&self.live, &mut custom_headers);
        let session = session_id.is_some();
        let resuming = last_event_id.clone();
        let stream = self
            .client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.standalone_settled();
        self.saw_get(session, &stream);
        stream.map(|events| self.resumed(events, resuming.as_deref()))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        // rmcp's every GET (the session's stream, a resumed answer) comes
        // here, not through `get_stream`.
        super::live_headers::apply(&self.live, &mut custom_headers);
        let session = session_id.is_some();
        let resuming = last_event_id.clone();
        // rmcp reopens a broken stream, but gives up on the session's
        // stream for good if its first `GET` fails: one 500 at the wrong
        // moment lost every list change and resource update of the
        // session. So that one is tried again here, as rmcp would reopen
        // it, until it opens or the session ends.
        let first_of_session = session
            && last_event_id.is_none()
            && !self
                .stream_served
                .load(std::sync::atomic::Ordering::Acquire);
        let mut failures = 0;
        let stream = loop {
            let stream = self
                .client
                .get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth_header.clone(),
                    custom_headers.clone(),
                    max_sse_event_size,
                )
                .await;
            let wait = match &stream {
                Err(error) if first_of_session && may_open_later(error) => {
                    use rmcp::transport::common::client_side_sse::SseRetryPolicy;
                    super::connect::stream_retry().retry(failures)
                }
                _ => None,
            };
            let (Some(wait), Err(error)) = (wait, &stream) else {
                break stream;
            };
            failures += 1;
            if failures == FIRST_GET_FAILURES_WARNED {
                // A server that answers every GET so (500 where it means
                // 405) is tried for the session's life, each 10 s.
                tracing::warn!(error = %with_causes(error), failures, "the upstream session's message stream still does not open: the server's list changes and resource updates are not received until it does; trying again every 10 s at most");
            } else {
                tracing::debug!(error = %with_causes(error), ?wait, "the upstream session's message stream did not open; trying again");
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.ended.cancelled() => break stream,
            }
        };
        self.standalone_settled();
        self.saw_get(session, &stream);
        stream.map(|events| self.resumed(events, resuming.as_deref()))
    }
}

/// An upstream's event stream as rmcp is given it: text that is not
/// valid Unicode repaired (`unicode_repair.rs`), and `retry` at least
/// [`RETRY_MIN_MS`] (rmcp waits what a server says before it reopens a
/// stream: `retry: 0` on a stream that ends at once had it reopened as
/// fast as the server answered, hundreds of times a second).
fn as_read(
    events: BoxStream<'static, Result<Sse, SseError>>,
) -> BoxStream<'static, Result<Sse, SseError>> {
    use futures::StreamExt;
    events
        .map(|mut event| {
            if let Ok(Sse { data, retry, .. }) = &mut event {
                if let Some(data) = data {
                    super::unicode_repair::repair_text(data);
                }
                if let Some(retry) = retry {
                    *retry = (*retry).max(RETRY_MIN_MS);
                }
            }
            event
        })
        .boxed()
}

/// An error of rmcp's that may quote an answer's body, without the values
/// of the headers sent (`configured` with `live` laid over them, and
/// `also`: the session id, rmcp's own bearer token), and the quote of an
/// error answer's body (`HTTP {status}: {body}`) cut (`quoted_error.rs`);
/// any other error as it is.
fn quoting_safely(
    error: StreamableHttpError<reqwest::Error>,
    configured: &HashMap<HeaderName, HeaderValue>,
    live: &Option<super::LiveHeaders>,
    also: &[Option<Arc<str>>],
) -> StreamableHttpError<reqwest::Error> {
    let StreamableHttpError::UnexpectedServerResponse(message) = &error else {
        return error;
    };
    let mut sent: Vec<HeaderValue> = {
        let mut sent = configured.clone();
        super::live_headers::apply(live, &mut sent);
        sent.into_values().collect()
    };
    sent.extend(
        also.iter()
            .flatten()
            .filter_map(|value| HeaderValue::from_str(value).ok()),
    );
    let said = match message
        .strip_prefix("HTTP ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((status, body)) => {
            let body = super::quoted_error::quoted(body, &sent);
            format!("HTTP {status}: {body}")
        }
        // rmcp quotes a body in other words too ("could not parse JSON
        // response …: {body}"), already cut.
        None => super::quoted_error::hidden(message, &sent),
    };
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(said))
}

/// Whether an answer with id `answered` is request `sent`'s: the same
/// id, or a number written as text (`"0"` for `0`), which rmcp takes too
/// (some servers write every id so).
fn answers_id(sent: &rmcp::model::RequestId, answered: &rmcp::model::RequestId) -> bool {
    use rmcp::model::NumberOrString;
    sent == answered
        || matches!(
            (sent, answered),
            (NumberOrString::Number(n), NumberOrString::String(text)) if text.parse::<i64>() == Ok(*n)
        )
}

/// Whether a `GET` that failed so may succeed later: the server said it
/// is busy or failing (429, 5xx), or was not reached (it may be
/// restarting). Not a 405 (no stream offered), an auth refusal, or a 404
/// or 400 (the session is gone, [`TracingHttpClient::saw_get`]).
fn may_open_later(error: &StreamableHttpError<reqwest::Error>) -> bool {
    match error {
        StreamableHttpError::HttpStatus(_) => true,
        StreamableHttpError::Client(error) => error.status().is_none_or(|status| {
            status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
        }),
        _ => false,
    }
}

/// Whether `error` is a server's refusal of a session it no longer knows
/// (see `direct_call::error_refuses_session`).
fn refuses_session(error: &rmcp::model::JsonRpcError) -> bool {
    let id = match &error.id {
        None => None,
        Some(rmcp::model::NumberOrString::String(id)) => Some(&**id),
        Some(rmcp::model::NumberOrString::Number(_)) => return false,
    };
    super::direct_call::error_refuses_session(id, &error.error.message)
}

/// Whether a failed send means the server no longer knows the session
/// (404), and if so whether the request was certainly not run: only when
/// the direct path's POST itself was refused. (rmcp's client reports a
/// refused POST and a refused resume of its answer stream alike.)
pub fn session_forgotten(error: &rmcp::transport::DynamicTransportError) -> Option<bool> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(forgotten) = error
        .error
        .downcast_ref::<super::direct_call::SessionForgotten>()
    {
        return Some(forgotten.unrun);
    }
    matches!(
        error
            .error
            .downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::SessionExpired)
    )
    .then_some(false)
}

/// The request the direct path handed back with a refusal (see
/// [`session_forgotten`]), taken out of `error`.
pub fn take_unsent(
    error: &rmcp::transport::DynamicTransportError,
) -> Option<Box<rmcp::model::ClientRequest>> {
    let forgotten = error
        .error
        .downcast_ref::<super::direct_call::SessionForgotten>()?;
    let mut unsent = match forgotten.unsent.lock() {
        Ok(unsent) => unsent,
        Err(poisoned) => poisoned.into_inner(),
    };
    unsent.take()
}

/// Whether a failed send means the HTTP session is over: the server said
/// the session expired (404) or cannot be reached at all. Anything else (a
/// 5xx, a malformed answer) fails only that request. (A 400 with a JSON-RPC
/// error about the session arrives as a message instead; `ordered.rs`
/// handles it.)
pub fn means_session_gone(error: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    cannot_connect(error)
        || error
            .error
            .downcast_ref::<super::direct_call::SessionForgotten>()
            .is_some()
        || matches!(
            error
                .error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>(),
            Some(StreamableHttpError::SessionExpired | StreamableHttpError::TransportChannelClosed)
        )
}

/// Whether a failed send never reached the server: the connection was
/// refused or could not be made. Such a request was not run.
pub fn cannot_connect(error: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(error) = error.error.downcast_ref::<SameTaskError>() {
        return error.is_connect();
    }
    if let Some(StreamableHttpError::Client(error)) = error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return error.is_connect();
    }
    // Other transports' errors (the legacy SSE posts') hold reqwest's as
    // their source.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*error.error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// `error` and each of its causes, as `error: cause: cause`. reqwest's
/// own text ("error sending request for url (…)") leaves out why, such
/// as a connect timeout or a refused connection. The URLs it names are cut
/// to their origin (`telemetry::redact::origins_only`): this text reaches clients (tool
/// errors), logs and `/readyz`.
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    crate::telemetry::redact::origins_only(&with_causes_as_written(error))
}

fn with_causes_as_written(error: &(dyn std::error::Error + 'static)) -> String {
    // rmcp's transport error names the transport's Rust type: only what
    // it wraps says what happened.
    if let Some(rmcp::service::ServiceError::TransportSend(sent)) =
        error.downcast_ref::<rmcp::service::ServiceError>()
    {
        return with_causes_as_written(&*sent.error);
    }
    let mut text = error.to_string();
    // rmcp's client error holds reqwest's without naming it its source.
    let mut cause = match error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(client)) => {
            Some(client as &(dyn std::error::Error + 'static))
        }
        _ => error.source(),
    };
    while let Some(source) = cause {
        let said = source.to_string();
        // Some errors repeat their cause in their own text.
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = source.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    use rmcp::model::{CallToolRequest, CallToolRequestParams};

    /// A run of failed `GET`s lasts from its first; one failure long
    /// after the last starts a new run (a stream dropped between tries
    /// left the old one behind).
    #[test]
    fn failed_gets_count_their_run_from_its_first() {
        use std::time::Instant;
        let ago = |seconds| Instant::now().checked_sub(Duration::from_secs(seconds));
        let mut run = None;
        assert!(Unconnected::failed_again(&mut run) < Duration::from_secs(1));
        assert!(Unconnected::failed_again(&mut run) < Duration::from_secs(1));
        let (three, one, twenty) = (ago(3), ago(1), ago(20));
        let (Some(three), Some(one), Some(twenty)) = (three, one, twenty) else {
            panic!("the monotonic clock is younger than 20 s");
        };
        run = Some(Unconnected {
            since: three,
            last: one,
        });
        assert!(Unconnected::failed_again(&mut run) >= Duration::from_secs(3));
        run = Some(Unconnected {
            since: twenty,
            last: twenty,
        });
        assert!(Unconnected::failed_again(&mut run) < Duration::from_secs(1));
    }

    /// An error answer's body that echoes the mount's header or a
    /// session's forwarded one is quoted without them, and cut; a body
    /// rmcp quotes otherwise is without them too.
    #[test]
    fn an_error_answer_is_quoted_without_the_headers_sent() {
        let configured = HashMap::from([(
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("MOUNT_KEY_1234"),
        )]);
        let live = Some(super::super::LiveHeaders::new(|| {
            vec![(
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer CLIENT_TOKEN_81"),
            )]
        }));
        let echoed = StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
            "HTTP 403 Forbidden: invalid credentials: Bearer CLIENT_TOKEN_81 with key MOUNT_KEY_1234 {}",
            "x".repeat(60_000)
        )));
        let session: [Option<Arc<str>>; 2] = [Some(Arc::from("SESSION-ID-5150")), None];
        let said = quoting_safely(echoed, &configured, &live, &session).to_string();
        assert!(
            !said.contains("CLIENT_TOKEN") && !said.contains("MOUNT_KEY"),
            "{said}"
        );
        assert!(
            said.contains("HTTP 403 Forbidden: invalid credentials: *** with key ***"),
            "{said}"
        );
        let unknown = StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed(
            "HTTP 404 Not Found: no session SESSION-ID-5150",
        ));
        assert_eq!(
            quoting_safely(unknown, &configured, &live, &session).to_string(),
            "unexpected server response: HTTP 404 Not Found: no session ***"
        );
        assert!(said.len() < 400, "cut: {} bytes", said.len());
        let other = StreamableHttpError::<reqwest::Error>::UnexpectedServerResponse(Cow::Borrowed(
            "could not parse JSON response as ServerJsonRpcMessage: eof: key MOUNT_KEY_1234",
        ));
        assert!(quoting_safely(other, &configured, &live, &[])
            .to_string()
            .ends_with("eof: key ***"));
        let unquoting = StreamableHttpError::<reqwest::Error>::SessionExpired;
        assert!(matches!(
            quoting_safely(unquoting, &configured, &live, &[]),
            StreamableHttpError::SessionExpired
        ));
    }

    /// Only a POST the upstream refused for its forgotten session is sure
    /// not to have run: a tool call that broke off later (its stream's
    /// resume refused) may have run, and must not be sent again.
    #[test]
    fn only_a_refused_post_is_certainly_unrun() {
        use crate::upstream::direct_call::SessionForgotten;
        let error = |error: Box<dyn std::error::Error + Send + Sync>| {
            rmcp::transport::DynamicTransportError::from_parts(
                "test",
                std::any::TypeId::of::<()>(),
                error,
            )
        };
        let refused = error(Box::new(SessionForgotten {
            unrun: true,
            unsent: Default::default(),
        }));
        let broke_off = error(Box::new(SessionForgotten {
            unrun: false,
            unsent: Default::default(),
        }));
        let rmcp_said = error(Box::new(
            StreamableHttpError::<reqwest::Error>::SessionExpired,
        ));
        assert_eq!(session_forgotten(&refused), Some(true));
        assert_eq!(session_forgotten(&broke_off), Some(false));
        assert_eq!(session_forgotten(&rmcp_said), Some(false));
        for gone in [&refused, &broke_off, &rmcp_said] {
            assert!(means_session_gone(gone));
        }
    }

    #[test]
    fn a_requests_trace_context_becomes_its_headers() {
        let mut request =
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t")));
        assert_eq!(trace_headers(&request).count(), 0, "no trace, no header");
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        request.get_meta_mut().0.set_traceparent(parent);
        let headers: Vec<_> = trace_headers(&request).collect();
        assert_eq!(
            headers,
            [(
                HeaderName::from_static("traceparent"),
                HeaderValue::from_static(parent)
            )]
        );
    }

    /// A client of one upstream session, its answers shown to `raw`.
    fn test_client(raw: Arc<RawAnswers>) -> TracingHttpClient {
        let (inject, _) = tokio::sync::mpsc::channel(super::super::direct_call::INJECT_CAPACITY);
        let direct = Arc::new(DirectCalls::new(
            reqwest::Client::new(),
            inject,
            Arc::new(super::super::Relay::default()),
            StreamableHttpResponseLimits::default(),
            Duration::from_secs(5),
        ));
        let (client, _standalone) = TracingHttpClient::new(
            reqwest::Client::new(),
            raw,
            direct,
            CancellationToken::new(),
            CancellationToken::new(),
        );
        client
    }

    /// The answer to a request marked in [`RawAnswers`] that comes on a
    /// `GET` (rmcp resuming the request's stream) is seen as written.
    #[tokio::test]
    async fn an_answer_on_a_resumed_stream_is_seen_as_written() {
        use futures::StreamExt;
        let url = super::super::tests::sse_once(
            "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"tools\":[],\"x-kept\":1}}\n\n"
                .to_owned(),
        )
        .await;
        let raw = Arc::new(RawAnswers::default());
        let id = rmcp::model::RequestId::Number(7);
        raw.want(&id);
        let client = test_client(raw.clone());
        let events = client
            .get_stream(
                Arc::from(url.as_str()),
                Some(Arc::from("session-1")),
                Some("e1".to_owned()),
                None,
                HashMap::new(),
            )
            .await
            .expect("the resumed stream");
        let events: Vec<_> = events.collect().await;
        assert_eq!(events.len(), 1);
        assert_eq!(
            raw.take(&id),
            Some(serde_json::json!({"tools": [], "x-kept": 1}))
        );
    }

    /// A server answering each request with an empty event stream (a
    /// `DELETE` with 200), and telling the head of each it got.
    async fn heads_told() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let (tell, heads) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut buffer = vec![0; 8192];
                let read = stream.read(&mut buffer).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buffer[..read]).to_ascii_lowercase();
                let reply = match head.starts_with("delete") {
                    true => "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
                    false => "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\n\r\n",
                };
                let _ = tell.send(head);
                let _ = stream.write_all(reply.as_bytes()).await;
            }
        });
        (url, heads)
    }

    /// A renewed token reaches every kind of request rmcp makes on the
    /// session: its `GET`s (which come through
    /// `get_stream_with_max_sse_event_size`) and its `DELETE`, in place of
    /// the value the session was opened with.
    #[tokio::test]
    async fn live_headers_replace_the_configured_ones_on_gets_and_deletes() {
        let (url, mut heads) = heads_told().await;
        let client = test_client(Arc::new(RawAnswers::default()));
        let client = client.with_live_headers(Some(super::super::LiveHeaders::new(|| {
            vec![(
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer renewed"),
            )]
        })));
        let configured = || {
            HashMap::from([(
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer expired"),
            )])
        };
        let uri: Arc<str> = Arc::from(url.as_str());
        let session: Arc<str> = Arc::from("session-1");
        let _ = client
            .get_stream_with_max_sse_event_size(
                uri.clone(),
                Some(session.clone()),
                None,
                None,
                configured(),
                1024,
            )
            .await;
        let _ = client
            .delete_session(uri, session, None, configured())
            .await;
        for method in ["get", "delete"] {
            let head = tokio::time::timeout(Duration::from_secs(5), heads.recv())
                .await
                .expect("a request in time")
                .expect("a request");
            assert!(head.starts_with(method), "{head}");
            assert!(head.contains("authorization: bearer renewed"), "{head}");
            assert!(!head.contains("expired"), "{head}");
        }
    }

    #[tokio::test]
    async fn a_failed_post_is_told_with_its_cause() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        drop(listener);
        let refused = reqwest::Client::new().post(&url).send().await.unwrap_err();
        let error: Box<dyn std::error::Error + Send + Sync> =
            Box::new(StreamableHttpError::Client(refused));
        let text = with_causes(&*error);
        assert!(
            text.starts_with("Client error: error sending request"),
            "{text}"
        );
        // What reqwest's own text leaves out.
        assert!(text.contains(": tcp connect error"), "{text}");
        assert_eq!(text.matches("error sending request").count(), 1, "{text}");
    }

    #[test]
    fn an_error_is_followed_by_each_of_its_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot start")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("no such file"));
        assert_eq!(with_causes(&error), "cannot start: no such file");
    }
}
