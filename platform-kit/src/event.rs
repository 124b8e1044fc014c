//! Platform-neutral inbound messages (SPEC G1).
//!
//! Adapters turn their platform's payload into one [`MessageEvent`]; nothing
//! platform-specific travels further. The runner and the loop only ever see
//! these types.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Direct message or group chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChatType {
    /// A one-to-one chat with the bot.
    Dm,
    /// A chat with several members.
    Group,
}

impl ChatType {
    /// The spelling used in session keys.
    pub const fn as_str(self) -> &'static str {
        match self {
            ChatType::Dm => "dm",
            ChatType::Group => "group",
        }
    }
}

/// Where a message came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionSource {
    /// The adapter's platform name, e.g. `telegram`, `wecom`, `test`.
    pub platform: String,
    /// The platform's chat id (the DM peer or the group).
    pub chat_id: String,
    /// DM or group.
    pub chat_type: ChatType,
    /// The sender's platform user id.
    pub user_id: String,
    /// The sender's display name, if the platform gives one.
    pub user_name: Option<String>,
    /// A thread inside the chat (Telegram forum topics), if any.
    pub thread_id: Option<String>,
}

/// What kind of content the message carried. Photos, voice notes and
/// files travel as [`MessageEvent::media`] (SPEC X6); content the gateway
/// cannot use (a video, a sticker) reaches the agent as a clear text
/// placeholder in [`MessageEvent::text`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// Plain text.
    Text,
    /// A picture (with its caption, if any, as text).
    Photo,
    /// A voice message (transcribed text where the platform provides it).
    Voice,
    /// A file or document.
    File,
    /// Text mixed with other content.
    Mixed,
    /// A press on a button of a question with choices (issue 46, `clarify`):
    /// the text is the number of the choice pressed (from 1). Adapters of
    /// platforms with buttons deliver these; a press with no question
    /// waiting is answered with a note, never run as a message.
    Choice,
}

/// One inbound message, as every adapter produces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageEvent {
    /// The platform's id for this message (dedup key, reply target).
    pub message_id: String,
    /// The text for the agent (the caption of a photo or file).
    pub text: String,
    /// Who sent it, where.
    pub source: SessionSource,
    /// What kind of content it was.
    pub message_type: MessageType,
    /// Photos, voice notes, audio and files sent with it, not yet
    /// downloaded (SPEC X6): the turn fetches them through the adapter
    /// ([`crate::adapter::PlatformAdapter::fetch_media`]).
    pub media: Vec<MediaRef>,
}

/// What a [`MediaRef`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    /// A picture: given to the model (or described for it).
    Image,
    /// A voice note: transcribed.
    Voice,
    /// An audio file: transcribed.
    Audio,
    /// Any other file: saved into the working directory.
    Document,
}

impl MediaKind {
    /// How the user would name it in a sentence ("your photo").
    pub fn noun(self) -> &'static str {
        match self {
            MediaKind::Image => "photo",
            MediaKind::Voice => "voice message",
            MediaKind::Audio => "audio file",
            MediaKind::Document => "file",
        }
    }
}

/// A platform's file, by the handle its adapter downloads it with. Stored
/// with the accepted message (the inbox), so a message answered after a
/// restart still has it; the bytes are fetched when its turn starts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaRef {
    /// What it is.
    pub kind: MediaKind,
    /// The adapter's handle: Telegram's `file_id`, WeCom's `media_id`, or
    /// the AI bot's download URL and key. Opaque to the runner; never shown.
    pub handle: String,
    /// The file name the platform gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// The MIME type the platform gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The size the platform announced, if any (checked before downloading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl fmt::Debug for MediaRef {
    /// The handle may carry a download URL and its key: not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MediaRef")
            .field("kind", &self.kind)
            .field("handle", &format_args!("<{} bytes>", self.handle.len()))
            .field("file_name", &self.file_name)
            .field("mime_type", &self.mime_type)
            .field("size", &self.size)
            .finish()
    }
}

impl MediaRef {
    /// A reference of `kind` with `handle` and nothing else known.
    pub fn new(kind: MediaKind, handle: impl Into<String>) -> Self {
        MediaRef {
            kind,
            handle: handle.into(),
            file_name: None,
            mime_type: None,
            size: None,
        }
    }
}

impl fmt::Display for SessionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.platform,
            self.chat_type.as_str(),
            self.chat_id,
            self.user_id
        )
    }
}

/// How much of a quoted message reaches the model (SPEC Y5): enough to
/// know what is answered, not a second copy of a long reply.
pub const QUOTE_MAX_CHARS: usize = 300;

/// `text` with the message it replies to, `quoted`, in front as a
/// Markdown quote (`> …` lines, cut to [`QUOTE_MAX_CHARS`]), so the model
/// sees what the user answers (SPEC Y5). A command (`/stop`) stays as it
/// is, so replying to a message with a command still runs the command.
pub fn with_quote(text: &str, quoted: &str) -> String {
    let quoted = quoted.trim();
    if quoted.is_empty() || text.starts_with('/') {
        return text.to_owned();
    }
    let mut cut: String = quoted.chars().take(QUOTE_MAX_CHARS).collect();
    if cut.len() < quoted.len() {
        cut.push('…');
    }
    let block: String = cut.lines().map(|l| format!("> {l}\n")).collect();
    format!("{block}\n{text}")
}

#[cfg(test)]
mod quote_tests {
    use super::*;

    #[test]
    fn quotes_are_marked_cut_and_never_hide_a_command() {
        assert_eq!(
            with_quote("yes", "Shall I?\nReally?"),
            "> Shall I?\n> Really?\n\nyes"
        );
        let long = "é".repeat(1000);
        let quoted = with_quote("ok", &long);
        assert_eq!(quoted.matches('é').count(), QUOTE_MAX_CHARS);
        assert!(quoted.contains('…'));
        assert_eq!(with_quote("/stop", "anything"), "/stop");
        assert_eq!(with_quote("hi", "  "), "hi");
    }
}
