//! The upstream's own requests (sampling, elicitation, roots) while they
//! are forwarded to a client: which ids were seen already (a replayed
//! request is not forwarded twice), and when a forwarding has ended (a
//! cancel of it is relayed before the answer the upstream writes after).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use rmcp::model::RequestId;

use super::{lock, Relay, DRAIN_LIMIT};

/// Held while an upstream's request is forwarded to its client
/// ([`Relay::forwarding`]).
pub struct Forwarding {
    relay: Arc<Relay>,
    id: RequestId,
    done: Arc<CancellationToken>,
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        let mut forwarding = lock(&self.relay.forwarding);
        // A server reusing an id while its first request is forwarded
        // replaced the entry: that one is not this guard's to remove.
        if forwarding
            .get(&self.id)
            .is_some_and(|done| Arc::ptr_eq(done, &self.done))
        {
            forwarding.remove(&self.id);
        }
        drop(forwarding);
        self.done.cancel();
    }
}

impl Relay {
    /// Whether this is the first time the upstream sent a request with
    /// `id` (ids are unique within a session). A second one is a replay:
    /// some servers resend, on a resumed stream, what every stream of the
    /// session carried, and on a shared mount another client's sampling
    /// request would reach the client whose stream was resumed.
    pub fn first_sent(&self, id: &RequestId) -> bool {
        let key = match id {
            RequestId::Number(n) => format!("n{n}"),
            RequestId::String(s) => format!("s{s}"),
        };
        let mut seen = lock(&self.requests_seen);
        if seen.get(&key).is_some() {
            return false;
        }
        seen.insert(key, ());
        true
    }

    /// Marks the upstream's request `id` as being forwarded to a client
    /// until the guard drops (after a cancel of it was relayed, if it was
    /// cancelled).
    pub fn forwarding(self: &Arc<Self>, id: RequestId) -> Forwarding {
        let done = Arc::new(CancellationToken::new());
        lock(&self.forwarding).insert(id.clone(), done.clone());
        Forwarding {
            relay: self.clone(),
            id,
            done,
        }
    }

    /// Waits (bounded, [`DRAIN_LIMIT`]) until the forwarding of the
    /// upstream's request `id`, which it has cancelled, has ended: the
    /// forwarding task relays the cancel to the client, and the answer
    /// the upstream may write right after its cancel must not end the
    /// call's stream before it (the cancel would then be lost).
    pub async fn cancel_relayed(&self, id: &RequestId) {
        let Some(done) = lock(&self.forwarding).get(id).cloned() else {
            return;
        };
        if tokio::time::timeout(DRAIN_LIMIT, done.cancelled())
            .await
            .is_err()
        {
            tracing::debug!(%id, "answering before a cancel was relayed");
        }
    }
}
