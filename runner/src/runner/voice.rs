//! The runner's part of spoken replies and sent files (see
//! [`crate::voice`] and [`crate::outbox`]).
//!
//! A spoken reply goes out after the text (unless `voice_text = false`):
//! the text is never held back waiting for a speech service, and if speech
//! fails the user has the answer and one short line ([`VOICE_FAILED`]).
//! With `voice_text = false` the voice note goes alone — unless speech
//! fails, or the answer was longer than `[tts] max_chars` and only its
//! head was spoken: then the text is sent too, so nothing is lost.

use std::sync::{Arc, Weak};

use hermes_runtime::media::tts::{Speaker, spoken_text};

use super::{Inner, lock};
use crate::adapter::{FileKind, OutgoingFile, PlatformAdapter};
use crate::approval::{Route, RouteGuard};
use crate::event::MessageEvent;
use crate::outbox::{FileRoute, FileRouteGuard, FileSender};
use crate::voice::{VOICE_FAILED, VoiceMode};

/// How one turn's answer is spoken.
pub(super) struct VoicePlan {
    speaker: Arc<Speaker>,
    /// The text goes out as well.
    with_text: bool,
}

impl VoicePlan {
    /// Whether the reply may be shown as it is written (not when only the
    /// voice note is to be sent).
    pub(super) fn streams(plan: Option<&VoicePlan>) -> bool {
        plan.is_none_or(|p| p.with_text)
    }
}

/// Where a turn's questions and files go while it runs.
pub(super) type Bound = (
    Option<RouteGuard>,
    Option<FileRouteGuard>,
    Option<crate::clarify::ClarifyGuard>,
);

impl Inner {
    /// Whether the answer to `event` is spoken: a speech service is
    /// configured, the platform plays voice, and the chat's mode (its
    /// `/voice`, else `[gateway] voice_replies`) says so for this kind of
    /// message.
    pub(super) fn voice_plan(&self, key: &str, event: &MessageEvent) -> Option<VoicePlan> {
        let speaker = self.agents.factory.speech()?;
        let adapter = self.delivery.adapter(event.source.platform.as_str())?;
        if !adapter.can_send_voice() {
            return None;
        }
        let chosen = hermes_runtime::bridge::wait_outside_runtime(|| self.chat_prefs(key).voice);
        chosen
            .unwrap_or(self.config.voice.replies)
            .speaks(event.message_type)
            .then_some(VoicePlan {
                speaker,
                with_text: self.config.voice.text,
            })
    }

    /// Sends a turn's texts and, per `plan`, its `answer` spoken. Returns
    /// how many platform messages that took.
    pub(super) async fn deliver_spoken(
        &self,
        mut texts: Vec<String>,
        answer: Option<String>,
        streaming: Option<super::progress::Streaming>,
        plan: Option<VoicePlan>,
        to: (&str, &str, &str),
    ) -> usize {
        let (platform, chat, reply_to) = to;
        let spoken = match (&plan, answer) {
            (Some(plan), Some(answer)) => {
                let (text, cut) = spoken_text(&answer, plan.speaker.settings().max_chars);
                Some((text, cut)).filter(|(t, _)| !t.is_empty())
            }
            _ => None,
        };
        let (Some(plan), Some((spoken, cut))) = (plan, spoken) else {
            return self
                .deliver_reply(texts, streaming, platform, chat, reply_to)
                .await;
        };
        let with_text = plan.with_text || cut;
        let mut pieces = 0;
        let mut streaming = streaming;
        if with_text {
            pieces += self
                .deliver_reply(texts, streaming.take(), platform, chat, reply_to)
                .await;
            texts = Vec::new();
        } else {
            // The notices first; the reply itself is the voice note.
            let reply = texts.pop().unwrap_or_default();
            for notice in std::mem::replace(&mut texts, vec![reply]) {
                pieces += self.pieces(platform, &notice);
                self.delivery
                    .send(platform, chat, &notice, Some(reply_to))
                    .await;
            }
        }
        match self
            .speak(&plan.speaker, spoken, platform, chat, reply_to)
            .await
        {
            Ok(()) => pieces + 1,
            Err(e) => {
                tracing::warn!(platform, chat, error = %e, "the spoken reply failed; the answer went as text");
                if !texts.is_empty() {
                    pieces += self
                        .deliver_reply(texts, streaming, platform, chat, reply_to)
                        .await;
                }
                self.delivery
                    .send(platform, chat, VOICE_FAILED, Some(reply_to))
                    .await;
                pieces + 1
            }
        }
    }

    /// Speech of `text`, sent as a voice note (an audio file for formats
    /// other than Ogg/Opus).
    async fn speak(
        &self,
        speaker: &Arc<Speaker>,
        text: String,
        platform: &str,
        chat: &str,
        reply_to: &str,
    ) -> Result<(), String> {
        let adapter = self
            .delivery
            .adapter(platform)
            .ok_or("no adapter for the platform")?;
        let started = std::time::Instant::now();
        let speaker = Arc::clone(speaker);
        let speech = hermes_runtime::task::spawn_blocking(move || speaker.speak(&text))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let kind = if speech.format.is_voice_note() {
            FileKind::Voice
        } else {
            FileKind::Audio
        };
        let size = speech.audio.len() as u64;
        let limit = adapter.max_upload_bytes(kind);
        if size > limit {
            return Err(format!(
                "{size} bytes of speech; the platform takes {limit}"
            ));
        }
        let file = OutgoingFile {
            file_name: format!("reply.{}", speech.format.extension()),
            content: speech.audio,
            caption: String::new(),
            kind,
            media_type: speech.format.media_type().to_owned(),
        };
        let reply_to = Some(reply_to).filter(|r| !r.is_empty());
        adapter
            .send_file(chat, &file, reply_to)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            platform,
            chat,
            bytes = size,
            ms = started.elapsed().as_millis() as u64,
            "voice reply sent"
        );
        Ok(())
    }

    /// Binds session `session_id` to the chat of `event` for approval
    /// questions, `send_file` and `clarify`, until the guards are dropped.
    pub(super) fn bind_routes(&self, session_id: &str, key: &str, event: &MessageEvent) -> Bound {
        let source = &event.source;
        let approvals = self.agents.approvals.as_ref().map(|hub| {
            hub.bind(
                session_id,
                Route {
                    key: key.to_owned(),
                    platform: source.platform.clone(),
                    chat_id: source.chat_id.clone(),
                    reply_to: event.message_id.clone(),
                },
            )
        });
        let files = self.agents.factory.files().map(|hub| {
            hub.bind(
                session_id,
                FileRoute {
                    key: key.to_owned(),
                    platform: source.platform.clone(),
                    chat_id: source.chat_id.clone(),
                    reply_to: event.message_id.clone(),
                },
            )
        });
        let questions = self.agents.factory.clarify().map(|hub| {
            hub.bind(
                session_id,
                Route {
                    key: key.to_owned(),
                    platform: source.platform.clone(),
                    chat_id: source.chat_id.clone(),
                    reply_to: event.message_id.clone(),
                },
            )
        });
        (approvals, files, questions)
    }

    /// `/voice [on|always|off|auto]`: this chat's spoken replies.
    pub(super) fn voice_command(
        &self,
        key: &str,
        arg: Option<&str>,
    ) -> Result<String, hermes_runtime::store::StoreError> {
        let mut prefs = self.chat_prefs(key);
        let configured = self.agents.factory.speech().is_some();
        let note = if configured {
            ""
        } else {
            " (No speech service is configured ([tts] base_url), so answers stay text for now.)"
        };
        let Some(arg) = arg else {
            let mode = prefs.voice.unwrap_or(self.config.voice.replies);
            return Ok(format!(
                "Voice replies: {}.{note} Change with /voice on, /voice off or /voice auto \
                 (auto: a voice note gets a spoken reply).",
                mode.as_str()
            ));
        };
        let Some(mode) = VoiceMode::parse(arg) else {
            return Ok(format!(
                "Unknown voice setting `{arg}`. Use /voice on, /voice off or /voice auto."
            ));
        };
        prefs.voice = Some(mode);
        self.save_prefs(key, &prefs)?;
        Ok(match mode {
            VoiceMode::Always => format!("Every answer in this chat is spoken from now on.{note}"),
            VoiceMode::Off => "Answers in this chat are text only from now on.".to_owned(),
            VoiceMode::Auto => {
                format!("Voice notes get a spoken reply, typed messages a typed one.{note}")
            }
        })
    }
}

/// Uploads `send_file`'s files through the adapters, for the turn's thread
/// (a blocking-pool thread, which may wait for the upload).
pub(super) struct ChatFiles(pub(super) Weak<Inner>);

impl ChatFiles {
    fn adapter(&self, route: &FileRoute) -> Result<(Arc<Inner>, Arc<dyn PlatformAdapter>), String> {
        let inner = self.0.upgrade().ok_or("the gateway is stopping")?;
        let adapter = inner
            .delivery
            .adapter(route.platform.as_str())
            .cloned()
            .ok_or("no adapter for this chat's platform")?;
        Ok((inner, adapter))
    }
}

impl FileSender for ChatFiles {
    fn limit(&self, route: &FileRoute, kind: FileKind) -> Result<u64, String> {
        let (_, adapter) = self.adapter(route)?;
        if !adapter.can_send_files() {
            return Err(format!(
                "{} chats take no files from the bot",
                route.platform
            ));
        }
        Ok(adapter.max_upload_bytes(kind))
    }

    fn send(&self, route: &FileRoute, file: OutgoingFile) -> Result<(), String> {
        let (inner, adapter) = self.adapter(route)?;
        let handle = inner
            .handle
            .get()
            .cloned()
            .ok_or("the gateway is not serving yet")?;
        // A file sent mid-answer comes before the rest of the preview: the
        // preview continues below it.
        if let Some(turn) = lock(&inner.queues.state)
            .sessions
            .get(&route.key)
            .and_then(|slot| slot.turn.as_ref())
        {
            turn.break_preview();
        }
        let reply_to = Some(route.reply_to.as_str()).filter(|r| !r.is_empty());
        hermes_runtime::bridge::wait_outside_runtime(|| {
            handle.block_on(adapter.send_file(&route.chat_id, &file, reply_to))
        })
        .map_err(|e| e.to_string())
    }
}
