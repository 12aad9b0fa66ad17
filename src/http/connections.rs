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
//! connections closed, requests and streams in progress served to their end.

use std::{future::Future, time::Duration};

use axum::{serve::Listener, Router};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};

/// Serves `app` on what `listener` accepts until `stop` resolves, then
/// waits for the open connections to end (gracefully). A request's head
/// must arrive within `read_timeout` of the connection being ready for it.
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
    let mut stop = std::pin::pin!(stop);
    loop {
        let (io, _peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let connection =
            builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone()));
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            // A client that went away or was too slow: nothing to answer.
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
}
