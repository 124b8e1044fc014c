//! `MESSAGE_CREATE` → [`MessageEvent`]: who wrote where, whether the bot
//! should answer at all (bots, the mention rule), the text the agent reads.
//!
//! - A DM (no `guild_id`) is always for the bot. Its chat id is the user's
//!   id — the session key is `discord:dm:USER` — and the adapter remembers
//!   the DM channel to answer in.
//! - In a server channel the chat is the channel (a thread is a channel of
//!   its own, so each thread has its own sessions); with
//!   `require_mention` the bot answers only a message that mentions it or
//!   replies to one of its messages, except in the free-response channels.
//! - Messages of bots — the bot itself included — are never answered.
//! - The bot's mention is removed from the text; when the user replied to a
//!   message, its text comes first as a quote.

use std::collections::HashSet;

use serde::Deserialize;

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource,
};

use super::PLATFORM;

/// What the mention rule needs to know.
#[derive(Debug)]
pub(crate) struct Rules<'a> {
    pub bot_id: &'a str,
    pub require_mention: bool,
    pub free_response_channels: &'a HashSet<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct User {
    pub id: String,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub global_name: Option<String>,
    #[serde(default)]
    pub bot: bool,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Attachment {
    pub url: String,
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Referenced {
    #[serde(default)]
    pub author: Option<User>,
    #[serde(default)]
    pub content: String,
}

/// The fields of a Discord message object the adapter reads.
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    pub id: String,
    pub channel_id: String,
    #[serde(default)]
    pub guild_id: Option<String>,
    pub author: User,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub mentions: Vec<User>,
    #[serde(default)]
    pub referenced_message: Option<Box<Referenced>>,
    #[serde(default)]
    pub attachments: Vec<Attachment>,
    /// 0 a message, 19 a reply; the rest are system messages (joins, pins).
    #[serde(default, rename = "type")]
    pub kind: u8,
    #[serde(default)]
    pub flags: u64,
}

/// Discord's `IS_VOICE_MESSAGE` message flag.
const VOICE_MESSAGE_FLAG: u64 = 1 << 13;

/// An accepted message: the event and, for a DM, the channel to answer in.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub event: MessageEvent,
    /// `(user id, DM channel id)` for a DM.
    pub dm_channel: Option<(String, String)>,
}

/// Why a message is not answered (for the debug log).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Skipped {
    Bot,
    SystemMessage,
    NotMentioned,
    Empty,
}

/// Decides about one `MESSAGE_CREATE` payload.
pub(crate) fn accept(msg: Message, rules: &Rules<'_>) -> Result<Accepted, Skipped> {
    if msg.author.bot || msg.author.id == rules.bot_id {
        return Err(Skipped::Bot);
    }
    if msg.kind != 0 && msg.kind != 19 {
        return Err(Skipped::SystemMessage);
    }
    let in_dm = msg.guild_id.is_none();
    let mentioned = msg.mentions.iter().any(|u| u.id == rules.bot_id);
    let replies_to_bot = msg
        .referenced_message
        .as_ref()
        .and_then(|r| r.author.as_ref())
        .is_some_and(|a| a.id == rules.bot_id);
    if !in_dm
        && rules.require_mention
        && !rules.free_response_channels.contains(&msg.channel_id)
        && !mentioned
        && !replies_to_bot
    {
        return Err(Skipped::NotMentioned);
    }
    let mut text = strip_mention(&msg.content, rules.bot_id);
    if let Some(quoted) = msg
        .referenced_message
        .as_ref()
        .map(|r| r.content.trim())
        .filter(|c| !c.is_empty())
    {
        let quote: String = quoted.lines().map(|l| format!("> {l}\n")).collect();
        text = if text.is_empty() {
            quote.trim_end().to_owned()
        } else {
            format!("{quote}\n{text}")
        };
    }
    let media: Vec<MediaRef> = msg
        .attachments
        .iter()
        .map(|a| media_ref(a, msg.flags))
        .collect();
    if text.trim().is_empty() && media.is_empty() {
        return Err(Skipped::Empty);
    }
    let message_type = match (media.first().map(|m| m.kind), text.trim().is_empty()) {
        (None, _) => MessageType::Text,
        (Some(_), false) => MessageType::Mixed,
        (Some(MediaKind::Image), true) => MessageType::Photo,
        (Some(MediaKind::Voice | MediaKind::Audio), true) => MessageType::Voice,
        (Some(MediaKind::Document), true) => MessageType::File,
    };
    let user_name = msg
        .author
        .global_name
        .clone()
        .or(msg.author.username.clone());
    let (chat_id, chat_type, dm_channel) = if in_dm {
        (
            msg.author.id.clone(),
            ChatType::Dm,
            Some((msg.author.id.clone(), msg.channel_id.clone())),
        )
    } else {
        (msg.channel_id.clone(), ChatType::Group, None)
    };
    Ok(Accepted {
        event: MessageEvent {
            message_id: msg.id,
            text,
            source: SessionSource {
                platform: PLATFORM.to_owned(),
                chat_id,
                chat_type,
                user_id: msg.author.id,
                user_name,
                thread_id: None,
            },
            message_type,
            media,
        },
        dm_channel,
    })
}

/// `content` without the bot's mentions (`<@ID>`, and the older `<@!ID>`).
/// A one-line message loses the doubled spaces the mention leaves; the
/// lines of a longer one are kept as typed.
fn strip_mention(content: &str, bot_id: &str) -> String {
    let removed = content
        .replace(&format!("<@{bot_id}>"), "")
        .replace(&format!("<@!{bot_id}>"), "");
    if removed.contains('\n') {
        removed.trim().to_owned()
    } else {
        removed.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// An attachment as media: voice messages by their flag, the rest by MIME
/// type. The handle is the CDN URL the adapter downloads.
fn media_ref(a: &Attachment, flags: u64) -> MediaRef {
    let mime = a.content_type.as_deref().unwrap_or("");
    let kind = if flags & VOICE_MESSAGE_FLAG != 0 {
        MediaKind::Voice
    } else if mime.starts_with("image/") {
        MediaKind::Image
    } else if mime.starts_with("audio/") {
        MediaKind::Audio
    } else {
        MediaKind::Document
    };
    MediaRef {
        kind,
        handle: a.url.clone(),
        file_name: a.filename.clone(),
        mime_type: a.content_type.clone(),
        size: a.size,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const BOT: &str = "900";

    fn run(payload: serde_json::Value, require: bool, free: &[&str]) -> Result<Accepted, Skipped> {
        let free: HashSet<String> = free.iter().map(|s| (*s).to_owned()).collect();
        let rules = Rules {
            bot_id: BOT,
            require_mention: require,
            free_response_channels: &free,
        };
        accept(serde_json::from_value(payload).unwrap(), &rules)
    }

    fn guild(content: &str, mentions: serde_json::Value) -> serde_json::Value {
        json!({"id": "1", "channel_id": "50", "guild_id": "5", "type": 0,
               "author": {"id": "7", "username": "ann"}, "content": content, "mentions": mentions})
    }

    #[test]
    fn dms_are_keyed_by_user_and_remember_their_channel() {
        let a = run(
            json!({"id": "1", "channel_id": "60", "author": {"id": "7", "username": "ann"}, "content": "hi"}),
            true,
            &[],
        )
        .unwrap();
        assert_eq!(a.event.source.chat_type, ChatType::Dm);
        assert_eq!(a.event.source.chat_id, "7");
        assert_eq!(a.dm_channel, Some(("7".into(), "60".into())));
    }

    #[test]
    fn the_mention_rule() {
        let m = json!([{"id": BOT, "username": "hermes", "bot": true}]);
        assert_eq!(
            run(guild("hello", json!([])), true, &[]).unwrap_err(),
            Skipped::NotMentioned
        );
        let a = run(guild("<@900> what is 2+2?", m.clone()), true, &[]).unwrap();
        assert_eq!(a.event.text, "what is 2+2?");
        assert_eq!(a.event.source.chat_id, "50");
        assert!(run(guild("hello", json!([])), false, &[]).is_ok());
        assert!(run(guild("hello", json!([])), true, &["50"]).is_ok());
        let mut reply = guild("and then?", json!([]));
        reply["type"] = json!(19);
        reply["referenced_message"] =
            json!({"author": {"id": BOT, "bot": true}, "content": "first answer"});
        let a = run(reply, true, &[]).unwrap();
        assert_eq!(a.event.text, "> first answer\n\nand then?");
        assert_eq!(
            run(guild("<@900>", m), true, &[]).unwrap_err(),
            Skipped::Empty
        );
    }

    #[test]
    fn bots_and_system_messages_are_ignored() {
        let mut p = guild("hi", json!([]));
        p["author"]["bot"] = json!(true);
        assert_eq!(run(p, false, &[]).unwrap_err(), Skipped::Bot);
        let mut p = guild("hi", json!([]));
        p["author"]["id"] = json!(BOT);
        assert_eq!(run(p, false, &[]).unwrap_err(), Skipped::Bot);
        let mut p = guild("joined", json!([]));
        p["type"] = json!(7);
        assert_eq!(run(p, false, &[]).unwrap_err(), Skipped::SystemMessage);
    }

    #[test]
    fn attachments_become_media() {
        let mut p = guild("", json!([]));
        p["attachments"] = json!([{"id": "3", "url": "https://cdn/x.png", "filename": "x.png", "content_type": "image/png", "size": 10}]);
        let a = run(p, false, &[]).unwrap();
        assert_eq!(a.event.message_type, MessageType::Photo);
        assert_eq!(a.event.media[0].kind, MediaKind::Image);
        let mut p = guild("", json!([]));
        p["flags"] = json!(8192);
        p["attachments"] =
            json!([{"id": "3", "url": "https://cdn/v.ogg", "content_type": "audio/ogg"}]);
        assert_eq!(
            run(p, false, &[]).unwrap().event.media[0].kind,
            MediaKind::Voice
        );
    }

    #[test]
    fn multi_line_text_keeps_its_lines() {
        let m = json!([{"id": BOT}]);
        let a = run(guild("<@!900> line one\nline two", m), true, &[]).unwrap();
        assert_eq!(a.event.text, "line one\nline two");
    }
}
