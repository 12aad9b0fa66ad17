//! Serves the HTTP/1.1 connections a listener accepts with a router, as
//! `axum::serve` does, plus the deadline it leaves out.
//!
//! hyper bounds how long it waits for a request's head
//! (`header_read_timeout`), but only when given a timer, and `axum::serve`
//! gives it none: a client that opens a connection and sends nothing, or
//! a head a byte at a time, would hold a socket, a task and its buffers
//! for ever (slowloris), and enough of them would exhaust the process's
//! file descriptors. Here every connection gets a timer and that deadline;
//! hyper starts it whenever it waits for a request's head, so it also
//! closes a connection left idle between requests that long. (The body's
//! deadline is `json_guard`'s.)
//!
//! Stopping is graceful, as with `axum::serve`: no more accepts, idle
//! connections closed, requests and streams in progress served to their
//! end, but not for ever: hyper has no write deadline, so a client that
//! stopped reading its answer would hold the process up until SIGKILL.
//! Connections still open [`CLOSE_LIMIT`] after serving stops are closed.
//!
//! Each connection can also be cut on its own ([`this_connection`]): a
//! client that resumes a request's stream on a new connection has given
//! up on the old one, which the server may not know is dead yet, and
//! whose writer may be stuck on a full socket with the rest of the stream
//! behind it (`http/resumable`).
//!
//! An answer given before its request's body was read whole says that
//! its connection ends with it (`json_guard::closing_after`).

use std::{future::Future, time::Duration};

use axum::{serve::Listener, Router};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio_util::sync::CancellationToken;

/// How long the open connections get to end once serving stops. The
/// gateway's requests in flight had their grace period before that
/// (`Gateway::drain`); what is left is mostly answers being written.
pub const CLOSE_LIMIT: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// Cancelled to close the connection whose task this is.
    static CONNECTION: CancellationToken;
}

/// What closes the connection the current request came on, when called
/// in that request's own future (not in a task it spawned).
pub fn this_connection() -> Option<CancellationToken> {
    CONNECTION.try_with(CancellationToken::clone).ok()
}

/// Serves `app` on what `listener` accepts until `stop` resolves, then
/// waits for the open connections to end (gracefully, for
/// [`CLOSE_LIMIT`] at most). A request's head must arrive within
/// `read_timeout` of the connection being ready for it.
pub async fn serve<L: Listener>(
    mut listener: L,
    app: Router,
    read_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let connections = GracefulShutdown::new();
    let cut = CancellationToken::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (io, _peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let connection =
            builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone()));
        let connection = connections.watch(connection);
        let cut = cut.child_token();
        tokio::spawn(CONNECTION.scope(cut.clone(), async move {
            tokio::select! {
                ended = connection => {
                    // A client that went away or was too slow: nothing to
                    // answer.
                    if let Err(error) = ended {
                        tracing::debug!(%error, "connection ended");
                    }
                }
                // Dropping the connection closes its socket.
                () = cut.cancelled() => {}
            }
        }));
    }
    drop(listener);
    if tokio::time::timeout(CLOSE_LIMIT, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(limit = ?CLOSE_LIMIT, "closing connections still open after serving stopped (clients not reading their answers)");
        cut.cancel();
    }
}
