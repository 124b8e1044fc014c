//! The XML WeCom sends to a self-built app's callback URL, decoded with
//! `quick-xml`'s serde support (no DTDs, no entity expansion beyond the five
//! predefined ones, so no XXE or "billion laughs").
//!
//! Two layers: the envelope of a POST (`<xml><ToUserName/><Encrypt/>
//! <AgentID/></xml>`) and, inside `Encrypt`, the message itself
//! (`<xml><ToUserName/><FromUserName/><CreateTime/><MsgType/>…</xml>`).
//! Pure: bytes in, typed values out.

// Numbers here come from WeCom (CreateTime, MsgId, AgentID): arithmetic on
// them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use serde::Deserialize;

use hermes_platform_kit::event::{MediaKind, MediaRef, MessageType};

/// Why a callback's XML could not be used. The request is refused (400)
/// and logged; never retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// Not UTF-8.
    #[error("XML is not UTF-8")]
    NotUtf8,
    /// Not well-formed, or not the expected shape.
    #[error("malformed XML: {0}")]
    Malformed(String),
    /// A field every such document has is missing or empty.
    #[error("XML has no {0}")]
    Missing(&'static str),
}

/// The outer document of a POSTed callback.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Envelope {
    /// The corp id the callback is addressed to.
    #[serde(rename = "ToUserName", default)]
    pub to_user_name: String,
    /// The base64 ciphertext of the message document.
    #[serde(rename = "Encrypt", default)]
    pub encrypt: String,
    /// The app's agent id.
    #[serde(rename = "AgentID", default)]
    pub agent_id: Option<String>,
}

/// Every field WeCom documents for a self-built app's inbound messages and
/// events; what a given `MsgType` does not use stays `None`. Unknown fields
/// are ignored, so new WeCom fields do not break parsing.
#[derive(Clone, Debug, Default, Deserialize)]
struct RawMessage {
    #[serde(rename = "ToUserName", default)]
    to_user_name: String,
    #[serde(rename = "FromUserName", default)]
    from_user_name: String,
    #[serde(rename = "CreateTime", default)]
    create_time: Option<String>,
    #[serde(rename = "MsgType", default)]
    msg_type: String,
    #[serde(rename = "Content", default)]
    content: Option<String>,
    #[serde(rename = "MsgId", default)]
    msg_id: Option<String>,
    #[serde(rename = "AgentID", default)]
    agent_id: Option<String>,
    #[serde(rename = "MediaId", default)]
    media_id: Option<String>,
    /// Voice: WeCom's transcription, when speech recognition is enabled.
    #[serde(rename = "Recognition", default)]
    recognition: Option<String>,
    #[serde(rename = "Location_X", default)]
    location_x: Option<String>,
    #[serde(rename = "Location_Y", default)]
    location_y: Option<String>,
    #[serde(rename = "Label", default)]
    label: Option<String>,
    #[serde(rename = "Title", default)]
    title: Option<String>,
    #[serde(rename = "Description", default)]
    description: Option<String>,
    #[serde(rename = "Url", default)]
    url: Option<String>,
    #[serde(rename = "FileName", default)]
    file_name: Option<String>,
    /// Voice: the audio format (`amr`).
    #[serde(rename = "Format", default)]
    format: Option<String>,
    #[serde(rename = "Event", default)]
    event: Option<String>,
}

/// A decrypted callback, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inbound {
    /// A user message for the agent.
    Message(CallbackMessage),
    /// An event (`enter_agent`, `subscribe`, menu clicks, …): acknowledged,
    /// not a message for the agent.
    Event {
        /// The user it concerns.
        user_id: String,
        /// WeCom's event name.
        event: String,
    },
}

/// A user message, rendered to text for the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackMessage {
    /// WeCom's `MsgId` (the dedup key of retried callbacks).
    pub msg_id: String,
    /// The corp id it was sent to.
    pub to_corp: String,
    /// The sender's user id (`FromUserName`).
    pub user_id: String,
    /// The app's agent id, when present.
    pub agent_id: Option<String>,
    /// The text for the agent; non-text content becomes a placeholder.
    pub text: String,
    /// What kind of content it was.
    pub message_type: MessageType,
    /// The media id of an image, voice, video or file (for `media/get`).
    pub media_id: Option<String>,
    /// What the turn downloads (`media/get`) and uses (SPEC X6): the
    /// image, the voice note WeCom did not transcribe, the file.
    pub media: Vec<MediaRef>,
}

/// Placeholder for a picture: the agent cannot see it, but must know it came.
pub const IMAGE_PLACEHOLDER: &str = "[The user sent an image]";
/// Placeholder for a voice message WeCom did not transcribe.
pub const VOICE_PLACEHOLDER: &str = "[The user sent a voice message]";
/// Placeholder for a video.
pub const VIDEO_PLACEHOLDER: &str = "[The user sent a video]";

fn utf8(bytes: &[u8]) -> Result<&str, XmlError> {
    std::str::from_utf8(bytes).map_err(|_| XmlError::NotUtf8)
}

fn malformed(e: quick_xml::DeError) -> XmlError {
    // quick-xml's messages can quote input; keep them short for the log.
    let mut s = e.to_string();
    if s.len() > 200 {
        let end = (0..=200)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(end);
    }
    XmlError::Malformed(s)
}

/// Decodes the envelope of a POST body.
pub fn parse_envelope(body: &[u8]) -> Result<Envelope, XmlError> {
    let env: Envelope = quick_xml::de::from_str(utf8(body)?).map_err(malformed)?;
    if env.encrypt.trim().is_empty() {
        return Err(XmlError::Missing("Encrypt"));
    }
    Ok(env)
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Decodes a decrypted message document.
pub fn parse_message(xml: &[u8]) -> Result<Inbound, XmlError> {
    let raw: RawMessage = quick_xml::de::from_str(utf8(xml)?).map_err(malformed)?;
    let user_id = raw.from_user_name.trim().to_owned();
    if user_id.is_empty() {
        return Err(XmlError::Missing("FromUserName"));
    }
    let msg_type = raw.msg_type.trim().to_ascii_lowercase();
    if msg_type.is_empty() {
        return Err(XmlError::Missing("MsgType"));
    }
    if msg_type == "event" {
        return Ok(Inbound::Event {
            user_id,
            event: non_empty(raw.event).unwrap_or_default(),
        });
    }
    let msg_id = match non_empty(raw.msg_id.clone()) {
        Some(id) => id,
        // Every message type has a MsgId; without one a retried callback
        // could not be told apart, so fall back to sender + time as
        // WeCom's own SDK samples do.
        None => match non_empty(raw.create_time.clone()) {
            Some(t) => format!("{user_id}:{t}"),
            None => return Err(XmlError::Missing("MsgId")),
        },
    };
    let (text, message_type) = render(&msg_type, &raw);
    let media_id = non_empty(raw.media_id.clone());
    let media = media_of(&msg_type, &raw, media_id.as_deref());
    // A medium the turn fetches needs no placeholder: the caption (none,
    // in this mode) is the text.
    let text = if media.is_empty() {
        text
    } else {
        String::new()
    };
    Ok(Inbound::Message(CallbackMessage {
        msg_id,
        to_corp: raw.to_user_name.trim().to_owned(),
        user_id,
        agent_id: non_empty(raw.agent_id),
        text,
        message_type,
        media_id,
        media,
    }))
}

/// The medium of an image, an untranscribed voice note or a file that has a
/// media id; nothing else is fetched (videos stay placeholders).
fn media_of(msg_type: &str, raw: &RawMessage, media_id: Option<&str>) -> Vec<MediaRef> {
    let Some(id) = media_id else {
        return Vec::new();
    };
    let field = |f: &Option<String>| non_empty(f.clone());
    let kind = match msg_type {
        "image" => MediaKind::Image,
        // WeCom's own transcription, when it sends one, is the text.
        "voice" if field(&raw.recognition).is_none() => MediaKind::Voice,
        "file" => MediaKind::Document,
        _ => return Vec::new(),
    };
    let mut media = MediaRef::new(kind, id);
    match kind {
        MediaKind::Voice => {
            let format = field(&raw.format).unwrap_or_else(|| "amr".to_owned());
            media.mime_type = Some(format!("audio/{}", format.to_ascii_lowercase()));
            media.file_name = Some(format!("voice.{}", format.to_ascii_lowercase()));
        }
        MediaKind::Document => {
            media.file_name = field(&raw.file_name).or_else(|| field(&raw.title))
        }
        _ => {}
    }
    vec![media]
}

/// Renders content to text; non-text content becomes a clear placeholder
/// (the same wording as the WebSocket adapter's).
fn render(msg_type: &str, raw: &RawMessage) -> (String, MessageType) {
    let field = |f: &Option<String>| non_empty(f.clone());
    match msg_type {
        "text" => (raw.content.clone().unwrap_or_default(), MessageType::Text),
        "image" => (IMAGE_PLACEHOLDER.to_owned(), MessageType::Photo),
        "voice" => match field(&raw.recognition) {
            Some(t) => (t, MessageType::Voice),
            None => (VOICE_PLACEHOLDER.to_owned(), MessageType::Voice),
        },
        "video" => (VIDEO_PLACEHOLDER.to_owned(), MessageType::File),
        "file" => match field(&raw.file_name).or_else(|| field(&raw.title)) {
            Some(name) => (format!("[The user sent a file: {name}]"), MessageType::File),
            None => ("[The user sent a file]".to_owned(), MessageType::File),
        },
        "location" => {
            let place = field(&raw.label).unwrap_or_else(|| "a place".to_owned());
            let coords = match (field(&raw.location_x), field(&raw.location_y)) {
                (Some(x), Some(y)) => format!(" (latitude {x}, longitude {y})"),
                _ => String::new(),
            };
            (
                format!("[The user shared a location: {place}{coords}]"),
                MessageType::Mixed,
            )
        }
        "link" => {
            let mut parts = vec![field(&raw.title).unwrap_or_else(|| "a link".to_owned())];
            parts.extend(field(&raw.description));
            parts.extend(field(&raw.url));
            (
                format!("[The user shared a link: {}]", parts.join(" — ")),
                MessageType::Mixed,
            )
        }
        other => (
            format!("[The user sent a {other} message, which this bot cannot read]"),
            MessageType::Mixed,
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(xml: &str) -> CallbackMessage {
        match parse_message(xml.as_bytes()).unwrap() {
            Inbound::Message(m) => m,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn envelope_with_cdata_and_whitespace() {
        let body = "<xml><ToUserName><![CDATA[ww1436e0e65a779aee]]></ToUserName>\n<Encrypt><![CDATA[abc+/=]]></Encrypt>\n<AgentID><![CDATA[1000002]]></AgentID>\n</xml>";
        let env = parse_envelope(body.as_bytes()).unwrap();
        assert_eq!(env.to_user_name, "ww1436e0e65a779aee");
        assert_eq!(env.encrypt, "abc+/=");
        assert_eq!(env.agent_id.as_deref(), Some("1000002"));
    }

    #[test]
    fn envelope_errors() {
        assert_eq!(parse_envelope(b"\xff\xfe"), Err(XmlError::NotUtf8));
        assert!(matches!(
            parse_envelope(b"<xml><Encrypt>abc</xml>"),
            Err(XmlError::Malformed(_))
        ));
        assert_eq!(
            parse_envelope(b"<xml><ToUserName>x</ToUserName></xml>"),
            Err(XmlError::Missing("Encrypt"))
        );
        assert!(parse_envelope(b"").is_err());
        assert!(parse_envelope(b"not xml at all").is_err());
    }

    #[test]
    fn official_sample_text_message() {
        let m = message(
            "<xml><ToUserName>ww1436e0e65a779aee</ToUserName><FromUserName>ChenJiaShun</FromUserName><CreateTime>1476422779</CreateTime><MsgType>text</MsgType><Content>你好</Content><MsgId>1456453720</MsgId><AgentID>1000002</AgentID></xml>",
        );
        assert_eq!(m.msg_id, "1456453720");
        assert_eq!(m.user_id, "ChenJiaShun");
        assert_eq!(m.to_corp, "ww1436e0e65a779aee");
        assert_eq!(m.agent_id.as_deref(), Some("1000002"));
        assert_eq!(m.text, "你好");
        assert_eq!(m.message_type, MessageType::Text);
    }

    #[test]
    fn text_keeps_markup_characters_escaped_in_xml() {
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><Content><![CDATA[a <b> & c]]></Content><MsgId>1</MsgId></xml>",
        );
        assert_eq!(m.text, "a <b> & c");
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><Content>x &lt; y &amp;&amp; z</Content><MsgId>1</MsgId></xml>",
        );
        assert_eq!(m.text, "x < y && z");
    }

    #[test]
    fn media_messages_are_described() {
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>image</MsgType><PicUrl>http://x/y</PicUrl><MediaId>M1</MediaId><MsgId>2</MsgId></xml>",
        );
        assert_eq!((m.text.as_str(), m.message_type), ("", MessageType::Photo));
        assert_eq!(m.media_id.as_deref(), Some("M1"));
        assert_eq!(m.media, [MediaRef::new(MediaKind::Image, "M1")]);
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>voice</MsgType><MediaId>M2</MediaId><Format>amr</Format><MsgId>3</MsgId></xml>",
        );
        assert_eq!(m.text, "");
        assert_eq!(m.media[0].kind, MediaKind::Voice);
        assert_eq!(m.media[0].mime_type.as_deref(), Some("audio/amr"));
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>voice</MsgType><Format>amr</Format><MsgId>3</MsgId></xml>",
        );
        assert_eq!(m.text, VOICE_PLACEHOLDER, "nothing to fetch");
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>file</MsgType><MediaId>M9</MediaId><FileName>plan.xlsx</FileName><MsgId>9</MsgId></xml>",
        );
        assert_eq!(m.media[0].kind, MediaKind::Document);
        assert_eq!(m.media[0].file_name.as_deref(), Some("plan.xlsx"));
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>voice</MsgType><MediaId>M2</MediaId><Recognition>turn on the lights</Recognition><MsgId>3</MsgId></xml>",
        );
        assert_eq!(
            (m.text.as_str(), m.message_type),
            ("turn on the lights", MessageType::Voice)
        );
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>location</MsgType><Location_X>23.13</Location_X><Location_Y>113.26</Location_Y><Label>Guangzhou</Label><MsgId>4</MsgId></xml>",
        );
        assert_eq!(
            m.text,
            "[The user shared a location: Guangzhou (latitude 23.13, longitude 113.26)]"
        );
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>link</MsgType><Title>Docs</Title><Url>https://example.com</Url><MsgId>5</MsgId></xml>",
        );
        assert_eq!(
            m.text,
            "[The user shared a link: Docs — https://example.com]"
        );
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>hologram</MsgType><MsgId>6</MsgId></xml>",
        );
        assert!(m.text.contains("hologram"), "{}", m.text);
    }

    #[test]
    fn events_are_not_messages() {
        let e = parse_message(
            b"<xml><ToUserName>c</ToUserName><FromUserName>u</FromUserName><CreateTime>1</CreateTime><MsgType>event</MsgType><Event>enter_agent</Event><AgentID>1</AgentID></xml>",
        )
        .unwrap();
        assert_eq!(
            e,
            Inbound::Event {
                user_id: "u".into(),
                event: "enter_agent".into()
            }
        );
    }

    #[test]
    fn required_fields() {
        assert_eq!(
            parse_message(b"<xml><MsgType>text</MsgType><MsgId>1</MsgId></xml>"),
            Err(XmlError::Missing("FromUserName"))
        );
        assert_eq!(
            parse_message(b"<xml><FromUserName>u</FromUserName><MsgId>1</MsgId></xml>"),
            Err(XmlError::Missing("MsgType"))
        );
        assert_eq!(
            parse_message(b"<xml><FromUserName>u</FromUserName><MsgType>text</MsgType></xml>"),
            Err(XmlError::Missing("MsgId"))
        );
        let m = message(
            "<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><CreateTime>99</CreateTime></xml>",
        );
        assert_eq!(m.msg_id, "u:99");
    }

    #[test]
    fn entity_declarations_are_not_expanded() {
        let bomb = "<?xml version=\"1.0\"?><!DOCTYPE xml [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><xml><FromUserName>u</FromUserName><MsgType>text</MsgType><Content>&b;</Content><MsgId>1</MsgId></xml>";
        // Either refused or left unexpanded — never expanded.
        if let Ok(Inbound::Message(m)) = parse_message(bomb.as_bytes()) {
            assert!(!m.text.contains("aaaaaaaaaa"), "{}", m.text);
        }
    }
}
