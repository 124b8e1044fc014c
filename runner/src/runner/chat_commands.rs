//! Chat commands of SPEC Y5: `/title`, `/sessions`, `/queue`, `/steer`, `/retry`.

use std::sync::Arc;

use hermes_core::Message;
use hermes_runtime::store::StoreError;

use super::Inner;
use crate::config::BusyMode;
use crate::event::MessageEvent;

/// How many conversations `/sessions` lists.
const SESSIONS_SHOWN: usize = 10;
/// How many stored sessions `/sessions` looks through for this chat's.
const SESSIONS_SCANNED: usize = 1000;
/// The longest title `/title` accepts, in characters.
const TITLE_MAX_CHARS: usize = 200;

impl Inner {
    /// `/title` shows the conversation's title; `/title TEXT` sets it
    /// (blocking: touches the store).
    pub(super) fn title(&self, key: &str, title: Option<&str>) -> Result<String, StoreError> {
        let mut store = self.store();
        let Some(session) = store.active_session_for_key(key)? else {
            return Ok("No conversation yet: send a message first.".into());
        };
        let Some(title) = title else {
            return Ok(match session.title {
                Some(t) => format!("Title: {t}"),
                None => "This conversation has no title. Set one with /title TEXT.".into(),
            });
        };
        if title.chars().count() > TITLE_MAX_CHARS || title.contains(['\n', '\r']) {
            return Ok(format!(
                "A title is one line of at most {TITLE_MAX_CHARS} characters."
            ));
        }
        store.set_title(&session.id, Some(title))?;
        Ok(format!("Title set: {title}"))
    }

    /// `/sessions`: the recent conversations of this chat (this session
    /// key), newest first, the current one marked.
    pub(super) fn sessions_later(self: &Arc<Self>, event: MessageEvent, key: String) {
        let inner = Arc::clone(self);
        self.spawn(async move {
            let i2 = Arc::clone(&inner);
            let listed = hermes_runtime::task::spawn_blocking(move || {
                let store = i2.store();
                let current = store.active_session_for_key(&key)?.map(|s| s.id);
                let mine: Vec<_> = store
                    .list_sessions(SESSIONS_SCANNED)?
                    .into_iter()
                    .filter(|s| s.session_key.as_deref() == Some(key.as_str()))
                    .take(SESSIONS_SHOWN)
                    .collect();
                Ok::<_, StoreError>((current, mine))
            })
            .await;
            let text = match listed {
                Ok(Ok((_, mine))) if mine.is_empty() => "No conversations yet.".to_owned(),
                Ok(Ok((current, mine))) => {
                    let mut text = String::from("Recent conversations here:");
                    for s in mine {
                        let mark = if current.as_deref() == Some(s.id.as_str()) {
                            " (current)"
                        } else {
                            ""
                        };
                        text.push_str(&format!(
                            "\n{} — {} · {} messages{mark}",
                            s.id,
                            s.title.as_deref().unwrap_or("untitled"),
                            s.message_count
                        ));
                    }
                    text
                }
                Ok(Err(e)) => format!("Sessions: unavailable ({e})"),
                Err(_) => "Sessions: unavailable".to_owned(),
            };
            inner.reply(&event, &text).await;
        });
    }

    /// `/queue TEXT`: TEXT becomes a message of its own, accepted like any
    /// other (durably, E3) but queued behind the running turn even in
    /// interrupt mode.
    pub(super) fn queue_text(
        self: &Arc<Self>,
        key: String,
        mut event: MessageEvent,
        text: String,
        now: u64,
    ) {
        if text.trim().is_empty() {
            self.reply_later(
                &event,
                "Usage: /queue TEXT — answered after the current reply.".into(),
            );
            return;
        }
        event.text = text;
        self.accept_message_as(key, event, now, BusyMode::Queue);
    }

    /// `/steer TEXT`: TEXT becomes a message of its own, accepted like any
    /// other (durably, E3) and handed to the running turn (SPEC Y5); with
    /// no turn running it is simply answered.
    pub(super) fn steer_text(
        self: &Arc<Self>,
        key: String,
        mut event: MessageEvent,
        text: String,
        now: u64,
    ) {
        if text.trim().is_empty() {
            self.reply_later(
                &event,
                "Usage: /steer TEXT — the current reply takes TEXT into account at its next step."
                    .into(),
            );
            return;
        }
        event.text = text;
        self.accept_message_as(key, event, now, BusyMode::Steer);
    }

    /// `/retry`: removes the last exchange and sends its user message again
    /// (as a new accepted message, so it is answered exactly once).
    pub(super) async fn retry(self: &Arc<Self>, key: &str, event: MessageEvent) {
        let inner = Arc::clone(self);
        let k = key.to_owned();
        let undone = hermes_runtime::task::spawn_blocking(move || {
            let mut store = inner.store();
            let Some(session) = store.active_session_for_key(&k)? else {
                return Ok(None);
            };
            let last_user = store
                .load_transcript(&session.id)?
                .into_iter()
                .rev()
                .find_map(|e| match e.message {
                    Message::User { content, .. } => Some(content),
                    _ => None,
                });
            let Some(text) = last_user else {
                return Ok(None);
            };
            store.undo_last_turn(&session.id)?;
            Ok::<_, StoreError>(Some(text))
        })
        .await;
        match undone {
            Ok(Ok(Some(text))) => {
                let mut again = event;
                again.text = text;
                // Its own identity: the original message was answered.
                again.message_id = format!("{}:retry", again.message_id);
                let now = self.now();
                self.accept_message(key.to_owned(), again, now);
            }
            Ok(Ok(None)) => self.reply(&event, "Nothing to retry.").await,
            Ok(Err(e)) => {
                tracing::error!(key, error = %e, "/retry failed");
                self.reply(&event, &format!("Sorry, /retry failed: {e}"))
                    .await;
            }
            Err(e) => {
                tracing::error!(key, error = %e, "/retry panicked");
                self.reply(&event, "Sorry, /retry failed.").await;
            }
        }
    }

    async fn reply(&self, event: &MessageEvent, text: &str) {
        self.delivery
            .send(
                &event.source.platform,
                &event.source.chat_id,
                text,
                Some(&event.message_id),
            )
            .await;
    }
}
