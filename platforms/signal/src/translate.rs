//! One item of a `receive` result (`{"envelope": …, "account": …}`, as
//! signal-cli's `JsonReceiveMessageHandler` writes it) → a [`MessageEvent`],
//! or the reason it is not one. Pure: the rules are tested without a daemon.

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource, with_quote,
};
use serde_json::{Value, json};

use crate::PLATFORM;

/// The prefix of a group's chat id (`group.<base64 groupId>`): numbers and
/// UUIDs are DMs.
pub const GROUP_PREFIX: &str = "group.";

/// Who the bot is, for mentions and for its own messages.
pub struct Me<'a> {
    /// The account's number.
    pub number: &'a str,
    /// The account's UUID, once the daemon told it.
    pub uuid: Option<&'a str>,
    /// Groups answer only messages that mention the bot.
    pub require_mention: bool,
    /// The allowed users: the sender is named the way this list names them.
    pub allowed: &'a dyn Fn(&str) -> bool,
}

impl std::fmt::Debug for Me<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Me")
            .field("number", &self.number)
            .field("uuid", &self.uuid)
            .finish_non_exhaustive()
    }
}

impl Me<'_> {
    fn is_me(&self, number: Option<&str>, uuid: Option<&str>) -> bool {
        number == Some(self.number) || (uuid.is_some() && uuid == self.uuid)
    }
}

/// What a `receive` item turned out to be.
#[derive(Debug, PartialEq)]
pub enum Inbound {
    /// A message for the runner.
    Message(Box<MessageEvent>),
    /// Nothing to answer; the reason, for the debug log.
    Skip(&'static str),
    /// An envelope of a kind this adapter does not know (a newer signal-cli
    /// or Signal feature): ignored, with one log line naming its parts.
    Unknown(String),
    /// signal-cli could not read the envelope (`exception`: an untrusted
    /// identity, a message that did not decrypt); said in the log.
    Failed {
        /// Who sent it, if known.
        source: String,
        /// signal-cli's exception type and message.
        error: String,
    },
}

/// The fields every envelope has, whatever it carries (signal-cli's
/// `JsonMessageEnvelope`).
const ENVELOPE_FIELDS: &[&str] = &[
    "source",
    "sourceNumber",
    "sourceUuid",
    "sourceName",
    "sourceDevice",
    "timestamp",
    "serverReceivedTimestamp",
    "serverDeliveredTimestamp",
];

fn str_at<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The text with each mention's placeholder (U+FFFC) replaced by `@` and
/// the number or UUID it names; the bot's own mention is dropped.
fn render_mentions(text: &str, mentions: &[Value], me: &Me<'_>) -> String {
    let mut sorted: Vec<&Value> = mentions.iter().collect();
    sorted.sort_by_key(|m| m.get("start").and_then(Value::as_u64).unwrap_or(0));
    let mut names = sorted.into_iter().map(|m| {
        let number = m.get("number").and_then(Value::as_str);
        let uuid = m.get("uuid").and_then(Value::as_str);
        if me.is_me(number, uuid) {
            String::new()
        } else {
            format!("@{}", number.or(uuid).unwrap_or("someone"))
        }
    });
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{FFFC}' {
            out.push_str(&names.next().unwrap_or_default());
        } else {
            out.push(c);
        }
    }
    out.replace("  ", " ").trim().to_owned()
}

fn media_kind(content_type: &str, file_name: Option<&str>) -> MediaKind {
    if content_type.starts_with("image/") {
        MediaKind::Image
    } else if content_type.starts_with("audio/") {
        // Signal's voice notes come without a file name.
        if file_name.is_none() {
            MediaKind::Voice
        } else {
            MediaKind::Audio
        }
    } else {
        MediaKind::Document
    }
}

/// The handle [`crate::SignalAdapter::fetch_media`] reads: the attachment's
/// id and where it came from (`getAttachment` needs the sender or group).
pub fn media_handle(id: &str, chat_id: &str) -> String {
    json!({ "id": id, "chat": chat_id }).to_string()
}

/// The message id the runner keeps: the sender's timestamp (Signal's id of
/// a message) and its author, which a reply's quote needs.
pub fn message_id(timestamp: u64, author: &str) -> String {
    format!("{timestamp}:{author}")
}

/// The timestamp and author of a [`message_id`].
pub fn parse_message_id(id: &str) -> Option<(u64, &str)> {
    let (ts, author) = id.split_once(':')?;
    if author.is_empty() {
        return None;
    }
    Some((ts.parse().ok()?, author))
}

/// Translates one `receive` item.
pub fn translate(item: &Value, me: &Me<'_>) -> Inbound {
    let env = item.get("envelope").unwrap_or(&Value::Null);
    let number = str_at(env, "/sourceNumber");
    let uuid = str_at(env, "/sourceUuid");
    let legacy = str_at(env, "/source");
    if let Some(exception) = item.get("exception") {
        return Inbound::Failed {
            source: number.or(uuid).or(legacy).unwrap_or("unknown").to_owned(),
            error: format!(
                "{}: {}",
                str_at(exception, "/type").unwrap_or("error"),
                str_at(exception, "/message").unwrap_or("")
            ),
        };
    }
    if env.get("syncMessage").is_some() {
        return Inbound::Skip("a sync message (the bot's own account on another device)");
    }
    if env.get("typingMessage").is_some() {
        return Inbound::Skip("a typing notice");
    }
    if env.get("receiptMessage").is_some() {
        return Inbound::Skip("a receipt");
    }
    if env.get("callMessage").is_some() {
        return Inbound::Skip("a call");
    }
    if env.get("storyMessage").is_some() {
        return Inbound::Skip("a story");
    }
    if env.get("editMessage").is_some() {
        return Inbound::Skip("an edit of an earlier message");
    }
    let Some(data) = env.get("dataMessage") else {
        // The envelope's own fields (who, when, from which device) are not
        // a kind; whatever else it carries is.
        let kinds: Vec<&str> = env
            .as_object()
            .map(|o| {
                o.keys()
                    .map(String::as_str)
                    .filter(|k| !ENVELOPE_FIELDS.contains(k))
                    .collect()
            })
            .unwrap_or_default();
        if kinds.is_empty() {
            return Inbound::Skip("an envelope without a message");
        }
        return Inbound::Unknown(kinds.join(", "));
    };
    if me.is_me(number, uuid) {
        return Inbound::Skip("the bot's own message");
    }
    // The sender as the allow-list names them: by UUID when the list has
    // the UUID, else by number (or the UUID when the number is hidden).
    let sender = match (number, uuid) {
        (_, Some(u)) if (me.allowed)(u) => u,
        (Some(n), _) => n,
        (None, Some(u)) => u,
        (None, None) => match legacy {
            Some(l) => l,
            None => return Inbound::Skip("a message without a sender"),
        },
    };
    if data.get("reaction").is_some() {
        return Inbound::Skip("a reaction");
    }
    if data.get("remoteDelete").is_some() {
        return Inbound::Skip("a deletion");
    }
    if data.get("pollVote").is_some() || data.get("pollTerminate").is_some() {
        return Inbound::Skip("a poll vote");
    }
    let group = str_at(data, "/groupInfo/groupId");
    let chat_id = match group {
        Some(g) => format!("{GROUP_PREFIX}{g}"),
        None => sender.to_owned(),
    };
    let mentions = data
        .get("mentions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let quote = data.get("quote").filter(|q| !q.is_null());
    if group.is_some() && me.require_mention {
        let mentioned = mentions.iter().any(|m| {
            me.is_me(
                m.get("number").and_then(Value::as_str),
                m.get("uuid").and_then(Value::as_str),
            )
        });
        let replied =
            quote.is_some_and(|q| me.is_me(str_at(q, "/authorNumber"), str_at(q, "/authorUuid")));
        if !mentioned && !replied {
            return Inbound::Skip("a group message that does not mention the bot");
        }
    }
    let body = data.get("message").and_then(Value::as_str).unwrap_or("");
    let mut text = render_mentions(body, mentions, me);
    let mut media = Vec::new();
    for a in data
        .get("attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(id) = str_at(a, "/id") else { continue };
        let content_type = str_at(a, "/contentType").unwrap_or("application/octet-stream");
        let file_name = str_at(a, "/filename");
        media.push(MediaRef {
            kind: media_kind(content_type, file_name),
            handle: media_handle(id, &chat_id),
            file_name: file_name.map(str::to_owned),
            mime_type: Some(content_type.to_owned()),
            size: a.get("size").and_then(Value::as_u64),
        });
    }
    if data.get("sticker").is_some_and(|s| !s.is_null()) {
        text = if text.is_empty() {
            "[sticker]".to_owned()
        } else {
            format!("{text}\n[sticker]")
        };
    }
    if let Some(contacts) = data
        .get("contacts")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    {
        let names: Vec<String> = contacts
            .iter()
            .map(|c| {
                let name = str_at(c, "/name/nickname")
                    .or(str_at(c, "/name/given"))
                    .or(str_at(c, "/name/display"))
                    .unwrap_or("a contact");
                let phone = str_at(c, "/phone/0/value").unwrap_or("");
                format!("{name} {phone}").trim().to_owned()
            })
            .collect();
        let shared = format!("[shared contact: {}]", names.join(", "));
        text = if text.is_empty() {
            shared
        } else {
            format!("{text}\n{shared}")
        };
    }
    if text.is_empty() && media.is_empty() {
        return Inbound::Skip("a message with nothing the gateway can use");
    }
    if let Some(quoted) = quote.and_then(|q| q.get("text")).and_then(Value::as_str) {
        text = with_quote(&text, quoted);
    }
    let message_type = match (text.is_empty(), media.first().map(|m| m.kind)) {
        (_, None) => MessageType::Text,
        (true, Some(MediaKind::Image)) if media.len() == 1 => MessageType::Photo,
        (true, Some(MediaKind::Voice)) if media.len() == 1 => MessageType::Voice,
        (true, Some(_)) if media.len() == 1 => MessageType::File,
        _ => MessageType::Mixed,
    };
    let timestamp = data
        .get("timestamp")
        .and_then(Value::as_u64)
        .or_else(|| env.get("timestamp").and_then(Value::as_u64))
        .unwrap_or(0);
    Inbound::Message(Box::new(MessageEvent {
        message_id: message_id(timestamp, sender),
        text,
        source: SessionSource {
            platform: PLATFORM.to_owned(),
            chat_id,
            chat_type: if group.is_some() {
                ChatType::Group
            } else {
                ChatType::Dm
            },
            user_id: sender.to_owned(),
            user_name: str_at(env, "/sourceName").map(str::to_owned),
            thread_id: None,
        },
        message_type,
        media,
    }))
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
