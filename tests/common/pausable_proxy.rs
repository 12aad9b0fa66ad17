//! An HTTP/1.1 proxy on loopback that can be cut off and put back: a
//! network's gap between the gateway and a server that stays up (and
//! keeps its sessions), which killing the server cannot show. Cut off, it
//! breaks the connections it carries and answers every new request 502,
//! as a load balancer in front of an unreachable server does (the gateway
//! takes a 502 for "not reached", like a refused connection), and it
//! keeps which session each refused request named and when, so that a
//! test can wait for what the gateway tried rather than for a time.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

pub struct PausableProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    accepting: JoinHandle<()>,
}

struct State {
    target: SocketAddr,
    /// The current connections' lives: cancelled by a cut, then replaced.
    carried: Mutex<CancellationToken>,
    cut: std::sync::atomic::AtomicBool,
    /// Each request refused while cut: when, and its `Mcp-Session-Id`.
    refused: Mutex<Vec<(Instant, Option<String>)>>,
}

impl PausableProxy {
    /// Forwards a new port of 127.0.0.1 to `target`.
    pub async fn start(target: SocketAddr) -> PausableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            target,
            carried: Mutex::new(CancellationToken::new()),
            cut: Default::default(),
            refused: Default::default(),
        });
        let accepting = tokio::spawn(accept(listener, state.clone()));
        PausableProxy {
            addr,
            state,
            accepting,
        }
    }

    /// Breaks the connections carried, and answers 502 from now on.
    pub fn cut_off(&self) {
        use std::sync::atomic::Ordering;
        self.state.cut.store(true, Ordering::SeqCst);
        let mut carried = self.state.carried.lock().unwrap();
        carried.cancel();
        *carried = CancellationToken::new();
    }

    /// Carries connections again.
    pub fn restore(&self) {
        self.state
            .cut
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// When requests naming session `session` were refused while cut.
    pub fn refused_for(&self, session: &str) -> Vec<Instant> {
        let refused = self.state.refused.lock().unwrap();
        refused
            .iter()
            .filter(|(_, named)| named.as_deref() == Some(session))
            .map(|(at, _)| *at)
            .collect()
    }
}

impl Drop for PausableProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.state.carried.lock().unwrap().cancel();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        let state = state.clone();
        tokio::spawn(async move {
            if state.cut.load(std::sync::atomic::Ordering::SeqCst) {
                refuse(inbound, &state).await;
            } else {
                carry(inbound, &state).await;
            }
        });
    }
}

/// Carries one connection to the target until either side closes or a cut.
async fn carry(mut inbound: TcpStream, state: &State) {
    let life = state.carried.lock().unwrap().clone();
    let Ok(mut outbound) = TcpStream::connect(state.target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        () = life.cancelled() => {}
    }
}

/// Reads a request's head (at most 64 KiB), notes it, answers 502 and
/// closes.
async fn refuse(mut inbound: TcpStream, state: &State) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match inbound.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let session = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    });
    state
        .refused
        .lock()
        .unwrap()
        .push((Instant::now(), session));
    let _ = inbound
        .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await;
}
