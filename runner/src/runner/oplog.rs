//! The operator's log (issue 31): at the default level one line per event —
//! a message in, a reply out, a turn that failed and why. The fields are
//! the same in the text and the JSON format (`[gateway] log_format`); the
//! message text itself is never logged, only its size.

use std::time::Duration;

use hermes_core::Usage;

use crate::event::{MessageEvent, MessageType};

/// What kind of message came in, as the log names it.
fn kind(event: &MessageEvent, command: bool) -> &'static str {
    if command {
        return "command";
    }
    match event.message_type {
        MessageType::Text => "text",
        MessageType::Photo => "photo",
        MessageType::Voice => "voice",
        MessageType::File => "file",
        MessageType::Mixed => "mixed",
        MessageType::Choice => "choice",
    }
}

/// A message from an allowed user was received.
pub(super) fn message_in(event: &MessageEvent, command: bool) {
    let s = &event.source;
    crate::ops::ops().message_in(&s.platform);
    tracing::info!(
        platform = %s.platform,
        chat = %s.chat_id,
        user = %s.user_id,
        kind = kind(event, command),
        size = event.text.chars().count(),
        media = event.media.len(),
        "message in"
    );
}

/// A turn's reply went out: how many platform messages, how long the turn
/// took from the start of its work, the tokens it used.
pub(super) fn reply_out(platform: &str, chat: &str, pieces: usize, took: Duration, usage: &Usage) {
    crate::ops::ops().reply_out(platform, pieces, took, usage);
    tracing::info!(
        platform,
        chat,
        pieces,
        duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        tokens = usage.total_tokens,
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        "reply out"
    );
}

/// A turn ended without its answer: the cause, for the operator (the chat
/// got a short sentence).
pub(super) fn turn_failed(key: &str, cause: &str) {
    crate::ops::ops().turn_failed();
    tracing::error!(key, error = cause, "turn failed");
}
