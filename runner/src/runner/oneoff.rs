//! What the runner sends outside a turn — a scheduled job's answer and
//! the files a `send_message` queued (SPEC Y1's outbox) — and the late
//! delivery failures the scheduler listens for.

use std::sync::Arc;

use crate::adapter::{AdapterError, OutgoingFile};

use super::GatewayRunner;
use super::delivery::Outbound;

impl GatewayRunner {
    /// Gives every adapter `handler` for the messages its platform accepted
    /// and later reported failed (the scheduler's, for its deliveries).
    pub fn set_late_failures(&self, handler: crate::delivery::LateFailureHandler) {
        for adapter in self.inner.delivery.adapters() {
            adapter.set_late_failures(Arc::clone(&handler));
        }
    }

    /// Sends `text` to a chat as any reply is sent (split, at most
    /// `max_reply_messages`, the rest as a file): a scheduled job's answer
    /// (SPEC Y1). Refused when this gateway does not serve the platform's
    /// bot now.
    pub async fn send_text(
        &self,
        platform: &str,
        chat_id: &str,
        thread: Option<&str>,
        text: &str,
    ) -> Result<(), AdapterError> {
        let Some(adapter) = self.inner.delivery.adapter(platform) else {
            return Err(AdapterError::Rejected {
                platform: "gateway",
                message: format!("no {platform} adapter is configured"),
            });
        };
        if self.inner.bot_lease(platform).is_none() {
            return Err(AdapterError::NotConnected {
                platform: adapter.platform(),
            });
        }
        let to = Outbound {
            chat_id,
            thread,
            reply_to: None,
        };
        self.inner.delivery.deliver(&**adapter, &to, text).await
    }

    /// Sends `file` to a chat (a `send_message` file, SPEC Y1's outbox):
    /// refused when the platform takes no files or not this large, or
    /// this gateway does not serve the platform's bot now.
    pub async fn send_file(
        &self,
        platform: &str,
        chat_id: &str,
        file: &OutgoingFile,
    ) -> Result<(), AdapterError> {
        let Some(adapter) = self.inner.delivery.adapter(platform) else {
            return Err(AdapterError::Rejected {
                platform: "gateway",
                message: format!("no {platform} adapter is configured"),
            });
        };
        if !adapter.can_send_files() {
            return Err(AdapterError::Unsupported {
                platform: adapter.platform(),
                what: "sending files",
            });
        }
        let limit = adapter.max_upload_bytes(file.kind);
        if file.content.len() as u64 > limit {
            return Err(AdapterError::Undeliverable {
                platform: adapter.platform(),
                message: format!(
                    "{} is {} bytes; this chat takes at most {limit}",
                    file.file_name,
                    file.content.len()
                ),
            });
        }
        if self.inner.bot_lease(platform).is_none() {
            return Err(AdapterError::NotConnected {
                platform: adapter.platform(),
            });
        }
        adapter.send_file(chat_id, file, None).await
    }
}
