//! Chat commands of SPEC Y5 that change how a chat is answered:
//! `/resume`, `/reasoning`, `/personality`.
//!
//! `/reasoning` and `/personality` are settings of the chat (its session
//! key), kept in the store's key-value table: they survive `/new`, a
//! restart, and apply from the next message. They are part of the cached
//! agent's signature (G4), so a change builds a new agent. `/resume` makes
//! an earlier conversation of the same session key the active one again —
//! only of the same key, so never another user's or another chat's.

use hermes_core::{Message, RunOutcome};
use hermes_runtime::store::{SessionRecord, SessionStatus, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::{BuildOptions, Inner};
use crate::event::SessionSource;
use crate::personality::{Personalities, valid_name};

/// Where a chat's settings are kept (`chat-prefs:{session key}`).
const PREFS_PREFIX: &str = "chat-prefs:";
/// When a conversation was resumed (`resumed:{session key}` →
/// `{session id} {ms}`): its idle time counts from then (G10).
const RESUMED_PREFIX: &str = "resumed:";
/// The reasoning efforts `/reasoning` accepts (those of `[provider]
/// reasoning_effort`).
const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];
/// How many stored sessions `/resume` looks through for this chat's.
const SESSIONS_SCANNED: usize = 1000;
/// How many `/resume` lists.
const SESSIONS_SHOWN: usize = 10;
/// The most reasoning text shown with a reply, in characters.
const REASONING_SHOWN_CHARS: usize = 3000;

/// A chat's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ChatPrefs {
    /// The reasoning effort asked of the provider; `None`: the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reasoning_effort: Option<String>,
    /// Whether the model's reasoning is shown above its answer.
    #[serde(default)]
    pub(super) show_reasoning: bool,
    /// The personality's name; `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) personality: Option<String>,
    /// `/voice`: when answers are spoken; `None`: `[gateway] voice_replies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) voice: Option<crate::voice::VoiceMode>,
}

impl ChatPrefs {
    /// What these settings add to an agent's signature.
    pub(super) fn signature(&self) -> String {
        format!(
            "|effort:{}|personality:{}",
            self.reasoning_effort.as_deref().unwrap_or("default"),
            self.personality.as_deref().unwrap_or("none")
        )
    }

    /// The system prompt an agent of this chat gets: the session's stored
    /// one, then the personality's overlay.
    pub(super) fn prompt(&self, stored: &str, personalities: &Personalities) -> String {
        match self
            .personality
            .as_deref()
            .and_then(|n| personalities.overlay(n))
        {
            Some(overlay) if stored.is_empty() => overlay,
            Some(overlay) => format!("{stored}\n\n# Personality\n{overlay}"),
            None => stored.to_owned(),
        }
    }

    /// How the agent is built.
    pub(super) fn build_options(&self) -> BuildOptions {
        BuildOptions {
            reasoning_effort: self.reasoning_effort.clone(),
        }
    }
}

/// The reasoning of a run's answer, as shown above it; empty when hidden
/// or when the model gave none.
pub(super) fn shown_reasoning(prefs: &ChatPrefs, outcome: &RunOutcome) -> String {
    if !prefs.show_reasoning {
        return String::new();
    }
    let reasoning = outcome
        .new_messages()
        .iter()
        .rev()
        .filter(|e| matches!(e.message, Message::Assistant { .. }))
        .find_map(|e| e.meta.reasoning.as_deref().filter(|r| !r.trim().is_empty()));
    let Some(reasoning) = reasoning else {
        return String::new();
    };
    let mut text: String = reasoning
        .trim()
        .chars()
        .take(REASONING_SHOWN_CHARS)
        .collect();
    if reasoning.trim().chars().count() > REASONING_SHOWN_CHARS {
        text.push('…');
    }
    format!("💭 Reasoning:\n{text}\n\n")
}

impl Inner {
    /// This chat's settings (the defaults when none are stored or they
    /// cannot be read).
    pub(super) fn chat_prefs(&self, key: &str) -> ChatPrefs {
        match self.store().kv_get(&format!("{PREFS_PREFIX}{key}")) {
            Ok(Some(json)) => serde_json::from_str(&json).unwrap_or_else(|e| {
                tracing::warn!(key, error = %e, "unreadable chat settings; using the defaults");
                ChatPrefs::default()
            }),
            Ok(None) => ChatPrefs::default(),
            Err(e) => {
                tracing::warn!(key, error = %e, "could not read the chat settings; using the defaults");
                ChatPrefs::default()
            }
        }
    }

    pub(super) fn save_prefs(&self, key: &str, prefs: &ChatPrefs) -> Result<(), StoreError> {
        let json = serde_json::to_string(prefs).unwrap_or_default();
        self.store()
            .kv_set(&format!("{PREFS_PREFIX}{key}"), &json)?;
        self.agents.invalidate(key);
        Ok(())
    }

    /// `/reasoning [none|minimal|low|medium|high|xhigh|default|show|on|hide|off]`.
    pub(super) fn reasoning(&self, key: &str, arg: Option<&str>) -> Result<String, StoreError> {
        let mut prefs = self.chat_prefs(key);
        let Some(arg) = arg else {
            return Ok(format!(
                "Reasoning effort: {}. Reasoning shown: {}.\n\
                 Change with /reasoning none|low|medium|high (or default), and /reasoning show|hide.",
                prefs
                    .reasoning_effort
                    .as_deref()
                    .unwrap_or("the configured default"),
                if prefs.show_reasoning { "yes" } else { "no" }
            ));
        };
        let text = match arg {
            "show" | "on" => {
                prefs.show_reasoning = true;
                "The model's reasoning is shown above its answers from now on.".to_owned()
            }
            "hide" | "off" => {
                prefs.show_reasoning = false;
                "The model's reasoning is no longer shown.".to_owned()
            }
            "default" => {
                prefs.reasoning_effort = None;
                "Reasoning effort back to the configured default.".to_owned()
            }
            effort if EFFORTS.contains(&effort) => {
                prefs.reasoning_effort = Some(effort.to_owned());
                format!("Reasoning effort set to {effort}; it applies from your next message.")
            }
            other => {
                return Ok(format!(
                    "Unknown reasoning setting `{other}`. Use one of: {}, default, show, hide.",
                    EFFORTS.join(", ")
                ));
            }
        };
        self.save_prefs(key, &prefs)?;
        Ok(text)
    }

    /// `/personality [NAME|none]`.
    pub(super) fn personality(&self, key: &str, arg: Option<&str>) -> Result<String, StoreError> {
        let personalities = self.agents.factory.personalities();
        let mut prefs = self.chat_prefs(key);
        let Some(arg) = arg else {
            return Ok(format!(
                "Personality: {}. Available: {}. Choose with /personality NAME, or /personality none.",
                prefs.personality.as_deref().unwrap_or("none"),
                personalities.names().join(", ")
            ));
        };
        let text = if matches!(arg, "none" | "off" | "default") {
            prefs.personality = None;
            "Personality removed; answers come from the plain prompt again.".to_owned()
        } else if valid_name(arg) && personalities.overlay(arg).is_some() {
            prefs.personality = Some(arg.to_owned());
            format!("Personality set to {arg}; it applies from your next message.")
        } else {
            let hint = hermes_runtime::config::did_you_mean(
                arg,
                personalities.names().iter().map(String::as_str),
            )
            .map(|n| format!(" Did you mean {n}?"))
            .unwrap_or_default();
            return Ok(format!(
                "No personality named `{arg}`.{hint} Available: {}.",
                personalities.names().join(", ")
            ));
        };
        self.save_prefs(key, &prefs)?;
        Ok(text)
    }

    /// `/resume [ID or title]`: lists this chat's earlier conversations, or
    /// makes the one named the active one again.
    pub(super) fn resume(
        &self,
        key: &str,
        _source: &SessionSource,
        arg: Option<&str>,
    ) -> Result<String, StoreError> {
        let mut store = self.store();
        let current = store.active_session_for_key(key)?;
        let mine: Vec<SessionRecord> = store
            .list_sessions(SESSIONS_SCANNED)?
            .into_iter()
            .filter(|s| s.session_key.as_deref() == Some(key))
            .collect();
        let is_current = |s: &SessionRecord| current.as_ref().is_some_and(|c| c.id == s.id);
        let Some(arg) = arg else {
            let earlier: Vec<&SessionRecord> = mine
                .iter()
                .filter(|s| !is_current(s))
                .take(SESSIONS_SHOWN)
                .collect();
            if earlier.is_empty() {
                return Ok("No earlier conversations in this chat.".into());
            }
            let mut text = String::from("Earlier conversations here (resume with /resume ID):");
            for s in earlier {
                text.push_str(&format!(
                    "\n{} — {} · {} messages",
                    s.id,
                    s.title.as_deref().unwrap_or("untitled"),
                    s.message_count
                ));
            }
            return Ok(text);
        };
        let by_id: Vec<&SessionRecord> = match mine.iter().find(|s| s.id == arg) {
            Some(s) => vec![s],
            None => mine.iter().filter(|s| s.id.starts_with(arg)).collect(),
        };
        let found = match by_id.as_slice() {
            [one] => Some(*one),
            [] => mine.iter().find(|s| {
                s.title
                    .as_deref()
                    .is_some_and(|t| t.eq_ignore_ascii_case(arg))
            }),
            _ => {
                return Ok(format!(
                    "`{arg}` names several conversations here; send more of the id."
                ));
            }
        };
        let Some(target) = found else {
            // The same answer whether the id exists elsewhere or not: other
            // chats' conversations are not revealed.
            return Ok(format!(
                "No conversation `{arg}` in this chat. Send /resume for the list."
            ));
        };
        if is_current(target) {
            return Ok("That is the current conversation.".into());
        }
        let id = target.id.clone();
        let title = target.title.clone();
        let count = target.message_count;
        self.switch_to(&mut store, key, current.as_ref(), &id)?;
        drop(store);
        self.agents.invalidate(key);
        Ok(format!(
            "Resumed {id} — {} · {count} messages. Your next message continues it.",
            title.as_deref().unwrap_or("untitled")
        ))
    }

    /// Makes `id` the active conversation of `key`, ending the current one,
    /// and notes when (its idle time starts again, G10).
    fn switch_to(
        &self,
        store: &mut Store,
        key: &str,
        current: Option<&SessionRecord>,
        id: &str,
    ) -> Result<(), StoreError> {
        // Activated first: a failure in between leaves two active ones (the
        // most recently updated one answers), and nothing is lost.
        store.set_status(id, SessionStatus::Active)?;
        if let Some(c) = current {
            store.set_status(&c.id, SessionStatus::Ended)?;
        }
        store.kv_set(
            &format!("{RESUMED_PREFIX}{key}"),
            &format!("{id} {}", self.now()),
        )
    }

    /// When `session_id` was last resumed as the conversation of `key`
    /// (0: never).
    pub(super) fn resumed_at(store: &Store, key: &str, session_id: &str) -> u64 {
        store
            .kv_get(&format!("{RESUMED_PREFIX}{key}"))
            .ok()
            .flatten()
            .and_then(|v| {
                let (id, at) = v.split_once(' ')?;
                (id == session_id).then(|| at.parse().ok()).flatten()
            })
            .unwrap_or(0)
    }
}
