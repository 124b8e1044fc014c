//! Telegram updates → [`MessageEvent`]s, and the group-chat trigger rules.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource, with_quote,
};

use super::api::PLATFORM;

/// When the bot answers in a group or supergroup. In a DM it always answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPolicy {
    /// Answer every message in the group (overrides the triggers below).
    pub respond_to_all: bool,
    /// Answer when the text mentions `@botname` (or a text mention of the bot).
    pub on_mention: bool,
    /// Answer replies to one of the bot's own messages.
    pub on_reply: bool,
    /// Answer `/command` and `/command@botname` (not `/command@otherbot`).
    pub on_command: bool,
}

impl Default for GroupPolicy {
    /// Triggered only: a busy group should not wake the agent on every line.
    fn default() -> Self {
        Self {
            respond_to_all: false,
            on_mention: true,
            on_reply: true,
            on_command: true,
        }
    }
}

/// Who the bot is, from `getMe` at connect.
#[derive(Clone, Debug, Deserialize)]
pub struct BotIdentity {
    /// The bot's user id (for reply detection).
    pub id: i64,
    /// The bot's username without `@` (for mentions and `/cmd@bot`).
    #[serde(default)]
    pub username: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Update {
    #[serde(default)]
    pub message: Option<Message>,
    /// A press on an inline keyboard button (a `clarify` question's).
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

/// `CallbackQuery`: who pressed which button under which message.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct CallbackQuery {
    pub id: String,
    pub from: User,
    /// The message with the keyboard (absent when too old to be shown).
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub data: Option<String>,
}

/// The `callback_data` of the button of choice N is this and N.
pub(crate) const CHOICE_DATA: &str = "clarify:";

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: Option<String>,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Chat {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub is_forum: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Entity {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub user: Option<User>,
}

/// A file of a message (`PhotoSize`, `Voice`, `Audio`, `Document`): what
/// `getFile` needs, and what Telegram tells about it.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct File {
    /// Empty when Telegram sent none (then there is nothing to fetch).
    #[serde(default)]
    pub file_id: String,
    #[serde(default)]
    pub file_name: Option<String>,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub file_size: Option<u64>,
}

impl File {
    fn media(&self, kind: MediaKind) -> MediaRef {
        MediaRef {
            kind,
            handle: self.file_id.clone(),
            file_name: self.file_name.clone(),
            mime_type: self.mime_type.clone(),
            size: self.file_size,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Sticker {
    #[serde(default)]
    pub emoji: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Message {
    pub message_id: i64,
    #[serde(default)]
    pub message_thread_id: Option<i64>,
    #[serde(default)]
    pub is_topic_message: Option<bool>,
    #[serde(default)]
    pub from: Option<User>,
    pub chat: Chat,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub caption: Option<String>,
    #[serde(default)]
    pub entities: Option<Vec<Entity>>,
    #[serde(default)]
    pub caption_entities: Option<Vec<Entity>>,
    /// The sizes of a photo, smallest first.
    #[serde(default)]
    pub photo: Option<Vec<File>>,
    #[serde(default)]
    pub voice: Option<File>,
    #[serde(default)]
    pub audio: Option<File>,
    #[serde(default)]
    pub video: Option<serde_json::Value>,
    #[serde(default)]
    pub document: Option<File>,
    #[serde(default)]
    pub sticker: Option<Sticker>,
    #[serde(default)]
    pub reply_to_message: Option<Box<Message>>,
    /// The part of the replied-to message the user selected, if any.
    #[serde(default)]
    pub quote: Option<TextQuote>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct TextQuote {
    pub text: String,
}

/// Why an update produced no event (logged at debug, never an error).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    NotAMessage,
    FromBot,
    NoSender,
    Channel,
    Service,
    NotAddressed,
    OtherBotsCommand,
}

/// A translated message plus what the adapter must remember about it.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub event: MessageEvent,
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
}

/// Translates one update. `bot` is `None` only before `getMe` succeeded.
pub(crate) fn translate(
    update: Update,
    bot: &BotIdentity,
    policy: &GroupPolicy,
) -> Result<Inbound, Skip> {
    let msg = match (update.message, update.callback_query) {
        (Some(msg), _) => msg,
        (None, Some(press)) => return translate_press(press),
        (None, None) => return Err(Skip::NotAMessage),
    };
    let chat_type = match msg.chat.kind.as_str() {
        "private" => ChatType::Dm,
        "group" | "supergroup" => ChatType::Group,
        _ => return Err(Skip::Channel),
    };
    let from = msg.from.as_ref().ok_or(Skip::NoSender)?;
    if from.is_bot {
        return Err(Skip::FromBot);
    }
    let (mut text, message_type, media) = content(&msg).ok_or(Skip::Service)?;

    // `/cmd@otherbot` is addressed elsewhere; `/cmd@ourbot` becomes `/cmd` so
    // the gateway's slash commands see one spelling.
    let mut commanded = false;
    if text.starts_with('/') {
        let end = text.find(char::is_whitespace).unwrap_or(text.len());
        if let Some(at) = text[..end].find('@') {
            // `@` is one byte: the name follows it.
            let target = text[at..end].strip_prefix('@').unwrap_or_default();
            let ours = bot
                .username
                .as_deref()
                .is_some_and(|u| u.eq_ignore_ascii_case(target));
            if !ours {
                return Err(Skip::OtherBotsCommand);
            }
            text.replace_range(at..end, "");
        }
        commanded = end > 1;
    }

    if chat_type == ChatType::Group && !policy.respond_to_all {
        let mentioned = policy.on_mention && mentions(&msg, &text, bot);
        let replied = policy.on_reply && replies_to_bot(&msg, bot);
        if !(mentioned || replied || (policy.on_command && commanded)) {
            return Err(Skip::NotAddressed);
        }
    }

    // A reply carries what it answers (SPEC Y5): the part the user
    // selected (`quote`), else the replied-to message's text or caption.
    if let Some(parent) = msg.reply_to_message.as_deref()
        && !is_topic_root(&msg, parent)
    {
        let quoted = match &msg.quote {
            Some(q) => q.text.clone(),
            None => content(parent).map(|(t, _, _)| t).unwrap_or_default(),
        };
        text = with_quote(&text, &quoted);
    }
    let forum = msg.is_topic_message == Some(true) || msg.chat.is_forum == Some(true);
    let thread_id = msg.message_thread_id.filter(|_| forum);
    let user_name = from.username.clone().or_else(|| {
        let first = from.first_name.clone()?;
        Some(match &from.last_name {
            Some(last) => format!("{first} {last}"),
            None => first,
        })
    });
    let event = MessageEvent {
        message_id: msg.message_id.to_string(),
        text,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_id: msg.chat.id.to_string(),
            chat_type,
            user_id: from.id.to_string(),
            user_name,
            thread_id: thread_id.map(|t| t.to_string()),
        },
        message_type,
        media,
    };
    Ok(Inbound {
        event,
        chat_id: msg.chat.id,
        message_id: msg.message_id,
        thread_id,
    })
}

/// A press on a choice button: a [`MessageType::Choice`] event whose text
/// is the choice's number, from the chat of the question. Its dedup key is
/// the question's message, so only the first press on a keyboard counts.
fn translate_press(press: CallbackQuery) -> Result<Inbound, Skip> {
    let number = press
        .data
        .as_deref()
        .and_then(|d| d.strip_prefix(CHOICE_DATA))
        .filter(|n| n.parse::<u8>().is_ok())
        .ok_or(Skip::NotAMessage)?
        .to_owned();
    let msg = press.message.ok_or(Skip::NotAMessage)?;
    if press.from.is_bot {
        return Err(Skip::FromBot);
    }
    let chat_type = match msg.chat.kind.as_str() {
        "private" => ChatType::Dm,
        "group" | "supergroup" => ChatType::Group,
        _ => return Err(Skip::Channel),
    };
    let forum = msg.is_topic_message == Some(true) || msg.chat.is_forum == Some(true);
    let thread_id = msg.message_thread_id.filter(|_| forum);
    let from = &press.from;
    let event = MessageEvent {
        message_id: format!("press-{}", press.id),
        text: number,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_id: msg.chat.id.to_string(),
            chat_type,
            user_id: from.id.to_string(),
            user_name: from.username.clone().or_else(|| from.first_name.clone()),
            thread_id: thread_id.map(|t| t.to_string()),
        },
        message_type: MessageType::Choice,
        media: Vec::new(),
    };
    Ok(Inbound {
        event,
        chat_id: msg.chat.id,
        message_id: msg.message_id,
        thread_id,
    })
}

/// The text for the agent, the kind of content and the files to fetch, or
/// `None` for service messages (joins, pins, title changes…) that carry
/// nothing to answer. A photo, voice note, audio file or document becomes a
/// [`MediaRef`] with the caption as the text (SPEC X6); the largest size of
/// a photo is taken. Videos and stickers stay text placeholders.
fn content(msg: &Message) -> Option<(String, MessageType, Vec<MediaRef>)> {
    let caption = msg.caption.clone().unwrap_or_default();
    let with_caption = |label: String| {
        if caption.is_empty() {
            label
        } else {
            format!("{label} {caption}")
        }
    };
    if let Some(text) = msg.text.as_deref() {
        return Some((text.to_owned(), MessageType::Text, Vec::new()));
    }
    if let Some(largest) = msg
        .photo
        .as_deref()
        .and_then(<[File]>::last)
        .filter(|f| !f.file_id.is_empty())
    {
        let mut photo = largest.media(MediaKind::Image);
        photo
            .mime_type
            .get_or_insert_with(|| "image/jpeg".to_owned());
        return Some((caption, MessageType::Photo, vec![photo]));
    }
    if let Some(voice) = fetchable(&msg.voice) {
        return Some((
            caption,
            MessageType::Voice,
            vec![voice.media(MediaKind::Voice)],
        ));
    }
    if let Some(audio) = fetchable(&msg.audio) {
        return Some((
            caption,
            MessageType::Voice,
            vec![audio.media(MediaKind::Audio)],
        ));
    }
    if let Some(doc) = fetchable(&msg.document) {
        return Some((
            caption,
            MessageType::File,
            vec![doc.media(MediaKind::Document)],
        ));
    }
    if msg.video.is_some() {
        return Some((
            with_caption("[The user sent a video, which this bot cannot watch]".into()),
            MessageType::File,
            Vec::new(),
        ));
    }
    if let Some(sticker) = &msg.sticker {
        let label = match &sticker.emoji {
            Some(e) => format!("[sticker {e}]"),
            None => "[sticker]".to_owned(),
        };
        return Some((label, MessageType::Photo, Vec::new()));
    }
    None
}

/// A file Telegram gave an id for (there is nothing to fetch otherwise).
fn fetchable(file: &Option<File>) -> Option<&File> {
    file.as_ref().filter(|f| !f.file_id.is_empty())
}

/// `@botname` as a whole word (case-insensitive), or a text mention of the bot.
fn mentions(msg: &Message, text: &str, bot: &BotIdentity) -> bool {
    let entities = msg
        .entities
        .iter()
        .chain(msg.caption_entities.iter())
        .flatten();
    if entities
        .into_iter()
        .any(|e| e.kind == "text_mention" && e.user.as_ref().is_some_and(|u| u.id == bot.id))
    {
        return true;
    }
    let Some(name) = bot.username.as_deref() else {
        return false;
    };
    let needle = format!("@{}", name.to_lowercase());
    let hay = text.to_lowercase();
    hay.match_indices(&needle).any(|(i, _)| {
        let next = hay[i..][needle.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// A reply to one of the bot's messages. In forum topics every message
/// "replies" to the topic's first message; that is not a reply to the bot.
fn replies_to_bot(msg: &Message, bot: &BotIdentity) -> bool {
    let Some(parent) = msg.reply_to_message.as_deref() else {
        return false;
    };
    if is_topic_root(msg, parent) {
        return false;
    }
    parent.from.as_ref().is_some_and(|u| u.id == bot.id)
}

/// In forum topics every message "replies" to the topic's first message:
/// that is no reply at all.
fn is_topic_root(msg: &Message, parent: &Message) -> bool {
    msg.is_topic_message == Some(true) && Some(parent.message_id) == msg.message_thread_id
}

/// Remembers the last `capacity` `(chat, message_id)` pairs (SPEC G7), with
/// each message's forum topic so a reply lands in the same topic.
#[derive(Debug)]
pub(crate) struct Recent {
    seen: HashMap<(i64, i64), Option<i64>>,
    order: VecDeque<(i64, i64)>,
    capacity: usize,
}

impl Recent {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            seen: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// `true` the first time a key is seen within the window.
    pub(crate) fn first_time(&mut self, key: (i64, i64), thread: Option<i64>) -> bool {
        if self.seen.contains_key(&key) {
            return false;
        }
        self.seen.insert(key, thread);
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    /// The forum topic of a remembered message.
    pub(crate) fn thread_of(&self, key: (i64, i64)) -> Option<i64> {
        self.seen.get(&key).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn bot() -> BotIdentity {
        BotIdentity {
            id: 42,
            username: Some("HermesBot".into()),
        }
    }

    fn group_msg(extra: serde_json::Value) -> Update {
        let mut m = json!({
            "message_id": 7, "from": {"id": 5, "is_bot": false, "first_name": "Ann"},
            "chat": {"id": -100, "type": "supergroup"}, "text": "hello"
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        serde_json::from_value(json!({"update_id": 1, "message": m})).unwrap()
    }

    #[test]
    fn dm_text_translates() {
        let u: Update = serde_json::from_value(json!({"update_id": 3, "message": {
            "message_id": 9, "from": {"id": 5, "username": "ann"}, "chat": {"id": 5, "type": "private"}, "text": "hi"
        }}))
        .unwrap();
        let got = translate(u, &bot(), &GroupPolicy::default()).unwrap().event;
        assert_eq!(got.text, "hi");
        assert_eq!(got.message_id, "9");
        assert_eq!(got.source.chat_type, ChatType::Dm);
        assert_eq!(got.source.user_id, "5");
        assert_eq!(got.source.user_name.as_deref(), Some("ann"));
    }

    #[test]
    fn group_triggers() {
        let p = GroupPolicy::default();
        assert_eq!(
            translate(group_msg(json!({})), &bot(), &p).unwrap_err(),
            Skip::NotAddressed
        );
        assert!(translate(group_msg(json!({"text": "hey @hermesbot!"})), &bot(), &p).is_ok());
        assert_eq!(
            translate(group_msg(json!({"text": "hey @HermesBotX"})), &bot(), &p).unwrap_err(),
            Skip::NotAddressed
        );
        let reply = json!({"reply_to_message": {"message_id": 1, "from": {"id": 42, "is_bot": true}, "chat": {"id": -100, "type": "supergroup"}}});
        assert!(translate(group_msg(reply), &bot(), &p).is_ok());
        let cmd = translate(group_msg(json!({"text": "/new@HermesBot now"})), &bot(), &p).unwrap();
        assert_eq!(cmd.event.text, "/new now");
        assert_eq!(
            translate(group_msg(json!({"text": "/new@OtherBot"})), &bot(), &p).unwrap_err(),
            Skip::OtherBotsCommand
        );
        let all = GroupPolicy {
            respond_to_all: true,
            ..GroupPolicy::default()
        };
        assert!(translate(group_msg(json!({})), &bot(), &all).is_ok());
        let no_cmd = GroupPolicy {
            on_command: false,
            ..GroupPolicy::default()
        };
        assert!(translate(group_msg(json!({"text": "/status"})), &bot(), &no_cmd).is_err());
    }

    #[test]
    fn ignores_bots_channels_and_service_messages() {
        let p = GroupPolicy {
            respond_to_all: true,
            ..GroupPolicy::default()
        };
        let from_bot = group_msg(json!({"from": {"id": 8, "is_bot": true}}));
        assert_eq!(translate(from_bot, &bot(), &p).unwrap_err(), Skip::FromBot);
        let service = group_msg(json!({"text": null, "new_chat_members": [{"id": 3}]}));
        assert_eq!(translate(service, &bot(), &p).unwrap_err(), Skip::Service);
        let chan: Update = serde_json::from_value(json!({"update_id": 1, "channel_post": {
            "message_id": 1, "chat": {"id": -5, "type": "channel"}, "text": "x"}}))
        .unwrap();
        assert_eq!(translate(chan, &bot(), &p).unwrap_err(), Skip::NotAMessage);
        let edited: Update = serde_json::from_value(json!({"update_id": 1, "edited_message": {
            "message_id": 1, "from": {"id": 5}, "chat": {"id": 5, "type": "private"}, "text": "x"}})).unwrap();
        assert_eq!(
            translate(edited, &bot(), &p).unwrap_err(),
            Skip::NotAMessage
        );
    }

    #[test]
    fn media_placeholders_and_forum_threads() {
        let p = GroupPolicy {
            respond_to_all: true,
            ..GroupPolicy::default()
        };
        let photo = group_msg(json!({"text": null, "caption": "look", "photo": [
            {"file_id": "small", "file_size": 900, "width": 90, "height": 90},
            {"file_id": "large", "file_size": 60000, "width": 1280, "height": 960}]}));
        let got = translate(photo, &bot(), &p).unwrap().event;
        assert_eq!(
            (got.text.as_str(), got.message_type),
            ("look", MessageType::Photo)
        );
        assert_eq!(
            got.media,
            [MediaRef {
                kind: MediaKind::Image,
                handle: "large".into(),
                file_name: None,
                mime_type: Some("image/jpeg".into()),
                size: Some(60000),
            }]
        );
        let voice = group_msg(json!({"text": null,
            "voice": {"file_id": "v", "mime_type": "audio/ogg", "duration": 3, "file_size": 5000}}));
        let got = translate(voice, &bot(), &p).unwrap().event;
        assert_eq!(
            (got.text.as_str(), got.message_type),
            ("", MessageType::Voice)
        );
        assert_eq!(got.media[0].kind, MediaKind::Voice);
        assert_eq!(got.media[0].mime_type.as_deref(), Some("audio/ogg"));
        let doc = group_msg(json!({"text": null,
            "document": {"file_id": "d", "file_name": "a.pdf", "mime_type": "application/pdf"}}));
        let got = translate(doc, &bot(), &p).unwrap().event;
        assert_eq!(got.media[0].kind, MediaKind::Document);
        assert_eq!(got.media[0].file_name.as_deref(), Some("a.pdf"));
        let video = group_msg(json!({"text": null, "video": {"file_id": "x"}, "caption": "lol"}));
        let got = translate(video, &bot(), &p).unwrap().event;
        assert!(
            got.text.contains("video") && got.text.ends_with("lol"),
            "{}",
            got.text
        );
        assert!(got.media.is_empty());
        let topic = group_msg(json!({"message_thread_id": 77, "is_topic_message": true}));
        let got = translate(topic, &bot(), &p).unwrap();
        assert_eq!(got.event.source.thread_id.as_deref(), Some("77"));
        // A reply thread in a non-forum group is not a topic.
        let plain = group_msg(json!({"message_thread_id": 3}));
        assert_eq!(
            translate(plain, &bot(), &p).unwrap().event.source.thread_id,
            None
        );
    }

    #[test]
    fn dedup_window_is_bounded() {
        let mut d = Recent::new(2);
        assert!(d.first_time((1, 1), Some(9)));
        assert!(!d.first_time((1, 1), None));
        assert_eq!(d.thread_of((1, 1)), Some(9));
        assert!(d.first_time((2, 1), None));
        assert!(d.first_time((1, 2), None));
        assert!(d.first_time((1, 1), None), "evicted from the window");
    }
}
