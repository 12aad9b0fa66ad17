//! Hands each accepted connection to the serving lane with the fewest open
//! connections.
//!
//! A lane (`lanes.rs`) keeps a connection for its whole life, so where a
//! connection lands decides where its work runs. Lanes accepting from one
//! socket each for themselves split unevenly: a burst of connects is
//! mostly taken by whichever lane happens to be awake, which then loops on
//! `accept` (measured: 16 benchmark clients left one lane with three times
//! the other's CPU, and the gateway slower than on one multi-thread
//! runtime). So one acceptor takes every connection and sends it to the
//! lane holding the fewest; a lane registers it with its own runtime.
//! That costs one hand-over per connection, none per request.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

/// A connection on its way to a lane: not yet registered with any runtime.
type Handed = (std::net::TcpStream, SocketAddr);

/// What the acceptor knows of one lane.
struct Lane {
    inbox: mpsc::UnboundedSender<Handed>,
    open: Arc<AtomicUsize>,
}

/// Splits `listener` into `count` lane listeners (at least one), fed by an
/// acceptor task spawned on the calling runtime that runs until `stop`.
/// `prepare` is applied to every accepted connection first.
pub fn split(
    listener: TcpListener,
    count: usize,
    prepare: fn(&mut TcpStream),
    stop: CancellationToken,
) -> io::Result<Vec<LaneListener>> {
    let local = listener.local_addr()?;
    let (lanes, listeners): (Vec<_>, Vec<_>) = (0..count.max(1))
        .map(|_| {
            let (inbox, arrivals) = mpsc::unbounded_channel();
            let open = Arc::new(AtomicUsize::new(0));
            let lane = Lane {
                inbox,
                open: open.clone(),
            };
            let listener = LaneListener {
                arrivals,
                open,
                local,
            };
            (lane, listener)
        })
        .unzip();
    tokio::spawn(accept_until(listener, lanes, prepare, stop));
    Ok(listeners)
}

async fn accept_until(
    mut listener: TcpListener,
    lanes: Vec<Lane>,
    prepare: fn(&mut TcpStream),
    stop: CancellationToken,
) {
    // Where a tie goes: the lane after the last one chosen. Always the
    // first would put every connection of clients that connect one at a
    // time (`Connection: close`, a proxy without a pool) on lane 0, and
    // the sessions they start, whose rmcp workers live on the lane that
    // served their `initialize`, with them.
    let mut after_last = 0;
    loop {
        let (mut stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            // axum's accept: logs and retries what is not the peer's fault.
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
        };
        prepare(&mut stream);
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, %peer, "cannot hand over an accepted connection");
                continue;
            }
        };
        let count = lanes.len();
        let Some((index, lane)) = lanes
            .iter()
            .enumerate()
            .filter(|(_, lane)| !lane.inbox.is_closed())
            .min_by_key(|(index, lane)| {
                let rotated = (index + count - after_last) % count;
                (lane.open.load(Ordering::Relaxed), rotated)
            })
        else {
            // Every lane is gone; the server is ending.
            return;
        };
        after_last = (index + 1) % count;
        // Counted here, not on arrival: the next connection must see it.
        lane.open.fetch_add(1, Ordering::Relaxed);
        if lane.inbox.send((stream, peer)).is_err() {
            lane.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One lane's share of the listener, for `axum::serve`.
pub struct LaneListener {
    arrivals: mpsc::UnboundedReceiver<Handed>,
    open: Arc<AtomicUsize>,
    local: SocketAddr,
}

impl axum::serve::Listener for LaneListener {
    type Io = LaneStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some((stream, peer)) = self.arrivals.recv().await else {
                // The acceptor has stopped: nothing more will come, and
                // graceful shutdown ends this lane's server.
                return std::future::pending().await;
            };
            let counted = Counted(self.open.clone());
            match TcpStream::from_std(stream) {
                Ok(stream) => {
                    return (
                        LaneStream {
                            stream,
                            _counted: counted,
                        },
                        peer,
                    )
                }
                Err(error) => {
                    tracing::warn!(%error, %peer, "cannot take over an accepted connection");
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A lane's open connections, less one when dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection served by a lane; counted while open.
pub struct LaneStream {
    stream: TcpStream,
    /// Held for its `Drop`.
    _counted: Counted,
}

impl AsyncRead for LaneStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LaneStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn keep(_: &mut TcpStream) {}

    /// `count` lane listeners on a fresh loopback port, and what stops
    /// their acceptor.
    async fn lanes(count: usize) -> (SocketAddr, CancellationToken, Vec<LaneListener>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let listeners = split(listener, count, keep, stop.clone()).unwrap();
        (address, stop, listeners)
    }

    /// Connects, and takes the connection from whichever lane it was
    /// handed to; the acceptor counts a connection as it hands it over, so
    /// the next connect does not race the count.
    async fn connect(
        address: SocketAddr,
        listeners: &mut [LaneListener],
    ) -> (TcpStream, usize, LaneStream) {
        let client = TcpStream::connect(address).await.unwrap();
        // Whichever lane's `accept` ends first; the others wait on their
        // channel and lose nothing when dropped.
        let accepts = listeners
            .iter_mut()
            .map(|listener| Box::pin(listener.accept()));
        let ((served, peer), lane, _) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            futures::future::select_all(accepts),
        )
        .await
        .expect("handed to a lane");
        assert_eq!(peer, client.local_addr().unwrap());
        (client, lane, served)
    }

    #[tokio::test]
    async fn connections_go_to_the_lane_with_the_fewest_open() {
        let (address, stop, mut listeners) = lanes(3).await;
        let mut held = Vec::new();
        for _ in 0..6 {
            held.push(connect(address, &mut listeners).await);
        }
        let mut lanes: Vec<usize> = held.iter().map(|(_, lane, _)| *lane).collect();
        lanes.sort_unstable();
        assert_eq!(lanes, [0, 0, 1, 1, 2, 2], "spread evenly");
        // Lane 1's connections close: the next two go there.
        held.retain(|(_, lane, _)| *lane != 1);
        assert_eq!(listeners[1].open.load(Ordering::SeqCst), 0);
        for _ in 0..2 {
            let (client, lane, served) = connect(address, &mut listeners).await;
            assert_eq!(lane, 1);
            held.push((client, lane, served));
        }
        stop.cancel();
    }

    /// Clients that connect one at a time (each connection closed before
    /// the next) go round the lanes, not all to the first.
    #[tokio::test]
    async fn ties_go_round_the_lanes() {
        let (address, stop, mut listeners) = lanes(3).await;
        let mut chosen = Vec::new();
        for _ in 0..6 {
            let (client, lane, served) = connect(address, &mut listeners).await;
            chosen.push(lane);
            drop((client, served));
            assert_eq!(listeners[lane].open.load(Ordering::SeqCst), 0);
        }
        assert_eq!(chosen, [0, 1, 2, 0, 1, 2]);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_lane_serves_what_it_was_handed() {
        let (address, stop, mut listeners) = lanes(1).await;
        let mut client = TcpStream::connect(address).await.unwrap();
        let (mut served, peer) = listeners[0].accept().await;
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(listeners[0].local_addr().unwrap(), address);
        client.write_all(b"ping").await.unwrap();
        let mut buffer = [0; 4];
        served.read_exact(&mut buffer).await.unwrap();
        assert_eq!(&buffer, b"ping");
        assert_eq!(listeners[0].open.load(Ordering::SeqCst), 1);
        drop(served);
        assert_eq!(listeners[0].open.load(Ordering::SeqCst), 0);
        stop.cancel();
    }

    #[tokio::test]
    async fn once_stopped_the_port_is_closed() {
        let (address, stop, _listeners) = lanes(2).await;
        stop.cancel();
        // The acceptor drops the listening socket when it sees the stop.
        for _ in 0..500 {
            if TcpStream::connect(address).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{address} still accepts connections after the stop");
    }
}
