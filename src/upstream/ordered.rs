//! Keeps what an upstream says about a request ahead of the request's answer.
//!
//! rmcp hands each incoming notification to its own task, so a progress
//! notification or log message sent *before* a response can be relayed
//! *after* it, when the client's request stream is already closed. This
//! transport wrapper sees messages in wire order: it counts every progress
//! and log notification as pending in the [`Relay`] the moment it arrives,
//! and the relay's handler marks it done once relayed. A request's answer is
//! passed on only after the notifications that preceded it are
//! (`Relay::drain`).

use std::{future::Future, sync::Arc};

use rmcp::{
    model::{JsonRpcMessage, ServerNotification},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
    RoleClient,
};

use super::Relay;

pub struct OrderedTransport<T> {
    inner: T,
    relay: Arc<Relay>,
}

impl<T> OrderedTransport<T> {
    pub fn new(inner: T, relay: Arc<Relay>) -> Self {
        Self { inner, relay }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for OrderedTransport<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(notification)) = &message {
            if matches!(
                notification.notification,
                ServerNotification::ProgressNotification(_)
                    | ServerNotification::LoggingMessageNotification(_)
            ) {
                self.relay.notification_arrived();
            }
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
