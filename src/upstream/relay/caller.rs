//! The downstream end of a request ([`Caller`]), where what the upstream
//! sends about it goes, and the session's log level it is relayed at.

use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};

use rmcp::{
    model::{LoggingLevel, ProgressToken, RequestId},
    Peer, RoleServer,
};

use super::SEND_LIMIT;
use crate::downstream::{quick_call::Handoff, request_streams::RelatedQueue};
use crate::upstream::ClientProfile;

/// The downstream end of a request: where messages it causes must go.
#[derive(Clone)]
pub struct Caller {
    /// Identifies the downstream session (see `gateway::SessionKey`).
    pub session: u64,
    pub peer: Peer<RoleServer>,
    /// The downstream request, when the message belongs to one.
    pub request_id: Option<RequestId>,
    /// The client's own progress token for that request, if it asked.
    pub progress_token: Option<ProgressToken>,
    /// What the client declared, to refuse requests it cannot answer.
    pub profile: ClientProfile,
    /// The log level the client asked for (`logging/setLevel`).
    pub log_level: LogLevelSetting,
    /// The queue onto that request's own SSE stream, while it is open.
    pub request_stream: Option<Arc<RelatedQueue>>,
    /// Set while the request is a quick call not yet handed to rmcp
    /// (`downstream/quick_call.rs`).
    pub handoff: Option<Arc<Handoff>>,
}

/// A session's `logging/setLevel` choice, shared with its callers. A shared
/// upstream logs everything once any session set a level
/// (`sessions::SHARED_LOG_LEVEL`), so each session's own level is applied
/// when its messages are relayed.
#[derive(Clone, Debug, Default)]
pub struct LogLevelSetting(Arc<AtomicU8>);

impl LogLevelSetting {
    /// Nothing asked: relay every level.
    const UNSET: u8 = u8::MAX;

    pub fn new() -> Self {
        Self(Arc::new(AtomicU8::new(Self::UNSET)))
    }

    pub fn set(&self, level: LoggingLevel) {
        self.0.store(level as u8, Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<LoggingLevel> {
        level_from_severity(self.0.load(Ordering::Relaxed))
    }

    /// Whether a message at `level` reaches a client that asked for this.
    pub fn admits(&self, level: LoggingLevel) -> bool {
        let minimum = self.0.load(Ordering::Relaxed);
        minimum == Self::UNSET || level as u8 >= minimum
    }
}

/// Severity order is declaration order: debug (0) … emergency (7).
fn level_from_severity(severity: u8) -> Option<LoggingLevel> {
    use LoggingLevel::*;
    [
        Debug, Info, Notice, Warning, Error, Critical, Alert, Emergency,
    ]
    .get(usize::from(severity))
    .copied()
}

impl Caller {
    /// Waits, if the request is a quick call, until rmcp has taken it
    /// over: a message for the request's own stream is routed by it.
    pub async fn on_its_stream(&self) {
        if let Some(handoff) = &self.handoff {
            handoff.hand_over().await;
        }
    }

    /// Sends `message` onto the request's own stream, through the queue
    /// the stream reads first, so that progress and log messages keep the
    /// order they came in (progress by rmcp's channel fell behind the log
    /// lines sent after it); by rmcp when there is no queue (the stream
    /// has ended, or the caller is a session, not a request) or it stays
    /// full.
    ///
    /// A client not reading the request's stream (its queue stalled) has
    /// the message dropped: rmcp's way leads to the same stream, and
    /// waiting on it would hold every later message of the upstream's
    /// other sessions, which keep their turn behind this one. rmcp's way
    /// is bounded too ([`SEND_LIMIT`]): it blocks while the session's
    /// own channel to its client is full.
    pub async fn send_on_its_stream(
        &self,
        message: rmcp::model::ServerNotification,
    ) -> Result<(), rmcp::service::ServiceError> {
        let unsent = match &self.request_stream {
            Some(stream) => stream.push_waiting(message).await,
            None => Some(message),
        };
        let Some(message) = unsent else {
            return Ok(());
        };
        if self
            .request_stream
            .as_ref()
            .is_some_and(|stream| stream.is_stalled())
        {
            tracing::debug!(
                session = self.session,
                "the client is not reading its request's stream: a message dropped"
            );
            return Ok(());
        }
        tokio::time::timeout(SEND_LIMIT, self.peer.send_notification(message))
            .await
            .unwrap_or(Err(rmcp::service::ServiceError::Timeout {
                timeout: SEND_LIMIT,
            }))
    }

    /// The same session, not tied to a particular request.
    pub fn session_only(&self) -> Caller {
        Caller {
            request_id: None,
            progress_token: None,
            request_stream: None,
            handoff: None,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_filter_by_severity() {
        let setting = LogLevelSetting::new();
        assert!(
            setting.admits(LoggingLevel::Debug),
            "unset admits everything"
        );
        assert_eq!(setting.get(), None);
        setting.set(LoggingLevel::Warning);
        assert_eq!(setting.get(), Some(LoggingLevel::Warning));
        assert!(!setting.admits(LoggingLevel::Info));
        assert!(setting.admits(LoggingLevel::Warning));
        assert!(setting.admits(LoggingLevel::Emergency));
    }
}
