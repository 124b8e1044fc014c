//! The delivery stage: the adapters by the platform name they report, and
//! how a reply reaches a chat — at most `max_reply_messages` platform
//! messages ([`crate::overflow`]), the rest as a file where the platform
//! takes files, else cut with a notice. It knows nothing of sessions or
//! turns; the other stages hand it text and a chat.

use std::collections::HashMap;
use std::sync::Arc;

use crate::adapter::{AdapterError, OutgoingFile, PlatformAdapter};
use crate::overflow::{self, Delivery as Plan};

/// Every enabled adapter, and the reply's bounds.
pub(super) struct Delivery {
    adapters: HashMap<&'static str, Arc<dyn PlatformAdapter>>,
    max_reply_messages: usize,
}

impl Delivery {
    pub(super) fn new(adapters: Vec<Arc<dyn PlatformAdapter>>, max_reply_messages: usize) -> Self {
        Delivery {
            adapters: adapters.into_iter().map(|a| (a.platform(), a)).collect(),
            max_reply_messages,
        }
    }

    /// The adapter of `platform`, if it is enabled here.
    pub(super) fn adapter(&self, platform: &str) -> Option<&Arc<dyn PlatformAdapter>> {
        self.adapters.get(platform)
    }

    /// Every enabled adapter.
    pub(super) fn adapters(&self) -> impl Iterator<Item = &Arc<dyn PlatformAdapter>> {
        self.adapters.values()
    }

    /// Sends a reply, at most `max_reply_messages`
    /// platform messages of it ([`crate::overflow`]).
    pub(super) async fn send(
        &self,
        platform: &str,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) {
        if text.is_empty() {
            return;
        }
        let Some(adapter) = self.adapters.get(platform) else {
            tracing::error!(platform, "no adapter for platform; reply dropped");
            return;
        };
        let reply_to = reply_to.filter(|r| !r.is_empty());
        let to = Outbound {
            chat_id,
            thread: None,
            reply_to,
        };
        if let Err(e) = self.deliver(&**adapter, &to, text).await {
            tracing::error!(platform, chat_id, error = %e, "sending a reply failed");
        }
    }

    pub(super) async fn deliver(
        &self,
        adapter: &dyn PlatformAdapter,
        to: &Outbound<'_>,
        text: &str,
    ) -> Result<(), AdapterError> {
        let chat_id = to.chat_id;
        let max = self.max_reply_messages;
        let files = adapter.can_send_files();
        // The note ending the beginning of a long reply; the cut notice is
        // reserved at its longest (every character left out).
        let note = if files {
            overflow::file_note(max)
        } else {
            overflow::cut_notice(max, text.chars().count())
        };
        let head_messages = if files { max - 1 } else { max };
        let (head, rest) = match overflow::plan(
            text,
            adapter.max_message_len(),
            adapter.length_unit(),
            max,
            head_messages,
            &note,
        ) {
            Plan::Whole => return to.send(adapter, text).await,
            Plan::Overflow { head, rest } => (head, rest),
        };
        let rest_chars = rest.chars().count();
        tracing::info!(
            platform = adapter.platform(),
            chat_id,
            rest_chars,
            "reply longer than {max} messages"
        );
        if !files {
            let note = overflow::cut_notice(max, rest_chars);
            return to.send(adapter, &overflow::with_note(&head, &note)).await;
        }
        to.send(adapter, &overflow::with_note(&head, &note)).await?;
        let file = OutgoingFile {
            file_name: overflow::REPLY_FILE_NAME.to_owned(),
            content: rest.into_bytes(),
            caption: overflow::REPLY_FILE_CAPTION.to_owned(),
            kind: crate::adapter::FileKind::Document,
            media_type: "text/markdown; charset=utf-8".to_owned(),
        };
        if let Err(e) = adapter.send_file(chat_id, &file, None).await {
            tracing::warn!(platform = adapter.platform(), chat_id, error = %e, "sending the rest of a long reply as a file failed");
            let notice = Outbound {
                reply_to: None,
                ..*to
            };
            notice
                .send(adapter, &overflow::cut_notice(max, rest_chars))
                .await?;
        }
        Ok(())
    }
}

/// Where a reply or a scheduled answer goes: a chat, a thread in it (a
/// forum topic), the message it answers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outbound<'a> {
    pub(super) chat_id: &'a str,
    pub(super) thread: Option<&'a str>,
    pub(super) reply_to: Option<&'a str>,
}

impl Outbound<'_> {
    /// One `send` (the adapter splits): a reply follows its message into
    /// its thread; otherwise the thread, if any, is addressed.
    async fn send(&self, adapter: &dyn PlatformAdapter, text: &str) -> Result<(), AdapterError> {
        match (self.thread, self.reply_to) {
            (Some(thread), None) => adapter.send_to_thread(self.chat_id, thread, text).await,
            _ => adapter.send(self.chat_id, text, self.reply_to).await,
        }
    }
}
