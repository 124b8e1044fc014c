//! Files and streamed replies (SPEC X6).
//!
//! Files: `getFile` (through the adapter's Bot API helper) gives the file's
//! path; the bytes come from `{api}/file/bot{token}/{path}`, fetched with
//! the runtime's bounded download on the blocking pool. Telegram lets bots
//! download files of up to 20 MB; bigger ones have no path, which is said.
//!
//! Streamed replies: the first preview is sent as a message (plain text,
//! replying to the user's message), later ones edit it
//! (`editMessageText`); the last edit carries the whole reply formatted
//! (Telegram HTML, plain text if refused). A reply longer than one
//! message deletes the preview and is sent as usual — split, capped, the
//! rest as a file. Previews are single attempts: one Telegram refuses with
//! 429 is skipped until its `retry_after` has passed; the final edit waits
//! it out like any send.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::api::{CallError, PLATFORM};
use super::{Inner, MAX_MESSAGE_UTF16, format};
use hermes_platform_kit::adapter::{AdapterError, FetchedMedia, Finished, ReplyStream};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::split::{LengthUnit, split_message};

/// The whole download's deadline.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(90);

/// Telegram's answer to an edit that changes nothing: not a failure.
fn not_modified(e: &CallError) -> bool {
    matches!(e, CallError::Api { status: 400, description, .. } if description.contains("message is not modified"))
}

impl Inner {
    /// `getFile`, then the bytes (at most `max_bytes`).
    pub(super) async fn fetch_file(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        let rejected = |message: String| AdapterError::Rejected {
            platform: PLATFORM,
            message,
        };
        let file = self
            .api
            .call(
                "getFile",
                &json!({ "file_id": media.handle }),
                Duration::from_secs(30),
            )
            .await
            .map_err(CallError::into_adapter_error)?;
        if let Some(size) = file.get("file_size").and_then(Value::as_u64)
            && size > max_bytes
        {
            return Err(rejected(format!(
                "the file is {size} bytes, more than the {max_bytes} accepted"
            )));
        }
        let path = file
            .get("file_path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                rejected(
                    "Telegram gave no download path for it (bots can download files of up to 20 MB)"
                        .to_owned(),
                )
            })?;
        let url = self.api.file_url(path);
        let downloaded = hermes_runtime::task::spawn_blocking(move || {
            hermes_runtime::media::fetch::download(&url, max_bytes, DOWNLOAD_TIMEOUT)
        })
        .await
        .map_err(|e| rejected(format!("the download task failed: {e}")))?
        .map_err(|e| AdapterError::Network {
            platform: PLATFORM,
            message: self.api.redact(&e.to_string()),
        })?;
        let file_name = media.file_name.clone().or_else(|| {
            path.rsplit('/')
                .next()
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
        });
        Ok(FetchedMedia {
            bytes: downloaded.bytes,
            mime_type: media.mime_type.clone(),
            file_name,
        })
    }
}

/// One reply streamed into one Telegram message.
pub(super) struct TelegramReply {
    pub(super) inner: Arc<Inner>,
    pub(super) chat: i64,
    pub(super) reply_to: Option<i64>,
    pub(super) thread: Option<i64>,
    /// The preview message, once sent.
    pub(super) message_id: Option<i64>,
    /// The text it shows.
    pub(super) shown: String,
    /// No preview before this (a 429's `retry_after`).
    pub(super) quiet_until: Option<Instant>,
}

/// The end of `text` that fits one message, marked as cut.
fn tail_within(text: &str, max_units: usize) -> String {
    let units: usize = text.chars().map(char::len_utf16).sum();
    if units <= max_units {
        return text.to_owned();
    }
    let mut kept: usize = 0;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        let with = kept.saturating_add(c.len_utf16());
        if with > max_units.saturating_sub(2) {
            break;
        }
        kept = with;
        start = i;
    }
    format!("…{}", &text[start..])
}

impl TelegramReply {
    async fn edit(&self, message_id: i64, text: &str, html: bool) -> Result<(), CallError> {
        let mut body = json!({ "chat_id": self.chat, "message_id": message_id, "text": text });
        if html {
            body["text"] = json!(format::markdown_to_html(text));
            body["parse_mode"] = json!("HTML");
        }
        let api = &self.inner.api;
        let result = if html {
            api.call("editMessageText", &body, Duration::from_secs(30))
                .await
        } else {
            api.call_once("editMessageText", &body, Duration::from_secs(30))
                .await
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if not_modified(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, message_id: i64) {
        let body = json!({ "chat_id": self.chat, "message_id": message_id });
        if let Err(e) = self
            .inner
            .api
            .call("deleteMessage", &body, Duration::from_secs(30))
            .await
        {
            tracing::warn!(error = ?e, "telegram: the reply preview could not be deleted");
        }
    }
}

#[async_trait]
impl ReplyStream for TelegramReply {
    async fn update(&mut self, preview: &str) -> Result<(), AdapterError> {
        if self.quiet_until.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let text = tail_within(preview.trim_end(), MAX_MESSAGE_UTF16);
        if text.trim().is_empty() || text == self.shown {
            return Ok(());
        }
        let result = match self.message_id {
            Some(id) => self.edit(id, &text, false).await.map(|()| None),
            None => {
                let mut body = json!({ "chat_id": self.chat, "text": text });
                if let Some(t) = self.thread {
                    body["message_thread_id"] = json!(t);
                }
                if let Some(r) = self.reply_to {
                    body["reply_parameters"] =
                        json!({ "message_id": r, "allow_sending_without_reply": true });
                }
                self.inner
                    .api
                    .call_once("sendMessage", &body, Duration::from_secs(30))
                    .await
                    .map(|sent| sent.get("message_id").and_then(Value::as_i64))
            }
        };
        match result {
            Ok(sent) => {
                if let Some(id) = sent {
                    self.message_id = Some(id);
                }
                self.shown = text;
                Ok(())
            }
            Err(CallError::Api {
                status: 429,
                retry_after,
                ..
            }) => {
                let wait = Duration::from_secs(retry_after.unwrap_or(1).max(1));
                self.quiet_until = Instant::now().checked_add(wait);
                Ok(())
            }
            Err(e) => Err(e.into_adapter_error()),
        }
    }

    async fn finish(&mut self, text: &str) -> Result<Finished, AdapterError> {
        let Some(id) = self.message_id else {
            // Nothing shown yet: the reply goes out the usual way.
            return Ok(Finished::NotDelivered);
        };
        let whole = text.trim_end();
        let pieces = split_message(whole, MAX_MESSAGE_UTF16, LengthUnit::Utf16);
        if whole.trim().is_empty() || pieces.len() != 1 {
            self.delete(id).await;
            return Ok(Finished::NotDelivered);
        }
        match self.edit(id, whole, true).await {
            Ok(()) => Ok(Finished::Delivered),
            Err(CallError::Api {
                status: 400,
                description,
                ..
            }) => {
                tracing::warn!(%description, "telegram: formatted edit refused, editing as plain text");
                self.edit(id, whole, false)
                    .await
                    .map(|()| Finished::Delivered)
                    .map_err(CallError::into_adapter_error)
            }
            Err(e) => Err(e.into_adapter_error()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_preview_shows_its_end() {
        assert_eq!(tail_within("short", 10), "short");
        let cut = tail_within("0123456789abcdef", 10);
        assert_eq!(cut, "…89abcdef");
        assert!(cut.chars().map(char::len_utf16).sum::<usize>() <= 10);
        // Astral characters count two units.
        let cut = tail_within("🚀🚀🚀🚀🚀🚀", 7);
        assert_eq!(cut, "…🚀🚀");
    }
}
