//! Slash commands that touch sessions: `/new`, `/model`, `/undo`, `/status`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hermes_runtime::pricing::{UsageReport, cache_line};
use hermes_runtime::store::StoreError;

use super::{Inner, lock};
use crate::command::Command;
use crate::event::MessageEvent;

impl Inner {
    pub(super) async fn process_command(
        self: &Arc<Self>,
        key: &str,
        cmd: Command,
        event: MessageEvent,
        position: u64,
    ) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        if cmd == Command::Retry {
            return self.retry(key, event).await;
        }
        let inner = Arc::clone(self);
        let k = key.to_owned();
        let ev = event.clone();
        let result = hermes_runtime::task::spawn_blocking(move || {
            inner.run_command(&k, &cmd, &ev, position)
        })
        .await;
        let text = match result {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                tracing::error!(key, error = %e, "command failed");
                format!("Sorry, that command failed: {e}")
            }
            Err(e) => {
                tracing::error!(key, error = %e, "command panicked");
                "Sorry, that command failed.".into()
            }
        };
        self.delivery
            .send(
                &event.source.platform,
                &event.source.chat_id,
                &text,
                Some(&event.message_id),
            )
            .await;
    }

    /// `/usage`: the conversation's token totals, cache share and cost
    /// (prices from the factory: configuration, OpenRouter's listing).
    pub(super) fn usage_later(self: &Arc<Self>, event: MessageEvent, key: String) {
        let inner = Arc::clone(self);
        self.spawn(async move {
            let i2 = Arc::clone(&inner);
            let event_source = event.source.clone();
            let text = hermes_runtime::task::spawn_blocking(move || {
                // The sender's own accounts (issue 44), never anyone else's.
                let own = i2.own_usage(&super::spending::identity(&event_source));
                let Some(session) = i2.store().active_session_for_key(&key)? else {
                    return Ok::<_, StoreError>(format!("{own}\n\nNo conversation yet."));
                };
                let report = UsageReport::for_session(&i2.store(), &session.id)?;
                let prices = i2.agents.factory.prices(&i2.store, i2.now());
                Ok(format!(
                    "{own}\n\nUsage of this conversation:\n{}",
                    report.render(&prices)
                ))
            })
            .await;
            let text = match text {
                Ok(Ok(text)) => text,
                Ok(Err(e)) => format!("Usage: unavailable ({e})"),
                Err(_) => "Usage: unavailable".to_owned(),
            };
            inner
                .delivery
                .send(
                    &event.source.platform,
                    &event.source.chat_id,
                    &text,
                    Some(&event.message_id),
                )
                .await;
        });
    }

    pub(super) fn status_later(
        self: &Arc<Self>,
        event: MessageEvent,
        key: String,
        running: bool,
        waiting: usize,
        cached: bool,
    ) {
        let inner = Arc::clone(self);
        self.spawn(async move {
            let i2 = Arc::clone(&inner);
            let k = key.clone();
            let record =
                hermes_runtime::task::spawn_blocking(move || i2.store().active_session_for_key(&k))
                    .await;
            let mut text = String::new();
            match record {
                Ok(Ok(Some(s))) => {
                    let model = s
                        .model
                        .clone()
                        .unwrap_or_else(|| inner.agents.factory.default_model());
                    text.push_str(&format!(
                        "Session: {}\nModel: {model}\nMessages: {}\n",
                        s.id, s.message_count
                    ));
                    let i3 = Arc::clone(&inner);
                    let i4 = Arc::clone(&inner);
                    let id = s.id.clone();
                    let k = key.clone();
                    let source = event.source.clone();
                    if let Ok(Some(line)) = hermes_runtime::task::spawn_blocking(move || {
                        i3.context_line(&k, &s, &source)
                    })
                    .await
                    {
                        text.push_str(&line);
                        text.push('\n');
                    }
                    let usage = hermes_runtime::task::spawn_blocking(move || {
                        UsageReport::for_session(&i4.store(), &id).map(|r| r.total())
                    })
                    .await;
                    if let Ok(Ok(total)) = usage {
                        text.push_str(&cache_line(&total));
                        text.push('\n');
                    }
                }
                Ok(Ok(None)) => text.push_str(&format!(
                    "No conversation yet.\nModel: {}\n",
                    inner.agents.factory.default_model()
                )),
                Ok(Err(e)) => text.push_str(&format!("Session: unavailable ({e})\n")),
                Err(_) => text.push_str("Session: unavailable\n"),
            }
            text.push_str(&format!(
                "Running: {}\nWaiting messages: {waiting}\nBusy mode: {}\nAgent cached: {}",
                if running { "yes" } else { "no" },
                inner.config.busy_mode.as_str(),
                if cached { "yes" } else { "no" },
            ));
            inner
                .delivery
                .send(
                    &event.source.platform,
                    &event.source.chat_id,
                    &text,
                    Some(&event.message_id),
                )
                .await;
        });
    }

    /// `/new`, `/model`, `/undo` (blocking: touches the store).
    pub(super) fn run_command(
        &self,
        key: &str,
        cmd: &Command,
        event: &MessageEvent,
        position: u64,
    ) -> Result<String, StoreError> {
        let source = &event.source;
        match cmd {
            Command::New => {
                let mut store = self.store();
                // Messages accepted before /new but never answered (it
                // dropped them) belong to the conversation it ends.
                let before = position.saturating_sub(1);
                if !lock(&self.inbox).upto(key, before).is_empty() {
                    let session = match store.active_session_for_key(key)? {
                        Some(s) => s,
                        None => store.create_session(&Self::new_session_spec(
                            key,
                            source,
                            &self.agents.factory.default_model(),
                        ))?,
                    };
                    let fences = self.bot_fences(&source.platform).unwrap_or_default();
                    self.transcribe_into(
                        &mut store,
                        key,
                        &session.id,
                        before,
                        None,
                        &Default::default(),
                        &fences,
                    )?;
                }
                // The user's chosen model survives a new conversation.
                let model = store
                    .active_session_for_key(key)?
                    .and_then(|s| s.model)
                    .unwrap_or_else(|| self.agents.factory.default_model());
                store.reset(key, &Self::new_session_spec(key, source, &model))?;
                drop(store);
                self.agents.invalidate(key);
                Ok("Started a new conversation.".into())
            }
            Command::Model(None) => {
                let model = self
                    .store()
                    .active_session_for_key(key)?
                    .and_then(|s| s.model)
                    .unwrap_or_else(|| self.agents.factory.default_model());
                Ok(format!("Model: {model}. Switch with /model NAME."))
            }
            Command::Model(Some(name)) => {
                if name.len() > 200 || name.chars().any(char::is_whitespace) {
                    return Ok("A model name is one word (at most 200 characters), e.g. /model gpt-4o-mini.".into());
                }
                let mut store = self.store();
                let id = match store.active_session_for_key(key)? {
                    Some(s) => s.id,
                    None => {
                        store
                            .create_session(&Self::new_session_spec(key, source, name))?
                            .id
                    }
                };
                store.set_model(&id, name)?;
                drop(store);
                self.agents.invalidate(key);
                Ok(format!(
                    "Model set to {name}; it answers from your next message."
                ))
            }
            Command::Undo => {
                let mut store = self.store();
                let Some(session) = store.active_session_for_key(key)? else {
                    return Ok("Nothing to undo.".into());
                };
                let removed = store.undo_last_turn(&session.id)?;
                Ok(if removed == 0 {
                    "Nothing to undo.".into()
                } else {
                    format!("Removed the last exchange ({removed} messages).")
                })
            }
            Command::Compress(focus) => self.compress(key, source, focus.as_deref()),
            Command::SetHome => crate::cron_chat::set_home(&mut self.store(), source),
            Command::Cron(arg) => Ok(crate::cron_chat::chat_command(
                &mut self.store(),
                source,
                arg.as_deref(),
                &self.config.timezone,
            )),
            Command::Title(title) => self.title(key, title.as_deref()),
            Command::Resume(arg) => self.resume(key, source, arg.as_deref()),
            Command::Reasoning(arg) => self.reasoning(key, arg.as_deref()),
            Command::Personality(arg) => self.personality(key, arg.as_deref()),
            Command::Voice(arg) => self.voice_command(key, arg.as_deref()),
            Command::Status
            | Command::Usage
            | Command::Stop
            | Command::Help
            | Command::Approve { .. }
            | Command::Deny
            | Command::Skills
            | Command::Memory
            | Command::Forget
            | Command::Sessions
            | Command::Queue(_)
            | Command::Steer(_)
            | Command::Retry
            | Command::Background(_)
            | Command::Unknown(_) => Ok(String::new()),
        }
    }
}
