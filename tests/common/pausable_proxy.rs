//! A TCP proxy on loopback that can be cut off and put back on the same
//! port: a network's blip between the gateway and a server that stays up
//! (and keeps its sessions), which killing the server cannot show.

use std::net::SocketAddr;

use tokio::{
    net::{TcpListener, TcpStream},
    task::{JoinHandle, JoinSet},
};

pub struct PausableProxy {
    pub addr: SocketAddr,
    target: SocketAddr,
    /// Accepts and carries connections; aborting it drops the listener
    /// and every connection it carries.
    serving: Option<JoinHandle<()>>,
}

impl PausableProxy {
    /// Forwards a new port of 127.0.0.1 to `target`.
    pub async fn start(target: SocketAddr) -> PausableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        PausableProxy {
            addr,
            target,
            serving: Some(tokio::spawn(serve(listener, target))),
        }
    }

    /// Refuses connections from now on, and breaks those open.
    pub fn cut_off(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.abort();
        }
    }

    /// Takes connections again, on the same port (tried for at most 5 s:
    /// the aborted listener's socket closes as its task is dropped).
    pub async fn restore(&mut self) {
        self.cut_off();
        for _ in 0..50 {
            if let Ok(listener) = TcpListener::bind(self.addr).await {
                self.serving = Some(tokio::spawn(serve(listener, self.target)));
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("cannot listen on {} again", self.addr);
    }
}

impl Drop for PausableProxy {
    fn drop(&mut self) {
        self.cut_off();
    }
}

async fn serve(listener: TcpListener, target: SocketAddr) {
    let mut carried = JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            return;
        };
        carried.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        // Finished ones are let go of as others come.
        while carried.try_join_next().is_some() {}
    }
}
