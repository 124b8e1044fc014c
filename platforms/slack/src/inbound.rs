//! Socket Mode envelopes → [`MessageEvent`]s: which events are for the
//! bot, who wrote where, the text the agent reads.
//!
//! - `message` in a DM (`channel_type: im`) is always for the bot; its chat
//!   is the DM channel (`D…`).
//! - In channels, `app_mention` is taken; a `message` too when mentions are
//!   not required, or when it mentions the bot. A mention arrives both as
//!   `message` and `app_mention` with the same channel and `ts`: both give
//!   the same message id, and the runner's inbox answers it once (as it
//!   does a redelivered envelope).
//! - Subtypes: none and `file_share` (a message with files) and
//!   `thread_broadcast` are messages; `message_changed`, `bot_message`,
//!   joins and the rest are not. The bot's own messages (its user id, or
//!   any `bot_id`) are never answered.
//! - The message id is the `ts`, with `/THREAD_TS` when the message is in a
//!   thread: replies go into that thread, and the thread is the session's
//!   `thread_id`. A top-level message is answered in a thread it starts;
//!   its session is the DM's, or the user's in the channel.

use serde::Deserialize;

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource,
};

use crate::PLATFORM;

/// One Socket Mode frame from Slack.
#[derive(Debug, Deserialize)]
pub struct Envelope {
    /// `hello`, `disconnect`, `events_api`, `slash_commands`, `interactive`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What to acknowledge; absent on `hello` and `disconnect`.
    #[serde(default)]
    pub envelope_id: Option<String>,
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
    /// `disconnect`: `refresh_requested`, `warning`, `link_disabled`.
    #[serde(default)]
    pub reason: Option<String>,
    /// How often Slack has sent this envelope before (0 the first time).
    #[serde(default)]
    pub retry_attempt: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct File {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub mimetype: Option<String>,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub url_private_download: Option<String>,
    #[serde(default)]
    pub url_private: Option<String>,
    #[serde(default)]
    pub size: Option<u64>,
}

/// The fields of a `message` / `app_mention` event the adapter reads.
#[derive(Debug, Deserialize)]
pub(crate) struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub bot_id: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub ts: Option<String>,
    #[serde(default)]
    pub thread_ts: Option<String>,
    #[serde(default)]
    pub files: Vec<File>,
}

/// What the mention rule needs.
#[derive(Debug)]
pub(crate) struct Rules<'a> {
    pub bot_user: &'a str,
    pub require_mention: bool,
}

/// Why an event is not answered (for the debug log).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Skipped {
    NotAMessage,
    Subtype,
    Bot,
    NotMentioned,
    Malformed(&'static str),
    Empty,
}

/// The message id for `ts` in `thread_ts` (see the module docs).
pub fn message_id(ts: &str, thread_ts: Option<&str>) -> String {
    match thread_ts.filter(|t| !t.is_empty() && *t != ts) {
        Some(thread) => format!("{ts}/{thread}"),
        None => ts.to_owned(),
    }
}

/// The thread a reply to `message_id` goes into, if any.
pub fn thread_of(message_id: &str) -> Option<&str> {
    message_id.split_once('/').map(|(_, thread)| thread)
}

/// The thread a reply to `message_id` goes into: its thread, or the
/// thread it starts; none for a slash command (it has no message).
pub fn reply_thread(message_id: &str) -> Option<&str> {
    if message_id.starts_with(COMMAND_PREFIX) {
        return None;
    }
    Some(thread_of(message_id).unwrap_or(ts_of(message_id)))
}

/// How the message id of a slash command starts (then its `trigger_id`).
pub const COMMAND_PREFIX: &str = "cmd:";

/// The fields of a `slash_commands` payload the adapter reads.
#[derive(Debug, Deserialize)]
pub(crate) struct SlashCommand {
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub user_id: String,
    #[serde(default)]
    pub channel_id: String,
    #[serde(default)]
    pub trigger_id: String,
}

/// A slash command registered for the app (`/new`, `/sethome`, …) as the
/// text the runner's command parser reads; answered in the channel it was
/// typed in.
pub(crate) fn accept_command(cmd: SlashCommand) -> Result<MessageEvent, Skipped> {
    let ok = |s: &str| {
        !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
    };
    if !cmd.command.starts_with('/')
        || !ok(&cmd.user_id)
        || !ok(&cmd.channel_id)
        || !ok(&cmd.trigger_id)
    {
        return Err(Skipped::Malformed(
            "a slash command without command, user, channel or trigger_id",
        ));
    }
    let text = format!("{} {}", cmd.command, unescape(&cmd.text))
        .trim()
        .to_owned();
    Ok(MessageEvent {
        message_id: format!("{COMMAND_PREFIX}{}", cmd.trigger_id),
        text,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_type: if cmd.channel_id.starts_with('D') {
                ChatType::Dm
            } else {
                ChatType::Group
            },
            chat_id: cmd.channel_id,
            user_id: cmd.user_id,
            user_name: None,
            thread_id: None,
        },
        message_type: MessageType::Text,
        media: Vec::new(),
    })
}

/// The `ts` of `message_id` (what a reaction is added to).
pub fn ts_of(message_id: &str) -> &str {
    message_id.split_once('/').map_or(message_id, |(ts, _)| ts)
}

/// Decides about one event of an `events_api` envelope.
pub(crate) fn accept(event: Event, rules: &Rules<'_>) -> Result<MessageEvent, Skipped> {
    let mention = format!("<@{}>", rules.bot_user);
    match event.kind.as_str() {
        "message" | "app_mention" => {}
        _ => return Err(Skipped::NotAMessage),
    }
    match event.subtype.as_deref() {
        None | Some("file_share" | "thread_broadcast") => {}
        Some(_) => return Err(Skipped::Subtype),
    }
    let user = event
        .user
        .filter(|u| !u.is_empty())
        .ok_or(Skipped::Malformed("no user"))?;
    if event.bot_id.is_some() || user == rules.bot_user {
        return Err(Skipped::Bot);
    }
    let channel = event
        .channel
        .filter(|c| !c.is_empty())
        .ok_or(Skipped::Malformed("no channel"))?;
    let ts = event
        .ts
        .filter(|t| !t.is_empty())
        .ok_or(Skipped::Malformed("no ts"))?;
    let raw_text = event.text.unwrap_or_default();
    let dm = event.channel_type.as_deref() == Some("im")
        || (event.kind == "message" && event.channel_type.is_none() && channel.starts_with('D'));
    if event.kind == "message" && !dm && rules.require_mention && !raw_text.contains(&mention) {
        return Err(Skipped::NotMentioned);
    }
    let text = unescape(&strip_mention(&raw_text, &mention));
    let media: Vec<MediaRef> = event.files.iter().filter_map(media_ref).collect();
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
    let thread = event.thread_ts.filter(|t| !t.is_empty() && *t != ts);
    Ok(MessageEvent {
        message_id: message_id(&ts, thread.as_deref()),
        text,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_id: channel,
            chat_type: if dm { ChatType::Dm } else { ChatType::Group },
            user_id: user,
            user_name: None,
            thread_id: thread,
        },
        message_type,
        media,
    })
}

fn media_ref(file: &File) -> Option<MediaRef> {
    let url = file
        .url_private_download
        .as_deref()
        .or(file.url_private.as_deref())?;
    let mime = file.mimetype.clone().unwrap_or_default();
    let kind = if file.subtype.as_deref() == Some("slack_audio") {
        MediaKind::Voice
    } else if mime.starts_with("image/") {
        MediaKind::Image
    } else if mime.starts_with("audio/") {
        MediaKind::Audio
    } else {
        MediaKind::Document
    };
    Some(MediaRef {
        kind,
        handle: url.to_owned(),
        file_name: file.name.clone(),
        mime_type: file.mimetype.clone(),
        size: file.size,
    })
}

/// The text without the bot's mention; a one-line message loses the
/// doubled spaces it leaves.
fn strip_mention(text: &str, mention: &str) -> String {
    let removed = text.replace(mention, "");
    if removed.contains('\n') {
        removed.trim().to_owned()
    } else {
        removed.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// Slack escapes `&`, `<` and `>` in message text.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(v: serde_json::Value) -> Event {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    const RULES: Rules<'static> = Rules {
        bot_user: "UBOT",
        require_mention: true,
    };

    #[test]
    fn a_mention_as_message_and_as_app_mention_is_one_message() {
        let base = json!({"channel": "C1", "channel_type": "channel", "user": "U1",
            "text": "<@UBOT> hi &lt;there&gt;", "ts": "1.0002", "thread_ts": "1.0001"});
        let mut as_message = base.clone();
        as_message["type"] = json!("message");
        let mut as_mention = base;
        as_mention["type"] = json!("app_mention");
        let a =
            accept(event(as_message), &RULES).map(|e| (e.message_id, e.text, e.source.thread_id));
        let b =
            accept(event(as_mention), &RULES).map(|e| (e.message_id, e.text, e.source.thread_id));
        assert_eq!(a, b);
        assert_eq!(
            a,
            Ok((
                "1.0002/1.0001".to_owned(),
                "hi <there>".to_owned(),
                Some("1.0001".to_owned())
            ))
        );
    }

    #[test]
    fn what_is_not_for_the_bot_is_skipped() {
        let cases = [
            (
                json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "hi", "ts": "1"}),
                Skipped::NotMentioned,
            ),
            (
                json!({"type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im", "ts": "1"}),
                Skipped::Subtype,
            ),
            (
                json!({"type": "message", "subtype": "bot_message", "channel": "D1", "channel_type": "im", "ts": "1", "bot_id": "B1"}),
                Skipped::Subtype,
            ),
            (
                json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "UBOT", "text": "mine", "ts": "1"}),
                Skipped::Bot,
            ),
            (
                json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U1", "text": "  ", "ts": "1"}),
                Skipped::Empty,
            ),
            (
                json!({"type": "message", "channel": "D1", "channel_type": "im", "text": "x", "ts": "1"}),
                Skipped::Malformed("no user"),
            ),
            (
                json!({"type": "reaction_added", "user": "U1"}),
                Skipped::NotAMessage,
            ),
        ];
        for (v, why) in cases {
            assert_eq!(
                accept(event(v.clone()), &RULES).map(|e| e.text),
                Err(why),
                "{v}"
            );
        }
    }

    #[test]
    fn a_slash_command_is_the_command_typed_answered_outside_threads() {
        let cmd: SlashCommand = serde_json::from_value(json!({"command": "/sethome", "text": "",
            "user_id": "U1", "channel_id": "C9", "trigger_id": "13345224609.738474920.8088930838d88f008e0"}))
        .unwrap_or_else(|e| panic!("{e}"));
        let e = accept_command(cmd).map(|e| {
            (
                e.text,
                e.source.chat_id,
                e.source.chat_type,
                reply_thread(&e.message_id).is_none(),
            )
        });
        assert_eq!(
            e,
            Ok((
                "/sethome".to_owned(),
                "C9".to_owned(),
                ChatType::Group,
                true
            ))
        );
        let bad: SlashCommand = serde_json::from_value(
            json!({"command": "/x", "user_id": "U1", "channel_id": "C9", "trigger_id": "a/b"}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(accept_command(bad).is_err());
    }

    #[test]
    fn a_dm_with_a_file_is_served() {
        let e = accept(
            event(
                json!({"type": "message", "subtype": "file_share", "channel": "D1", "channel_type": "im",
                "user": "U1", "text": "", "ts": "5.1",
                "files": [{"id": "F1", "name": "a.png", "mimetype": "image/png", "size": 3,
                    "url_private_download": "https://files.slack.com/files-pri/T-F1/download/a.png"}]}),
            ),
            &RULES,
        );
        let e = e.map(|e| {
            (
                e.source.chat_type,
                e.message_type,
                e.media.len(),
                e.message_id,
            )
        });
        assert_eq!(
            e,
            Ok((ChatType::Dm, MessageType::Photo, 1, "5.1".to_owned()))
        );
    }
}
