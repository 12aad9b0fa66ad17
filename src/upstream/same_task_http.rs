//! HTTP/1.1 exchanges with a plain-`http` upstream, run on the caller's
//! own task.
//!
//! reqwest (through hyper-util's pool) drives every connection from a task
//! of its own: a request is handed to that task and its answer, then each
//! chunk of its body, handed back, a wake-up of another task (often on the
//! other worker thread) each way. On the gateway's hot path that costs as
//! much as the exchange itself (BENCHMARKS.md). Here the same hyper
//! connection is driven by whoever is waiting for the answer: the caller's
//! future polls the connection while it waits for the head and while it
//! reads the body, and a connection whose body was read to the end goes
//! back to a small pool of idle ones. A connection dropped mid-answer (the
//! caller gave up) is closed, never reused, and idle ones are looked over
//! every few seconds so that one the server closed is let go of (its
//! socket closed) without waiting for the next request. A connection is registered
//! with the I/O driver of the runtime that dialled it, so the pool keeps
//! each runtime's connections apart (the gateway serves on several, see
//! `http/lanes.rs`): a caller only reuses what its own runtime dialled,
//! and waiting on it never needs another thread to turn a driver.
//!
//! Only what reqwest would do for these upstreams is done: no TLS (an
//! `https` upstream keeps reqwest), no proxy (with a proxy configured in
//! the environment every upstream keeps reqwest), no redirects.

use std::{
    collections::VecDeque,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::{Body, Incoming},
    client::conn::http1,
    header::HOST,
    http::{HeaderValue, Request, Response},
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
// tokio's clock (std's outside tests) so that a test can move it past an
// idle connection's expiry instead of sleeping.
use tokio::time::Instant;

/// Idle connections kept per upstream session and runtime; more are closed
/// after use.
const MAX_IDLE: usize = 256;
/// How long an idle connection is reused when the server did not say
/// (`Keep-Alive: timeout=N`): under the 5 s after which Node and uvicorn
/// close one. A request written as the server closes its connection fails
/// (it may have been read: a `tools/call` is not resent), so a connection
/// is given up on before the server would.
pub const DEFAULT_IDLE_LIFETIME: Duration = Duration::from_secs(4);
/// How much sooner than the server's announced keep-alive timeout an idle
/// connection is given up on: the server's clock started when it wrote the
/// answer, ours when we read it to the end.
const KEEP_ALIVE_MARGIN: Duration = Duration::from_secs(1);
/// The longest an idle connection is reused, whatever the server says.
const MAX_IDLE_LIFETIME: Duration = Duration::from_secs(60);
/// How often idle connections are looked over while there are any, so
/// that one the server closed (Node and uvicorn close idle keep-alive
/// connections after 5 s) is let go of without waiting for a request.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum SameTaskError {
    #[error("cannot connect to the upstream: {0}")]
    Connect(std::io::Error),
    #[error("cannot connect to the upstream within {0:?}")]
    ConnectTimeout(Duration),
    /// hyper's own text is terse ("connection error"): its cause follows.
    #[error("HTTP: {0}{cause}", cause = cause(.0))]
    Http(hyper::Error),
    #[error("the upstream closed the connection before answering")]
    Closed,
}

fn cause(error: &hyper::Error) -> String {
    std::error::Error::source(error)
        .map(|source| format!(": {source}"))
        .unwrap_or_default()
}

impl From<hyper::Error> for SameTaskError {
    fn from(error: hyper::Error) -> Self {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        let io_kind = std::error::Error::source(&error)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        let closed = matches!(
            io_kind,
            Some(BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof)
        );
        if closed || error.is_incomplete_message() || error.is_closed() {
            Self::Closed
        } else {
            Self::Http(error)
        }
    }
}

impl SameTaskError {
    /// Whether the upstream could not be reached at all (as reqwest's
    /// `is_connect`): the session is gone with it.
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::ConnectTimeout(_))
    }
}

/// Whether an upstream at `url` can be reached this way: plain `http`, no
/// credentials in the URL (reqwest sends them as Basic auth; requests here
/// carry only the configured headers), and no proxy in the environment
/// (reqwest would use it).
pub fn suits(url: &reqwest::Url) -> bool {
    suits_in(url, |name| std::env::var_os(name))
}

/// [`suits`], with the environment read through `variable`.
fn suits_in(url: &reqwest::Url, variable: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    // The variables reqwest (hyper-util's proxy matcher) reads for `http`.
    const PROXY_VARIABLES: [&str; 4] = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];
    url.scheme() == "http"
        && url.host_str().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && PROXY_VARIABLES
            .iter()
            .all(|name| variable(name).is_none_or(|value| value.is_empty()))
}

/// Connections to one upstream address, driven by their callers.
pub struct SameTaskClient {
    /// `host:port`, as dialled.
    address: String,
    host: HeaderValue,
    connect_timeout: Duration,
    /// How long a connection rests in the pool when the server did not
    /// say ([`DEFAULT_IDLE_LIFETIME`]).
    idle_lifetime: Duration,
    idle: Arc<Pool>,
}

/// Idle connections, most recently used last, apart per runtime (rarely
/// more than one per serving thread: a short list beats a map).
struct Pool {
    runtimes: Mutex<Vec<RuntimeIdle>>,
    /// How long a runtime's idle connections go unlooked-at while it has
    /// any (see [`SWEEP_EVERY`]).
    sweep_every: Duration,
}

/// One runtime's idle connections.
struct RuntimeIdle {
    runtime: tokio::runtime::Id,
    idle: VecDeque<Idle>,
    /// Whether a [`sweep_while_idle`] task runs for them on their runtime.
    swept: bool,
}

impl Pool {
    fn new(sweep_every: Duration) -> Self {
        Self {
            runtimes: Mutex::default(),
            sweep_every,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RuntimeIdle>> {
        self.runtimes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Idle connections, all runtimes together.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().iter().map(|entry| entry.idle.len()).sum()
    }

    /// Whether a sweep task runs for some runtime's idle connections.
    #[cfg(test)]
    fn is_swept(&self) -> bool {
        self.lock().iter().any(|entry| entry.swept)
    }

    fn take(&self, runtime: tokio::runtime::Id) -> Option<Idle> {
        let mut runtimes = self.lock();
        let entry = runtimes.iter_mut().find(|entry| entry.runtime == runtime)?;
        entry.idle.pop_back()
    }

    fn put(self: &Arc<Self>, connection: Connection) {
        let runtime = connection.runtime.id();
        let start_sweep_on = {
            let mut runtimes = self.lock();
            let entry = match runtimes.iter().position(|entry| entry.runtime == runtime) {
                Some(index) => &mut runtimes[index],
                None => {
                    runtimes.push(RuntimeIdle {
                        runtime,
                        idle: VecDeque::new(),
                        swept: false,
                    });
                    runtimes.last_mut().expect("just pushed")
                }
            };
            // The sweep runs where the connection's socket is watched, which
            // is not always the caller's runtime: a quick call handed over
            // to rmcp finishes on its session's lane.
            let start_sweep_on = (!entry.swept).then(|| connection.runtime.clone());
            entry.swept = true;
            // Expired ones are let go of by the sweep, not here.
            if entry.idle.len() < MAX_IDLE {
                entry.idle.push_back(Idle {
                    expires: Instant::now() + connection.idle_lifetime,
                    connection,
                });
            }
            start_sweep_on
        };
        // A runtime shut down (at exit) drops the task.
        if let Some(home) = start_sweep_on {
            home.spawn(sweep_while_idle(
                Arc::downgrade(self),
                runtime,
                self.sweep_every,
            ));
        }
    }

    /// Lets go of `runtime`'s idle connections that expired or that the
    /// server closed; whether any are left to look at later.
    fn sweep(&self, runtime: tokio::runtime::Id) -> bool {
        let Some(mut idle) = self.take_all(runtime) else {
            return false;
        };
        // Looked at (and the dead closed) outside the lock. On a lane no
        // caller runs meanwhile (one thread, nothing here awaits); on a
        // multi-threaded runtime one that does finds fewer idle and dials.
        idle.retain_mut(|kept| {
            Instant::now() < kept.expires
                && kept.connection.is_open()
                && kept.connection.is_usable()
        });
        let mut runtimes = self.lock();
        let Some(entry) = runtimes.iter_mut().find(|entry| entry.runtime == runtime) else {
            return false;
        };
        // Put back before any put meanwhile (from another thread): older.
        idle.append(&mut entry.idle);
        entry.idle = idle;
        entry.swept = !entry.idle.is_empty();
        entry.swept
    }

    fn take_all(&self, runtime: tokio::runtime::Id) -> Option<VecDeque<Idle>> {
        let mut runtimes = self.lock();
        let entry = runtimes.iter_mut().find(|entry| entry.runtime == runtime)?;
        Some(std::mem::take(&mut entry.idle))
    }
}

/// Looks over `runtime`'s idle connections every `sweep_every` until none
/// are left or the pool is gone. Without it a connection the server
/// closed while idle would hold its socket (in CLOSE_WAIT) until the next
/// request to that upstream, however long that takes.
async fn sweep_while_idle(
    pool: std::sync::Weak<Pool>,
    runtime: tokio::runtime::Id,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        if !pool.sweep(runtime) {
            return;
        }
    }
}

/// A connection at rest in the pool.
struct Idle {
    connection: Connection,
    /// When it is given up on rather than reused.
    expires: Instant,
}

/// Both halves of one hyper HTTP/1.1 connection.
struct Connection {
    send: http1::SendRequest<Full<Bytes>>,
    /// Reads and writes the socket whenever it is polled; `None` once it
    /// has ended.
    driver: Option<Driver>,
    /// The runtime whose I/O driver watches the socket.
    runtime: tokio::runtime::Handle,
    /// How long it may rest in the pool after its last answer.
    idle_lifetime: Duration,
}

type Driver = Pin<Box<http1::Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// Polls `work` with the connection's `driver` polled alongside it, until
/// `work` is done or the connection ends (`driver` is then `None`).
fn poll_driven<T>(
    driver: &mut Option<Driver>,
    cx: &mut Context<'_>,
    mut work: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<Result<T, SameTaskError>> {
    if let Poll::Ready(done) = work(cx) {
        return Poll::Ready(Ok(done));
    }
    let Some(running) = driver.as_mut() else {
        return Poll::Ready(Err(SameTaskError::Closed));
    };
    let ended = match running.as_mut().poll(cx) {
        Poll::Ready(result) => {
            *driver = None;
            Some(result)
        }
        Poll::Pending => None,
    };
    // The driver may have just delivered what `work` waits for.
    if let Poll::Ready(done) = work(cx) {
        return Poll::Ready(Ok(done));
    }
    match ended {
        None => Poll::Pending,
        Some(result) => Poll::Ready(Err(result.err().map_or(SameTaskError::Closed, Into::into))),
    }
}

impl Connection {
    /// Whether the connection can take a request now, without waiting.
    fn is_usable(&mut self) -> bool {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // Polling the driver lets it notice a close by the server while idle.
        let send = &mut self.send;
        matches!(
            poll_driven(&mut self.driver, &mut cx, |cx| send.poll_ready(cx)),
            Poll::Ready(Ok(Ok(())))
        )
    }

    /// Whether the server has not closed the connection, as far as its
    /// driver can read now. [`Self::is_usable`] polls the driver only when
    /// `poll_ready` is not ready, which for an idle connection is only
    /// after the driver has read the close; on the request path that is
    /// found cheaper by sending (an unsent request comes back).
    fn is_open(&mut self) -> bool {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        if let Some(driver) = self.driver.as_mut() {
            if driver.as_mut().poll(&mut cx).is_ready() {
                self.driver = None;
            }
        }
        self.driver.is_some()
    }
}

impl SameTaskClient {
    pub fn new(url: &reqwest::Url, connect_timeout: Duration) -> Option<Self> {
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let address = match url.host()? {
            url::Host::Ipv6(ip) => format!("[{ip}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        let host = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Some(Self {
            address,
            host: HeaderValue::from_str(&host).ok()?,
            connect_timeout,
            idle_lifetime: DEFAULT_IDLE_LIFETIME,
            idle: Arc::new(Pool::new(SWEEP_EVERY)),
        })
    }

    /// This client, resting connections `lifetime` long when the server
    /// does not say.
    #[cfg(test)]
    fn idle_for(mut self, lifetime: Duration) -> Self {
        self.idle_lifetime = lifetime;
        self
    }

    /// This client, its idle connections looked over `every` so often.
    #[cfg(test)]
    fn sweeping_every(mut self, every: Duration) -> Self {
        self.idle = Arc::new(Pool::new(every));
        self
    }

    /// Sends `request` (its URI in origin form, `/path?query`; `Host` is
    /// added) and returns the answer's head; its body is read by polling
    /// [`SameTaskBody`], which drives the connection.
    pub async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<SameTaskBody>, SameTaskError> {
        request.headers_mut().insert(HOST, self.host.clone());
        let request = match self.reused() {
            Some(mut connection) => match try_send(&mut connection, request).await {
                Ok(head) => return Ok(self.with_body(connection, head)),
                // Never written: the connection had ended under us.
                Err(Unsent::Again(request)) => *request,
                Err(Unsent::Failed(error)) => return Err(error),
            },
            None => request,
        };
        let mut connection = self.dial().await?;
        match try_send(&mut connection, request).await {
            Ok(head) => Ok(self.with_body(connection, head)),
            Err(Unsent::Again(_)) => Err(SameTaskError::Closed),
            Err(Unsent::Failed(error)) => Err(error),
        }
    }

    fn with_body(
        &self,
        mut connection: Connection,
        head: Response<Incoming>,
    ) -> Response<SameTaskBody> {
        connection.idle_lifetime = idle_lifetime(head.headers(), self.idle_lifetime);
        head.map(|body| SameTaskBody {
            body,
            connection: Some(connection),
            idle: self.idle.clone(),
        })
    }

    /// The most recently used idle connection that is still open.
    fn reused(&self) -> Option<Connection> {
        let runtime = tokio::runtime::Handle::current().id();
        loop {
            // Looked at (and a dead one closed) outside the lock.
            let mut candidate = self.idle.take(runtime)?;
            if Instant::now() < candidate.expires && candidate.connection.is_usable() {
                return Some(candidate.connection);
            }
        }
    }

    async fn dial(&self) -> Result<Connection, SameTaskError> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.address))
            .await
            .map_err(|_| SameTaskError::ConnectTimeout(self.connect_timeout))?
            .map_err(SameTaskError::Connect)?;
        // Each message is written whole; Nagle would only hold it back.
        let _ = stream.set_nodelay(true);
        let (send, driver) = http1::handshake(TokioIo::new(stream)).await?;
        Ok(Connection {
            send,
            driver: Some(Box::pin(driver)),
            runtime: tokio::runtime::Handle::current(),
            idle_lifetime: self.idle_lifetime,
        })
    }
}

/// How long a connection may rest in the pool after an answer with
/// `headers`: [`KEEP_ALIVE_MARGIN`] less than the `timeout` of a
/// `Keep-Alive` header (RFC 7230's hint, which Node sends), `otherwise`
/// without one; never more than [`MAX_IDLE_LIFETIME`].
fn idle_lifetime(headers: &hyper::HeaderMap, otherwise: Duration) -> Duration {
    let announced = headers
        .get_all("keep-alive")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|parameter| {
            let (name, seconds) = parameter.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("timeout")
                .then(|| seconds.trim().parse::<u64>().ok())?
        })
        .min();
    match announced {
        Some(seconds) => Duration::from_secs(seconds).saturating_sub(KEEP_ALIVE_MARGIN),
        None => otherwise,
    }
    .min(MAX_IDLE_LIFETIME)
}

enum Unsent {
    /// The connection could not take it; the request comes back.
    Again(Box<Request<Full<Bytes>>>),
    Failed(SameTaskError),
}

/// Sends `request` on `connection`, driving it until the answer's head.
async fn try_send(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Unsent> {
    let Connection { send, driver, .. } = connection;
    let ready = std::future::poll_fn(|cx| poll_driven(driver, cx, |cx| send.poll_ready(cx))).await;
    if !matches!(ready, Ok(Ok(()))) {
        return Err(Unsent::Again(Box::new(request)));
    }
    let mut answer = std::pin::pin!(send.try_send_request(request));
    let answer =
        std::future::poll_fn(|cx| poll_driven(driver, cx, |cx| answer.as_mut().poll(cx))).await;
    match answer {
        Ok(Ok(head)) => Ok(head),
        Ok(Err(mut error)) => match error.take_message() {
            Some(request) => Err(Unsent::Again(Box::new(request))),
            None => Err(Unsent::Failed(error.into_error().into())),
        },
        Err(error) => Err(Unsent::Failed(error)),
    }
}

/// An answer's body; reading it drives its connection, and reading it to
/// the end puts the connection back in the pool.
pub struct SameTaskBody {
    body: Incoming,
    connection: Option<Connection>,
    idle: Arc<Pool>,
}

impl SameTaskBody {
    fn release(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        // One the server keeps open for under a second is not worth
        // keeping (see `idle_lifetime`).
        if connection.driver.is_some() && !connection.idle_lifetime.is_zero() {
            self.idle.put(connection);
        }
    }
}

impl futures::Stream for SameTaskBody {
    type Item = Result<Bytes, SameTaskError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let body = &mut this.body;
            let frame = match this.connection.as_mut() {
                Some(connection) => {
                    match poll_driven(&mut connection.driver, cx, |cx| {
                        Pin::new(&mut *body).poll_frame(cx)
                    }) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(frame)) => frame,
                        Poll::Ready(Err(error)) => {
                            this.connection = None;
                            return Poll::Ready(Some(Err(error)));
                        }
                    }
                }
                None => match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(frame) => frame,
                },
            };
            match frame {
                None => {
                    this.release();
                    return Poll::Ready(None);
                }
                Some(Err(error)) => {
                    this.connection = None;
                    return Poll::Ready(Some(Err(error.into())));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if this.body.is_end_stream() {
                            this.release();
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                    // Trailers: nothing to pass on.
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use super::*;

    /// How a test server answers each request on a connection.
    #[derive(Clone, Copy)]
    enum Answer {
        /// `Content-Length` body "ok", connection kept.
        Whole,
        /// A chunked body "hello world" in two chunks, connection kept.
        Chunked,
        /// "ok", then the server closes the connection when told to.
        ThenClose,
        /// Promises 10 bytes, sends 5, then waits.
        Partial,
        /// Closes the connection without answering.
        Nothing,
        /// Resets the connection (RST) without answering.
        Reset,
        /// "ok" to a connection's first request; the next one arrives as
        /// the server closes the connection (its keep-alive timeout): no
        /// answer.
        FirstOnly,
        /// "ok" with `Keep-Alive: timeout=1`: the server keeps an idle
        /// connection for at most a second.
        BriefKeepAlive,
    }

    /// A server on 127.0.0.1 answering every request with `answer`;
    /// returns its URL and the number of connections it accepted.
    async fn server(answer: Answer) -> (reqwest::Url, Arc<AtomicUsize>) {
        let (url, accepted, _closed) = server_telling_closes(answer).await;
        (url, accepted)
    }

    /// [`server`], closing a connection (`ThenClose`) once `close` is
    /// notified and saying so on the receiver.
    async fn server_telling_closes(
        answer: Answer,
    ) -> (
        reqwest::Url,
        Arc<AtomicUsize>,
        (
            Arc<tokio::sync::Notify>,
            tokio::sync::mpsc::UnboundedReceiver<()>,
        ),
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let (closes, closed) = tokio::sync::mpsc::unbounded_channel();
        let close = Arc::new(tokio::sync::Notify::new());
        let told = close.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let closes = closes.clone();
                let told = told.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 4096];
                    let mut answered = 0;
                    loop {
                        // Every test request is small and has no body.
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        answered += 1;
                        let reply: &[u8] = match answer {
                            Answer::Nothing => return,
                            Answer::FirstOnly if answered > 1 => return,
                            Answer::Reset => {
                                let _ = stream.set_linger(Some(Duration::ZERO));
                                return;
                            }
                            Answer::Whole | Answer::ThenClose | Answer::FirstOnly => {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                            }
                            Answer::BriefKeepAlive => {
                                b"HTTP/1.1 200 OK\r\nkeep-alive: timeout=1\r\ncontent-length: 2\r\n\r\nok"
                            }
                            Answer::Chunked => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                            Answer::Partial => b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345",
                        };
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                        if matches!(answer, Answer::ThenClose) {
                            told.notified().await;
                            drop(stream);
                            let _ = closes.send(());
                            return;
                        }
                    }
                });
            }
        });
        (url.parse().unwrap(), accepted, (close, closed))
    }

    fn get() -> Request<Full<Bytes>> {
        Request::get("/mcp").body(Full::default()).unwrap()
    }

    async fn body_of(client: &SameTaskClient) -> Result<String, SameTaskError> {
        let answer = client.send(get()).await?;
        let mut body = answer.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.next().await {
            text.extend_from_slice(&chunk?);
        }
        Ok(String::from_utf8(text).unwrap())
    }

    fn client(url: &reqwest::Url) -> SameTaskClient {
        SameTaskClient::new(url, Duration::from_secs(5)).expect("an http URL")
    }

    /// Runs `work` on a current-thread runtime of its own, on a thread of
    /// its own (as a serving lane), until it is done; the runtime ends then.
    fn on_another_lane<Work, Done>(work: Work) -> std::thread::JoinHandle<Done::Output>
    where
        Work: FnOnce() -> Done + Send + 'static,
        Done: Future,
        Done::Output: Send + 'static,
    {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(work())
        })
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_answer_is_read() {
        let (url, accepted) = server(Answer::Whole).await;
        let client = client(&url);
        for _ in 0..3 {
            assert_eq!(body_of(&client).await.unwrap(), "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_is_reused_only_on_the_runtime_that_dialled_it() {
        let (url, accepted) = server(Answer::Whole).await;
        let client = Arc::new(client(&url));
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        // Another runtime on another thread, as a second serving lane.
        let elsewhere = client.clone();
        // Its connection ends with its runtime; the pool must not offer it
        // to anyone else.
        let other = on_another_lane(|| async move {
            assert_eq!(body_of(&elsewhere).await.unwrap(), "ok");
            assert_eq!(body_of(&elsewhere).await.unwrap(), "ok");
        });
        tokio::task::spawn_blocking(move || other.join().unwrap())
            .await
            .unwrap();
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "one dialled per runtime"
        );
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "this runtime's reused");
    }

    #[tokio::test]
    async fn a_chunked_answer_is_read_whole_and_its_connection_reused() {
        let (url, accepted) = server(Answer::Chunked).await;
        let client = client(&url);
        assert_eq!(body_of(&client).await.unwrap(), "hello world");
        assert_eq!(body_of(&client).await.unwrap(), "hello world");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_reused() {
        let (url, accepted, (close, mut closed)) = server_telling_closes(Answer::ThenClose).await;
        let client = client(&url);
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(client.idle.len(), 1, "kept after its answer");
        close.notify_one();
        closed.recv().await.unwrap();
        // The pooled connection has ended; the request goes on a new one.
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_request_on_a_connection_the_server_is_closing_fails() {
        // The race that idle lifetimes keep away from: what a request
        // meets when it is written just as the server gives up on its
        // idle connection. It is not sent again (it may have been read).
        let (url, accepted) = server(Answer::FirstOnly).await;
        let client = client(&url);
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert!(matches!(body_of(&client).await, Err(SameTaskError::Closed)));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_idle_past_its_lifetime_is_not_reused() {
        let (url, accepted) = server(Answer::FirstOnly).await;
        let client = client(&url).idle_for(Duration::from_millis(50));
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        // Past its lifetime, without waiting for it.
        tokio::time::pause();
        tokio::time::advance(Duration::from_millis(100)).await;
        tokio::time::resume();
        // Given up on before the server would: the request goes on a new
        // connection instead of meeting the close.
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_the_server_keeps_briefly_is_not_pooled() {
        let (url, accepted) = server(Answer::BriefKeepAlive).await;
        let client = client(&url);
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(client.idle.len(), 0, "closed after its answer");
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_idle_lifetime_comes_under_the_servers_keep_alive_timeout() {
        let otherwise = Duration::from_secs(4);
        let lifetime = |values: &[&str]| {
            let mut headers = hyper::HeaderMap::new();
            for value in values {
                headers.append("keep-alive", HeaderValue::from_str(value).unwrap());
            }
            idle_lifetime(&headers, otherwise)
        };
        assert_eq!(lifetime(&[]), otherwise);
        assert_eq!(lifetime(&["timeout=5"]), Duration::from_secs(4));
        assert_eq!(
            lifetime(&["max=100, Timeout = 30"]),
            Duration::from_secs(29)
        );
        assert_eq!(
            lifetime(&["timeout=30", "timeout=10"]),
            Duration::from_secs(9)
        );
        assert_eq!(lifetime(&["timeout=1"]), Duration::ZERO);
        assert_eq!(lifetime(&["timeout=0"]), Duration::ZERO);
        assert_eq!(lifetime(&["timeout=86400"]), MAX_IDLE_LIFETIME);
        assert_eq!(lifetime(&["timeout=soon", "max=5"]), otherwise);
    }

    /// Waits, 10 ms at a time for at most 5 s, until `done` holds.
    async fn until(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        done()
    }

    #[tokio::test]
    async fn an_idle_connection_the_server_closed_is_let_go_without_a_request() {
        let (url, _accepted, (close, mut closed)) = server_telling_closes(Answer::ThenClose).await;
        let client = client(&url).sweeping_every(Duration::from_millis(20));
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert!(client.idle.is_swept(), "idle connections are looked over");
        close.notify_one();
        closed.recv().await.unwrap();
        assert!(
            until(|| client.idle.len() == 0).await,
            "the closed connection is let go"
        );
        assert!(
            until(|| !client.idle.is_swept()).await,
            "looking over ends with nothing idle"
        );
    }

    #[tokio::test]
    async fn a_connection_finished_on_another_runtime_is_swept_on_its_own() {
        let (url, _accepted, (close, mut closed)) = server_telling_closes(Answer::ThenClose).await;
        let client = Arc::new(client(&url).sweeping_every(Duration::from_millis(20)));
        // Its own runtime, on a thread of its own that runs until told to
        // stop, dials and gets the answer's head, as a lane would; the body
        // is read here, as when a quick call is handed over to rmcp.
        let (heads, head) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let dialling = client.clone();
        let home = on_another_lane(|| async move {
            let _ = heads.send(dialling.send(get()).await.unwrap());
            let _ = stopped.await;
        });
        let mut body = head.await.unwrap().into_body();
        while let Some(chunk) = body.next().await {
            chunk.unwrap();
        }
        drop(body);
        assert_eq!(client.idle.len(), 1, "pooled");
        close.notify_one();
        closed.recv().await.unwrap();
        let let_go = until(|| client.idle.len() == 0).await;
        let _ = stop.send(());
        tokio::task::spawn_blocking(move || home.join().unwrap())
            .await
            .unwrap();
        assert!(
            let_go,
            "let go of by a sweep on the runtime that dialled it"
        );
    }

    #[tokio::test]
    async fn a_sweep_keeps_an_open_idle_connection_for_the_next_request() {
        let (url, accepted) = server(Answer::Whole).await;
        let client = client(&url);
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        let runtime = tokio::runtime::Handle::current().id();
        assert!(client.idle.sweep(runtime), "still something to look at");
        assert_eq!(client.idle.len(), 1);
        assert_eq!(body_of(&client).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "reused");
    }

    #[tokio::test]
    async fn an_answer_left_unread_closes_its_connection() {
        let (url, accepted) = server(Answer::Partial).await;
        let client = client(&url);
        let answer = client.send(get()).await.unwrap();
        let mut body = answer.into_body();
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"12345");
        drop(body);
        let answer = client.send(get()).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "a connection with an answer half read was reused"
        );
        assert!(client.idle.len() == 0);
    }

    #[tokio::test]
    async fn a_request_dropped_unanswered_fails_and_is_not_sent_again() {
        let (url, accepted) = server(Answer::Nothing).await;
        let error = body_of(&client(&url)).await.unwrap_err();
        assert!(matches!(error, SameTaskError::Closed), "{error:?}");
        assert!(!error.is_connect());
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "a request the upstream may have acted on was sent again"
        );
    }

    #[tokio::test]
    async fn a_reset_connection_is_a_close_not_an_http_error() {
        let (url, _) = server(Answer::Reset).await;
        let error = body_of(&client(&url)).await.unwrap_err();
        assert!(matches!(error, SameTaskError::Closed), "{error:?}");
    }

    #[tokio::test]
    async fn an_unreachable_upstream_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: reqwest::Url = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let error = body_of(&client(&url)).await.unwrap_err();
        assert!(error.is_connect(), "{error:?}");
    }

    /// A loopback listener whose accept queue is full: the kernel drops
    /// further SYNs, so a connect to it hangs (retrying after 1 s, 3 s…)
    /// without leaving 127.0.0.1. Returns the listener and the
    /// connections that fill it, to be kept alive.
    async fn unanswering_listener() -> (tokio::net::TcpListener, Vec<TcpStream>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let address = listener.local_addr().unwrap();
        let mut filling = Vec::new();
        // Never accepted: they sit in the queue until it is full, then
        // connects stop completing.
        for _ in 0..8 {
            match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(address))
                .await
            {
                Ok(Ok(stream)) => filling.push(stream),
                Ok(Err(error)) => panic!("cannot fill the accept queue: {error}"),
                Err(_) => return (listener, filling),
            }
        }
        panic!("the accept queue of {address} never filled");
    }

    #[tokio::test]
    async fn a_connect_that_hangs_ends_at_the_connect_timeout() {
        let (listener, _filling) = unanswering_listener().await;
        let url: reqwest::Url = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let client = SameTaskClient::new(&url, Duration::from_millis(200)).unwrap();
        let error = body_of(&client).await.unwrap_err();
        assert!(
            matches!(error, SameTaskError::ConnectTimeout(limit) if limit == Duration::from_millis(200)),
            "{error:?}"
        );
        assert!(
            error.is_connect(),
            "a connect timeout means the session is gone"
        );
    }

    #[test]
    fn only_plain_http_without_a_proxy_is_reached_this_way() {
        let no_variables = |_: &str| None;
        let https: reqwest::Url = "https://example.com/mcp".parse().unwrap();
        assert!(!suits_in(&https, no_variables));
        let http: reqwest::Url = "http://example.com/mcp".parse().unwrap();
        assert!(suits_in(&http, no_variables));
        for with_credentials in [
            "http://user:token@example.com/mcp",
            "http://token@example.com/mcp",
        ] {
            let url: reqwest::Url = with_credentials.parse().unwrap();
            assert!(
                !suits_in(&url, no_variables),
                "{url}: reqwest sends its credentials"
            );
        }
        for proxy in ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"] {
            let set = |name: &str| (name == proxy).then(|| "http://proxy:3128".into());
            assert!(!suits_in(&http, set), "{proxy} set: reqwest must proxy it");
            let empty = |name: &str| (name == proxy).then(std::ffi::OsString::new);
            assert!(suits_in(&http, empty), "{proxy} empty means no proxy");
        }
        let host = client(&"http://localhost:8080/mcp".parse().unwrap());
        assert_eq!(host.address, "localhost:8080");
        assert_eq!(host.host, "localhost:8080");
        let default_port = client(&"http://[::1]/mcp".parse().unwrap());
        assert_eq!(default_port.address, "[::1]:80");
        assert_eq!(default_port.host, "[::1]");
    }
}
