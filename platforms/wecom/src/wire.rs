//! WeCom AI-bot frames: parsing what the server sends, building what we send.
//!
//! Every frame is one JSON text message `{cmd?, headers: {req_id}, body?,
//! errcode?, errmsg?}`. Frames without `cmd` are acknowledgements, matched to
//! the request by `headers.req_id`. This module is pure: `parse_frame` takes
//! the text of one frame and the builders return the text to send, so the
//! formats can be tested (and fuzzed) without a socket. The formats follow
//! WeCom's official SDK (`wecom-aibot-python-sdk`, `aibot/ws.py` and
//! `aibot/client.py`).

// Numbers here come from the outside (a provider, a platform, a header):
// arithmetic on them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use serde::Deserialize;
use serde_json::{Value, json};

use hermes_platform_kit::event::{ChatType, MediaKind, MediaRef, MessageType};

/// Client → server: authenticate with bot id and secret.
pub const CMD_SUBSCRIBE: &str = "aibot_subscribe";
/// Client → server: application-level heartbeat.
pub const CMD_PING: &str = "ping";
/// Client → server: reply to a message callback (uses the callback's `req_id`).
pub const CMD_RESPOND: &str = "aibot_respond_msg";
/// Client → server: welcome reply to an `enter_chat` event (the event's `req_id`).
pub const CMD_RESPOND_WELCOME: &str = "aibot_respond_welcome_msg";
/// Client → server: proactive message (fresh `req_id`, `chatid` in the body).
pub const CMD_SEND: &str = "aibot_send_msg";
/// Client → server: announce a file upload (name, size, chunk count, MD5);
/// the ack's body carries the `upload_id`.
pub const CMD_UPLOAD_INIT: &str = "aibot_upload_media_init";
/// Client → server: one base64 chunk (at most [`UPLOAD_CHUNK_BYTES`] raw bytes).
pub const CMD_UPLOAD_CHUNK: &str = "aibot_upload_media_chunk";
/// Client → server: finish an upload; the ack's body carries the `media_id`.
pub const CMD_UPLOAD_FINISH: &str = "aibot_upload_media_finish";
/// The largest raw chunk of an upload.
pub const UPLOAD_CHUNK_BYTES: usize = 512 * 1024;
/// The most chunks one upload may have.
pub const UPLOAD_MAX_CHUNKS: usize = 100;
/// Server → client: a user message.
pub const CMD_MSG_CALLBACK: &str = "aibot_msg_callback";
/// Server → client: an event (`enter_chat`, `disconnected_event`, …).
pub const CMD_EVENT_CALLBACK: &str = "aibot_event_callback";

/// Why a frame could not be understood. The connection keeps going: one bad
/// frame is logged and skipped, never a reason to drop the socket.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    /// A callback without the fields every callback has.
    #[error("{cmd} frame is missing {field}")]
    Missing {
        /// The frame's command.
        cmd: &'static str,
        /// The missing field.
        field: &'static str,
    },
}

/// One frame from the server, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inbound {
    /// An acknowledgement (subscribe, ping, reply, send, upload): no `cmd`.
    Ack {
        /// The request it answers.
        req_id: String,
        /// `0` is success.
        errcode: i64,
        /// The server's message.
        errmsg: String,
        /// What the answer carries (an upload's `upload_id` or `media_id`);
        /// `Null` when it has no body.
        body: Value,
    },
    /// A user message (`aibot_msg_callback`).
    Message {
        /// The callback's own `req_id`: replies must reuse it.
        req_id: String,
        /// The parsed message.
        message: CallbackMessage,
    },
    /// An event (`aibot_event_callback`).
    Event {
        /// The event's `req_id` (a welcome reply reuses it).
        req_id: String,
        /// The event's `msgid`, if it has one (dedup key).
        msgid: Option<String>,
        /// What happened.
        event: EventKind,
        /// The chat the event is about.
        chat_id: Option<String>,
    },
    /// A command this adapter does not handle.
    Other {
        /// The command.
        cmd: String,
    },
}

/// Events the adapter acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A user opened the chat with the bot (first time that day).
    EnterChat,
    /// A newer connection for this bot took over; this one is finished.
    Disconnected,
    /// Any other event type (template card clicks, feedback, …).
    Other(String),
}

/// A user message, already rendered to text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackMessage {
    /// WeCom's message id (dedup key).
    pub msgid: String,
    /// Direct message or group.
    pub chat_type: ChatType,
    /// The group's `chatid`, or the sender's user id for direct messages
    /// (WeCom addresses a single chat by the user id).
    pub chat_id: String,
    /// The sender's user id.
    pub user_id: String,
    /// The text for the agent (placeholders for non-text content, the quoted
    /// message first, the leading @-mention of the bot stripped in groups).
    pub text: String,
    /// The content kind.
    pub message_type: MessageType,
    /// Images and files to download (SPEC X6): each handle is
    /// [`MediaHandle`] as JSON — the encrypted file's URL and its AES key.
    pub media: Vec<MediaRef>,
}

/// What an AI-bot image or file message carries to download it: a URL of
/// the AES-256-CBC encrypted file and its key (base64), which decrypts it
/// ([`crate::wecom::media`]). Stored as the [`MediaRef::handle`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct MediaHandle {
    /// Where the encrypted file is.
    pub url: String,
    /// Its key, base64 (WeCom leaves out the padding).
    #[serde(default)]
    pub aeskey: String,
}

#[derive(Debug, Default, Deserialize)]
struct Headers {
    #[serde(default)]
    req_id: String,
}

#[derive(Debug, Deserialize)]
struct RawFrame {
    #[serde(default)]
    cmd: Option<String>,
    #[serde(default)]
    headers: Headers,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    errcode: Option<i64>,
    #[serde(default)]
    errmsg: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Content {
    #[serde(default)]
    content: String,
}

#[derive(Debug, Default, Deserialize)]
struct FileInfo {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    aeskey: Option<String>,
}

impl FileInfo {
    /// The medium to fetch, when there is a URL.
    fn media(&self, kind: MediaKind) -> Option<MediaRef> {
        let url = self
            .url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())?;
        let handle = serde_json::to_string(&MediaHandle {
            url: url.to_owned(),
            aeskey: self.aeskey.clone().unwrap_or_default(),
        })
        .ok()?;
        let mut media = MediaRef::new(kind, handle);
        media.file_name = self.name.clone().or_else(|| self.filename.clone());
        Some(media)
    }
}

#[derive(Debug, Default, Deserialize)]
struct Mixed {
    #[serde(default)]
    msg_item: Vec<Payload>,
}

/// The content part shared by messages, mixed items and quotes.
#[derive(Debug, Default, Deserialize)]
struct Payload {
    #[serde(default)]
    msgtype: String,
    #[serde(default)]
    text: Option<Content>,
    #[serde(default)]
    voice: Option<Content>,
    #[serde(default)]
    image: Option<FileInfo>,
    #[serde(default)]
    file: Option<FileInfo>,
    #[serde(default)]
    mixed: Option<Mixed>,
}

#[derive(Debug, Default, Deserialize)]
struct Sender {
    #[serde(default)]
    userid: String,
}

#[derive(Debug, Deserialize)]
struct CallbackBody {
    #[serde(default)]
    msgid: String,
    #[serde(default)]
    chattype: Option<String>,
    #[serde(default)]
    chatid: Option<String>,
    #[serde(default)]
    from: Sender,
    #[serde(flatten)]
    payload: Payload,
    #[serde(default)]
    quote: Option<Payload>,
}

#[derive(Debug, Default, Deserialize)]
struct EventInfo {
    #[serde(default)]
    eventtype: String,
}

#[derive(Debug, Deserialize)]
struct EventBody {
    #[serde(default)]
    msgid: Option<String>,
    #[serde(default)]
    chatid: Option<String>,
    #[serde(default)]
    from: Sender,
    #[serde(default)]
    event: EventInfo,
}

/// Placeholder for a picture: the agent cannot see it, but must know it came.
pub const IMAGE_PLACEHOLDER: &str = "[The user sent an image]";
/// Placeholder for a voice message WeCom did not transcribe.
pub const VOICE_PLACEHOLDER: &str = "[The user sent a voice message]";

/// Parses one frame's text.
pub fn parse_frame(text: &str) -> Result<Inbound, WireError> {
    let raw: RawFrame = serde_json::from_str(text)?;
    let req_id = raw.headers.req_id;
    let Some(cmd) = raw.cmd else {
        return Ok(Inbound::Ack {
            req_id,
            // A frame with neither cmd nor errcode answers nothing we can
            // judge; treating it as success would hide a protocol change.
            errcode: raw.errcode.unwrap_or(-1),
            errmsg: raw.errmsg.unwrap_or_default(),
            body: raw.body.unwrap_or(Value::Null),
        });
    };
    match cmd.as_str() {
        CMD_MSG_CALLBACK => {
            let body = raw.body.ok_or(WireError::Missing {
                cmd: CMD_MSG_CALLBACK,
                field: "body",
            })?;
            let body: CallbackBody = serde_json::from_value(body)?;
            Ok(Inbound::Message {
                req_id,
                message: render_callback(body)?,
            })
        }
        CMD_EVENT_CALLBACK => {
            let body = raw.body.ok_or(WireError::Missing {
                cmd: CMD_EVENT_CALLBACK,
                field: "body",
            })?;
            let body: EventBody = serde_json::from_value(body)?;
            let event = match body.event.eventtype.as_str() {
                "enter_chat" => EventKind::EnterChat,
                "disconnected_event" => EventKind::Disconnected,
                other => EventKind::Other(other.to_owned()),
            };
            let chat_id = body
                .chatid
                .or_else(|| (!body.from.userid.is_empty()).then_some(body.from.userid));
            Ok(Inbound::Event {
                req_id,
                msgid: body.msgid,
                event,
                chat_id,
            })
        }
        _ => Ok(Inbound::Other { cmd }),
    }
}

fn render_callback(body: CallbackBody) -> Result<CallbackMessage, WireError> {
    if body.msgid.is_empty() {
        return Err(WireError::Missing {
            cmd: CMD_MSG_CALLBACK,
            field: "msgid",
        });
    }
    if body.from.userid.is_empty() {
        return Err(WireError::Missing {
            cmd: CMD_MSG_CALLBACK,
            field: "from.userid",
        });
    }
    let chat_type = match body.chattype.as_deref() {
        Some("group") => ChatType::Group,
        _ => ChatType::Dm,
    };
    let chat_id = match chat_type {
        ChatType::Group => body
            .chatid
            .filter(|c| !c.is_empty())
            .ok_or(WireError::Missing {
                cmd: CMD_MSG_CALLBACK,
                field: "chatid",
            })?,
        ChatType::Dm => body.from.userid.clone(),
    };
    let (mut text, message_type, media) = render_payload(&body.payload);
    if chat_type == ChatType::Group {
        text = strip_leading_mention(&text).to_owned();
    }
    if let Some(quote) = &body.quote {
        // A quoted image or file is named, not fetched again.
        let (quoted, _, quoted_media) = render_payload(quote);
        let quoted = if quoted.is_empty() && !quoted_media.is_empty() {
            placeholder(&quote.msgtype, quote.file.as_ref())
        } else {
            quoted
        };
        text = hermes_platform_kit::event::with_quote(&text, &quoted);
    }
    Ok(CallbackMessage {
        msgid: body.msgid,
        chat_type,
        chat_id,
        user_id: body.from.userid,
        text,
        message_type,
        media,
    })
}

/// The text of an image or file that is not fetched.
fn placeholder(msgtype: &str, file: Option<&FileInfo>) -> String {
    if msgtype == "image" {
        return IMAGE_PLACEHOLDER.to_owned();
    }
    let name = file.and_then(|f| f.name.clone().or_else(|| f.filename.clone()));
    match name {
        Some(n) if !n.is_empty() => format!("[The user sent a file: {n}]"),
        _ => "[The user sent a file]".to_owned(),
    }
}

/// Renders content to text and the media to fetch: images and files with a
/// URL become media (their caption, if any, is the text); anything else
/// becomes a clear placeholder.
fn render_payload(p: &Payload) -> (String, MessageType, Vec<MediaRef>) {
    match p.msgtype.as_str() {
        "text" => (
            p.text
                .as_ref()
                .map(|t| t.content.clone())
                .unwrap_or_default(),
            MessageType::Text,
            Vec::new(),
        ),
        "voice" => {
            // WeCom transcribes voice itself and sends the text.
            let content = p.voice.as_ref().map(|v| v.content.trim()).unwrap_or("");
            let text = if content.is_empty() {
                VOICE_PLACEHOLDER.to_owned()
            } else {
                content.to_owned()
            };
            (text, MessageType::Voice, Vec::new())
        }
        "image" => match p.image.as_ref().and_then(|i| i.media(MediaKind::Image)) {
            Some(m) => (String::new(), MessageType::Photo, vec![m]),
            None => (IMAGE_PLACEHOLDER.to_owned(), MessageType::Photo, Vec::new()),
        },
        "file" => match p.file.as_ref().and_then(|f| f.media(MediaKind::Document)) {
            Some(m) => (String::new(), MessageType::File, vec![m]),
            None => (
                placeholder("file", p.file.as_ref()),
                MessageType::File,
                Vec::new(),
            ),
        },
        "mixed" => {
            let items = p
                .mixed
                .as_ref()
                .map(|m| m.msg_item.as_slice())
                .unwrap_or(&[]);
            let mut parts = Vec::new();
            let mut media = Vec::new();
            for item in items {
                let (text, _, m) = render_payload(item);
                if !text.is_empty() {
                    parts.push(text);
                }
                media.extend(m);
            }
            (parts.join("\n"), MessageType::Mixed, media)
        }
        "" => (
            "[The user sent a message without content]".to_owned(),
            MessageType::Mixed,
            Vec::new(),
        ),
        other => (
            format!("[The user sent a {other} message, which this bot cannot read]"),
            MessageType::Mixed,
            Vec::new(),
        ),
    }
}

/// Strips one leading `@name` (the bot: group messages reach the bot only
/// when it is mentioned) and the whitespace after it. WeCom puts U+2005 (four-
/// per-em space) after a mention; `char::is_whitespace` covers it.
pub fn strip_leading_mention(text: &str) -> &str {
    let trimmed = text.trim_start();
    let Some(rest) = trimmed.strip_prefix('@') else {
        return text;
    };
    match rest.find(char::is_whitespace) {
        Some(end) => rest[end..].trim_start(),
        None => "",
    }
}

fn frame(cmd: &str, req_id: &str, body: Option<Value>) -> String {
    let mut v = json!({ "cmd": cmd, "headers": { "req_id": req_id } });
    if let (Some(body), Some(obj)) = (body, v.as_object_mut()) {
        obj.insert("body".to_owned(), body);
    }
    v.to_string()
}

/// `aibot_subscribe`. The result holds the secret: never log it.
pub fn subscribe(req_id: &str, bot_id: &str, secret: &str) -> String {
    frame(
        CMD_SUBSCRIBE,
        req_id,
        Some(json!({ "bot_id": bot_id, "secret": secret })),
    )
}

/// `ping` (no body).
pub fn ping(req_id: &str) -> String {
    frame(CMD_PING, req_id, None)
}

/// `aibot_respond_msg` with a markdown body, reusing the callback's `req_id`.
pub fn respond_markdown(req_id: &str, content: &str) -> String {
    frame(
        CMD_RESPOND,
        req_id,
        Some(json!({ "msgtype": "markdown", "markdown": { "content": content } })),
    )
}

/// WeCom's limit for one stream frame's content, in UTF-8 bytes.
pub const MAX_STREAM_BYTES: usize = 20480;

/// `aibot_respond_msg` with a `stream` body, reusing the callback's
/// `req_id`: `content` is the whole reply so far (each frame replaces the
/// previous one), `finish` ends it — as the SDKs' `replyStream` sends it.
pub fn respond_stream(req_id: &str, stream_id: &str, content: &str, finish: bool) -> String {
    frame(
        CMD_RESPOND,
        req_id,
        Some(json!({
            "msgtype": "stream",
            "stream": { "id": stream_id, "finish": finish, "content": content },
        })),
    )
}

/// `aibot_send_msg`: a proactive markdown message to `chat_id`.
pub fn send_markdown(req_id: &str, chat_id: &str, content: &str) -> String {
    frame(
        CMD_SEND,
        req_id,
        Some(json!({
            "chatid": chat_id,
            "msgtype": "markdown",
            "markdown": { "content": content },
        })),
    )
}

/// `aibot_upload_media_init` for a file of `total_size` bytes in
/// `total_chunks` chunks with the MD5 `md5_hex`.
pub fn upload_init(
    req_id: &str,
    file_name: &str,
    total_size: usize,
    total_chunks: usize,
    md5_hex: &str,
) -> String {
    frame(
        CMD_UPLOAD_INIT,
        req_id,
        Some(json!({
            "type": "file",
            "filename": file_name,
            "total_size": total_size,
            "total_chunks": total_chunks,
            "md5": md5_hex,
        })),
    )
}

/// `aibot_upload_media_chunk`: chunk `index` (0-based), base64-encoded.
pub fn upload_chunk(req_id: &str, upload_id: &str, index: usize, base64_data: &str) -> String {
    frame(
        CMD_UPLOAD_CHUNK,
        req_id,
        Some(json!({
            "upload_id": upload_id,
            "chunk_index": index,
            "base64_data": base64_data,
        })),
    )
}

/// `aibot_upload_media_finish`.
pub fn upload_finish(req_id: &str, upload_id: &str) -> String {
    frame(
        CMD_UPLOAD_FINISH,
        req_id,
        Some(json!({ "upload_id": upload_id })),
    )
}

/// `aibot_send_msg`: the uploaded file `media_id` to `chat_id`.
pub fn send_file(req_id: &str, chat_id: &str, media_id: &str) -> String {
    frame(
        CMD_SEND,
        req_id,
        Some(json!({
            "chatid": chat_id,
            "msgtype": "file",
            "file": { "media_id": media_id },
        })),
    )
}

/// `aibot_respond_welcome_msg` with a text body, reusing the event's `req_id`.
pub fn welcome_text(req_id: &str, content: &str) -> String {
    frame(
        CMD_RESPOND_WELCOME,
        req_id,
        Some(json!({ "msgtype": "text", "text": { "content": content } })),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn callback(body: Value) -> String {
        json!({"cmd": "aibot_msg_callback", "headers": {"req_id": "r1"}, "body": body}).to_string()
    }

    #[test]
    fn ack_without_cmd() {
        let f =
            parse_frame(r#"{"headers":{"req_id":"aibot_subscribe_1"},"errcode":0,"errmsg":"ok"}"#)
                .unwrap();
        assert_eq!(
            f,
            Inbound::Ack {
                req_id: "aibot_subscribe_1".into(),
                errcode: 0,
                errmsg: "ok".into(),
                body: Value::Null,
            }
        );
    }

    #[test]
    fn dm_text() {
        let f = parse_frame(&callback(json!({
            "msgid": "m1", "aibotid": "b", "chattype": "single",
            "from": {"userid": "alice"}, "msgtype": "text", "text": {"content": "hi @x"}
        })))
        .unwrap();
        let Inbound::Message { req_id, message } = f else {
            panic!("{f:?}")
        };
        assert_eq!(req_id, "r1");
        assert_eq!(message.chat_type, ChatType::Dm);
        assert_eq!(message.chat_id, "alice");
        assert_eq!(message.text, "hi @x");
    }

    #[test]
    fn group_strips_mention_and_quotes() {
        let f = parse_frame(&callback(json!({
            "msgid": "m2", "chattype": "group", "chatid": "g1",
            "from": {"userid": "bob"}, "msgtype": "text",
            "text": {"content": "@Hermes\u{2005}what is this?"},
            "quote": {"msgtype": "text", "text": {"content": "old line"}}
        })))
        .unwrap();
        let Inbound::Message { message, .. } = f else {
            panic!()
        };
        assert_eq!(message.chat_id, "g1");
        assert_eq!(message.text, "> old line\n\nwhat is this?");
    }

    #[test]
    fn group_without_chatid_is_an_error() {
        let err = parse_frame(&callback(json!({
            "msgid": "m", "chattype": "group", "from": {"userid": "u"},
            "msgtype": "text", "text": {"content": "x"}
        })))
        .unwrap_err();
        assert!(err.to_string().contains("chatid"));
    }

    #[test]
    fn images_and_files_become_media_with_their_url_and_key() {
        let f = parse_frame(&callback(json!({
            "msgid": "m", "chattype": "single", "from": {"userid": "u"},
            "msgtype": "mixed", "mixed": {"msg_item": [
                {"msgtype": "text", "text": {"content": "what is this"}},
                {"msgtype": "image", "image": {"url": "https://x/1", "aeskey": "K1"}}]}
        })))
        .unwrap();
        let Inbound::Message { message, .. } = f else {
            panic!()
        };
        assert_eq!(message.text, "what is this");
        assert_eq!(message.media.len(), 1);
        assert_eq!(message.media[0].kind, MediaKind::Image);
        let handle: MediaHandle = serde_json::from_str(&message.media[0].handle).unwrap();
        assert_eq!(
            handle,
            MediaHandle {
                url: "https://x/1".into(),
                aeskey: "K1".into()
            }
        );
        let f = parse_frame(&callback(json!({
            "msgid": "m2", "chattype": "single", "from": {"userid": "u"},
            "msgtype": "file", "file": {"url": "https://x/2", "aeskey": "K2", "filename": "a.pdf"}
        })))
        .unwrap();
        let Inbound::Message { message, .. } = f else {
            panic!()
        };
        assert_eq!(
            (message.text.as_str(), message.message_type),
            ("", MessageType::File)
        );
        assert_eq!(message.media[0].kind, MediaKind::Document);
        assert_eq!(message.media[0].file_name.as_deref(), Some("a.pdf"));
        assert!(
            !format!("{:?}", message.media[0]).contains("K2"),
            "the key is not shown"
        );
    }

    #[test]
    fn placeholders() {
        let cases = [
            (
                json!({"msgtype": "image", "image": {}}),
                IMAGE_PLACEHOLDER.to_owned(),
                MessageType::Photo,
            ),
            (
                json!({"msgtype": "voice", "voice": {"content": "spoken"}}),
                "spoken".to_owned(),
                MessageType::Voice,
            ),
            (
                json!({"msgtype": "file", "file": {}}),
                "[The user sent a file]".to_owned(),
                MessageType::File,
            ),
            (
                json!({"msgtype": "mixed", "mixed": {"msg_item": [
                    {"msgtype": "text", "text": {"content": "look"}},
                    {"msgtype": "image", "image": {}}]}}),
                format!("look\n{IMAGE_PLACEHOLDER}"),
                MessageType::Mixed,
            ),
        ];
        for (content, text, kind) in cases {
            let mut body = json!({"msgid": "m", "chattype": "single", "from": {"userid": "u"}});
            for (k, v) in content.as_object().unwrap() {
                body[k] = v.clone();
            }
            let Inbound::Message { message, .. } = parse_frame(&callback(body)).unwrap() else {
                panic!()
            };
            assert_eq!((message.text, message.message_type), (text, kind));
        }
    }

    #[test]
    fn events() {
        let f = parse_frame(
            &json!({"cmd": "aibot_event_callback", "headers": {"req_id": "e1"},
                "body": {"msgid": "x", "msgtype": "event", "from": {"userid": "u"},
                         "event": {"eventtype": "disconnected_event"}}})
            .to_string(),
        )
        .unwrap();
        assert!(matches!(
            f,
            Inbound::Event {
                event: EventKind::Disconnected,
                ..
            }
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_frame("not json").is_err());
        assert!(parse_frame("[1,2]").is_err());
        assert!(parse_frame(r#"{"cmd":"aibot_msg_callback","headers":{"req_id":"r"}}"#).is_err());
    }

    #[test]
    fn mention_stripping() {
        assert_eq!(strip_leading_mention("@bot hello"), "hello");
        assert_eq!(strip_leading_mention("  @bot\u{2005}hello"), "hello");
        assert_eq!(strip_leading_mention("hello @bot"), "hello @bot");
        assert_eq!(strip_leading_mention("@bot"), "");
    }
}
