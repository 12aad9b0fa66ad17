//! What the session registry sends one session, bounded.
//!
//! The registry sends each notification (a list changed, a subscribed
//! resource updated, something told to the session alone) in a task of its
//! own, so that no session's send holds up the others'. A send ends only
//! when rmcp's session worker has taken the message, and that worker waits
//! as long as the session's `GET` stream is full: a client that keeps its
//! `GET` open and reads none of it held one task, and its message, per
//! notification, without bound (a black-box helper's client grew the
//! gateway by 170 MB). So each session's sends under way are counted, and
//! past [`MAX_SENDS_UNDER_WAY`] the newest are dropped and the loss logged:
//! what the client would get, had it read, is what a reader that far
//! behind loses on any stream.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use rmcp::{model::ServerNotification, service::Peer, RoleServer};

use super::SessionKey;

/// Most of one session's sends under way at once: far more than a session
/// that reads its `GET` stream has (each is taken at once), few enough to
/// bound what a session that does not read holds (its messages, and what
/// rmcp keeps of its stream).
pub const MAX_SENDS_UNDER_WAY: usize = 256;

/// One session's peer, with its count of sends under way.
#[derive(Clone)]
pub struct Outbox {
    peer: Peer<RoleServer>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    under_way: AtomicUsize,
    /// Dropped since the last send that went through.
    dropped: AtomicUsize,
}

impl Outbox {
    pub fn new(peer: Peer<RoleServer>) -> Self {
        Self {
            peer,
            counts: Arc::default(),
        }
    }

    /// Sends `notification` to session `key` in a task of its own, unless
    /// [`MAX_SENDS_UNDER_WAY`] of its sends are: then it is dropped.
    pub fn send(&self, key: SessionKey, notification: ServerNotification) {
        let counts = &self.counts;
        let under_way = counts.under_way.fetch_add(1, Ordering::AcqRel);
        if under_way >= MAX_SENDS_UNDER_WAY {
            counts.under_way.fetch_sub(1, Ordering::AcqRel);
            if counts.dropped.fetch_add(1, Ordering::AcqRel) == 0 {
                tracing::warn!(
                    session = key,
                    under_way = MAX_SENDS_UNDER_WAY,
                    "a session's client reads nothing of its GET stream: notifications to it are dropped"
                );
            }
            return;
        }
        let outbox = self.clone();
        tokio::spawn(async move {
            let sent = outbox.peer.send_notification(notification).await;
            let counts = &outbox.counts;
            counts.under_way.fetch_sub(1, Ordering::AcqRel);
            match sent {
                Ok(()) => {
                    let dropped = counts.dropped.swap(0, Ordering::AcqRel);
                    if dropped > 0 {
                        tracing::warn!(
                            session = key,
                            dropped,
                            "notifications reach a session again; some were dropped while its client read nothing"
                        );
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "could not send a notification to its session");
                }
            }
        });
    }

    /// How many of this session's sends are under way.
    #[cfg(test)]
    pub fn under_way(&self) -> usize {
        self.counts.under_way.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncBufReadExt;

    use super::*;

    struct Nothing;
    impl rmcp::ServerHandler for Nothing {}

    /// A session whose client reads nothing holds at most
    /// [`MAX_SENDS_UNDER_WAY`] sends (each a task and its message); once it
    /// reads again, they go through, and so do new ones.
    #[tokio::test]
    async fn a_session_that_reads_nothing_holds_a_bounded_number_of_sends() {
        let (transport, other_end) = tokio::io::duplex(64);
        let service = rmcp::service::serve_directly(Nothing, transport, None);
        let outbox = Outbox::new(service.peer().clone());
        let changed = || ServerNotification::ToolListChangedNotification(Default::default());
        for _ in 0..MAX_SENDS_UNDER_WAY * 4 {
            outbox.send(1, changed());
        }
        assert!(
            outbox.under_way() <= MAX_SENDS_UNDER_WAY,
            "{} sends under way",
            outbox.under_way()
        );
        let mut lines = tokio::io::BufReader::new(other_end).lines();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut read = 0;
        while outbox.under_way() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the sends under way within 10 s"
            );
            // (The last line read, its task may not have counted down yet.)
            let wait = std::time::Duration::from_millis(50);
            if let Ok(line) = tokio::time::timeout(wait, lines.next_line()).await {
                line.expect("read").expect("a line");
                read += 1;
            }
        }
        assert!(read <= MAX_SENDS_UNDER_WAY + 1, "{read} sent");
        outbox.send(
            1,
            ServerNotification::PromptListChangedNotification(Default::default()),
        );
        loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .expect("the new send within 10 s")
                .expect("read")
                .expect("a line");
            if line.contains("notifications/prompts/list_changed") {
                break;
            }
        }
    }
}
