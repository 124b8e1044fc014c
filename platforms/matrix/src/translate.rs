//! One timeline event → a [`MessageEvent`] (or nothing). Pure: no I/O, so
//! the rules (whose messages, which rooms, mentions, replies, threads) are
//! tested without a homeserver.

use serde_json::Value;

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource,
};

use super::api::PLATFORM;

/// What the translation needs to know about the room and the bot.
pub(crate) struct RoomView<'a> {
    pub room_id: &'a str,
    /// The bot's own user id.
    pub me: &'a str,
    /// Joined members (2 = the user and the bot: a DM).
    pub members: u64,
    /// Whether group messages must address the bot.
    pub require_mention: bool,
    /// Whether `event_id` is one of the bot's own messages.
    pub is_ours: &'a dyn Fn(&str) -> bool,
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// The body without the reply fallback (the quoted lines, starting with
/// `> `, and the blank line after them) that older clients put first.
fn strip_reply_fallback(body: &str) -> &str {
    let mut rest = body;
    let mut stripped = false;
    while let Some(line_end) = rest.find('\n').or(Some(rest.len())) {
        let line = &rest[..line_end];
        if !line.starts_with('>') {
            break;
        }
        stripped = true;
        rest = rest.get(line_end + 1..).unwrap_or("");
    }
    if stripped {
        rest.trim_start_matches('\n')
    } else {
        body
    }
}

/// Whether the event addresses the bot: an intentional mention, its user id
/// or a pill in the text, or a reply to one of its messages.
fn addresses_me(content: &Value, body: &str, view: &RoomView<'_>) -> bool {
    let mentioned = content
        .pointer("/m.mentions/user_ids")
        .and_then(Value::as_array)
        .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(view.me)));
    let named = body.contains(view.me)
        || str_at(content, "/formatted_body").is_some_and(|h| h.contains(view.me));
    let replied = str_at(content, "/m.relates_to/m.in_reply_to/event_id")
        .is_some_and(|id| (view.is_ours)(id));
    mentioned || named || replied
}

/// The text with the bot's own mention taken out (`@bot:server: hi` → `hi`).
fn without_mention(body: &str, me: &str) -> String {
    let localpart = me
        .trim_start_matches('@')
        .split(':')
        .next()
        .unwrap_or_default();
    let mut text = body.replace(me, "");
    // Clients write a pill as the display name or localpart followed by ": ".
    for prefix in [format!("{localpart}: "), format!("{localpart}:")] {
        if let Some(rest) = text.trim_start().strip_prefix(prefix.as_str()) {
            text = rest.to_owned();
            break;
        }
    }
    text.trim_start_matches([':', ',']).trim().to_owned()
}

/// The event as the runner's [`MessageEvent`], or `None` for what the bot
/// does not answer: its own events, other bots' notices, edits, other event
/// types, and group messages that do not address it.
pub(crate) fn translate(event: &Value, view: &RoomView<'_>) -> Option<MessageEvent> {
    if str_at(event, "/type") != Some("m.room.message") {
        return None;
    }
    let sender = str_at(event, "/sender")?;
    let event_id = str_at(event, "/event_id")?;
    if sender == view.me {
        return None;
    }
    let content = event.get("content")?;
    // Edits carry the new text in `m.new_content`; the original was answered.
    if str_at(content, "/m.relates_to/rel_type") == Some("m.replace") {
        return None;
    }
    let msgtype = str_at(content, "/msgtype")?;
    let body = strip_reply_fallback(str_at(content, "/body").unwrap_or_default());
    let group = view.members > 2;
    if group && view.require_mention && !addresses_me(content, body, view) {
        return None;
    }
    let (message_type, text, media) = match msgtype {
        "m.text" | "m.emote" => (
            MessageType::Text,
            without_mention(body, view.me),
            Vec::new(),
        ),
        // Bots speak in notices; answering them is how bot loops start.
        "m.notice" => return None,
        "m.image" | "m.audio" | "m.file" => {
            let url = str_at(content, "/url")?;
            let kind = match msgtype {
                "m.image" => MediaKind::Image,
                "m.audio" if content.get("org.matrix.msc3245.voice").is_some() => MediaKind::Voice,
                "m.audio" => MediaKind::Audio,
                _ => MediaKind::Document,
            };
            let mut media = MediaRef::new(kind, url);
            media.file_name = Some(body.to_owned()).filter(|b| !b.is_empty());
            media.mime_type = str_at(content, "/info/mimetype").map(str::to_owned);
            media.size = content.pointer("/info/size").and_then(Value::as_u64);
            let message_type = match kind {
                MediaKind::Image => MessageType::Photo,
                MediaKind::Voice | MediaKind::Audio => MessageType::Voice,
                MediaKind::Document => MessageType::File,
            };
            // A caption, where the client sent one apart from the file name.
            let caption = str_at(content, "/filename")
                .filter(|f| *f != body)
                .map(|_| body.to_owned())
                .unwrap_or_default();
            (message_type, caption, vec![media])
        }
        other => (
            MessageType::Text,
            format!("[the user sent a {other} message, which this bot cannot read]"),
            Vec::new(),
        ),
    };
    if text.is_empty() && media.is_empty() {
        return None;
    }
    let thread_id = (str_at(content, "/m.relates_to/rel_type") == Some("m.thread"))
        .then(|| str_at(content, "/m.relates_to/event_id"))
        .flatten()
        .map(str::to_owned);
    Some(MessageEvent {
        message_id: event_id.to_owned(),
        text,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_id: view.room_id.to_owned(),
            chat_type: if group { ChatType::Group } else { ChatType::Dm },
            user_id: sender.to_owned(),
            user_name: None,
            thread_id,
        },
        message_type,
        media,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn view(members: u64) -> RoomView<'static> {
        RoomView {
            room_id: "!r:h",
            me: "@bot:h",
            members,
            require_mention: true,
            is_ours: &|id| id == "$mine",
        }
    }

    fn text(sender: &str, body: &str) -> Value {
        json!({"type":"m.room.message","sender":sender,"event_id":"$e",
               "content":{"msgtype":"m.text","body":body}})
    }

    #[test]
    fn a_dm_is_answered_and_its_key_is_the_room() {
        let e = translate(&text("@u:h", "hello"), &view(2)).unwrap();
        assert_eq!(e.text, "hello");
        assert_eq!(e.source.chat_type, ChatType::Dm);
        assert_eq!(e.source.chat_id, "!r:h");
        assert_eq!(e.source.user_id, "@u:h");
        assert_eq!(e.message_id, "$e");
    }

    #[test]
    fn groups_need_a_mention_or_a_reply_to_the_bot() {
        assert!(translate(&text("@u:h", "hello all"), &view(3)).is_none());
        let e = translate(&text("@u:h", "@bot:h: what time is it"), &view(3)).unwrap();
        assert_eq!(e.text, "what time is it");
        assert_eq!(e.source.chat_type, ChatType::Group);
        let mut pill = text("@u:h", "bot: hi");
        pill["content"]["m.mentions"] = json!({"user_ids":["@bot:h"]});
        assert_eq!(translate(&pill, &view(3)).unwrap().text, "hi");
        let mut reply = text("@u:h", "> <@bot:h> earlier\n\nand then?");
        reply["content"]["m.relates_to"] = json!({"m.in_reply_to":{"event_id":"$mine"}});
        assert_eq!(translate(&reply, &view(3)).unwrap().text, "and then?");
    }

    #[test]
    fn own_messages_notices_and_edits_are_not_answered() {
        assert!(translate(&text("@bot:h", "hi"), &view(2)).is_none());
        let mut notice = text("@other-bot:h", "beep");
        notice["content"]["msgtype"] = json!("m.notice");
        assert!(translate(&notice, &view(2)).is_none());
        let mut edit = text("@u:h", "* fixed");
        edit["content"]["m.relates_to"] = json!({"rel_type":"m.replace","event_id":"$e0"});
        assert!(translate(&edit, &view(2)).is_none());
        let state = json!({"type":"m.room.member","sender":"@u:h","event_id":"$m","content":{}});
        assert!(translate(&state, &view(2)).is_none());
    }

    #[test]
    fn files_become_media_and_threads_their_own_session() {
        let img = json!({"type":"m.room.message","sender":"@u:h","event_id":"$i",
            "content":{"msgtype":"m.image","body":"cat.png","url":"mxc://h/abc",
                       "info":{"mimetype":"image/png","size":12}}});
        let e = translate(&img, &view(2)).unwrap();
        assert_eq!(e.message_type, MessageType::Photo);
        assert_eq!(e.media[0].handle, "mxc://h/abc");
        assert_eq!(e.media[0].size, Some(12));
        let mut threaded = text("@u:h", "in a thread");
        threaded["content"]["m.relates_to"] = json!({"rel_type":"m.thread","event_id":"$root"});
        assert_eq!(
            translate(&threaded, &view(2))
                .unwrap()
                .source
                .thread_id
                .as_deref(),
            Some("$root")
        );
    }

    #[test]
    fn junk_is_skipped_without_a_panic() {
        for junk in [
            json!(null),
            json!({"type":"m.room.message"}),
            json!({"type":"m.room.message",
            "sender":"@u:h","event_id":"$x","content":{"msgtype":"m.image"}}),
        ] {
            assert!(translate(&junk, &view(2)).is_none());
        }
    }
}
