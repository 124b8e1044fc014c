//! Platform-neutral inbound messages (SPEC G1).
//!
//! Adapters turn their platform's payload into one [`MessageEvent`]; nothing
//! platform-specific travels further. The runner and the loop only ever see
//! these types.

use std::fmt;

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

/// What kind of content the message carried. Non-text content reaches the
/// agent as a clear text placeholder in [`MessageEvent::text`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
}

/// One inbound message, as every adapter produces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageEvent {
    /// The platform's id for this message (dedup key, reply target).
    pub message_id: String,
    /// The text for the agent.
    pub text: String,
    /// Who sent it, where.
    pub source: SessionSource,
    /// What kind of content it was.
    pub message_type: MessageType,
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
