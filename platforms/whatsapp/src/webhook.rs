//! What Meta POSTs to the webhook: the signature check and the payload.
//!
//! Every POST carries `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256
//! of the raw body keyed with the app secret; it is compared in constant
//! time before the body is parsed. The body is a `whatsapp_business_account`
//! notification: `entry[].changes[]` with `field: "messages"` and a `value`
//! holding `messages` (what users sent), `statuses` (what became of ours:
//! sent, delivered, read, failed with `errors`), `contacts` (names) and
//! `metadata.phone_number_id` (which of the business's numbers).

use hermes_platform_kit::event::{MediaKind, MediaRef, MessageType};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::api::GraphError;

/// The header that carries the signature (lower case, as HTTP/1 headers
/// are compared).
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// `sha256=` and the hex HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC takes keys of any length; unreachable in practice.
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Whether `header` is the signature of `body` (constant-time compare).
pub fn signature_ok(secret: &[u8], body: &[u8], header: Option<&str>) -> bool {
    let Some(header) = header else {
        return false;
    };
    let expected = signature(secret, body);
    let given = header.trim().to_ascii_lowercase();
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// A notification.
#[derive(Debug, Default, Deserialize)]
pub struct Notification {
    /// `whatsapp_business_account`.
    #[serde(default)]
    pub object: String,
    /// The entries.
    #[serde(default)]
    pub entry: Vec<Entry>,
}

/// One entry (a business account).
#[derive(Debug, Default, Deserialize)]
pub struct Entry {
    /// Its changes.
    #[serde(default)]
    pub changes: Vec<Change>,
}

/// One change.
#[derive(Debug, Default, Deserialize)]
pub struct Change {
    /// `messages` for messages and statuses.
    #[serde(default)]
    pub field: String,
    /// What changed.
    #[serde(default)]
    pub value: ChangeValue,
}

/// The value of a `messages` change.
#[derive(Debug, Default, Deserialize)]
pub struct ChangeValue {
    /// Which number.
    #[serde(default)]
    pub metadata: Metadata,
    /// The senders' profiles.
    #[serde(default)]
    pub contacts: Vec<Contact>,
    /// Messages from users.
    #[serde(default)]
    pub messages: Vec<Value>,
    /// What became of our messages.
    #[serde(default)]
    pub statuses: Vec<Value>,
}

/// `metadata`.
#[derive(Debug, Default, Deserialize)]
pub struct Metadata {
    /// The business number's id.
    #[serde(default)]
    pub phone_number_id: String,
}

/// A sender's profile.
#[derive(Debug, Default, Deserialize)]
pub struct Contact {
    /// The WhatsApp id (the phone number).
    #[serde(default)]
    pub wa_id: String,
    /// Its profile.
    #[serde(default)]
    pub profile: Profile,
}

/// `profile`.
#[derive(Debug, Default, Deserialize)]
pub struct Profile {
    /// The name the user set.
    #[serde(default)]
    pub name: String,
}

/// A user's message, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// `wamid.…`.
    pub id: String,
    /// The sender's number.
    pub from: String,
    /// What it says (the caption for media).
    pub text: String,
    /// Its kind for the runner.
    pub message_type: MessageType,
    /// Its media.
    pub media: Vec<MediaRef>,
    /// The message it replies to, if any.
    pub context_id: Option<String>,
}

/// What a message in a notification is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// A message for the agent.
    Message(Inbound),
    /// A reaction: nothing to answer.
    Reaction {
        /// The message id.
        id: String,
        /// The sender.
        from: String,
    },
    /// A kind the adapter does not read (location, contacts, sticker,
    /// unsupported, …): the user is told.
    Unreadable {
        /// The message id.
        id: String,
        /// The sender.
        from: String,
        /// Its `type`.
        kind: String,
    },
    /// Not a message (no id or sender).
    Malformed,
}

fn str_at<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str)
}

fn media_of(v: &Value, field: &str, kind: MediaKind) -> Option<MediaRef> {
    let obj = v.get(field)?;
    let id = obj.get("id").and_then(Value::as_str)?;
    let mut media = MediaRef::new(kind, id);
    media.mime_type = obj
        .get("mime_type")
        .and_then(Value::as_str)
        .map(str::to_owned);
    media.file_name = obj
        .get("filename")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(media)
}

/// Reads one element of `value.messages`.
pub fn read_message(v: &Value) -> Read {
    let (Some(id), Some(from)) = (str_at(v, "/id"), str_at(v, "/from")) else {
        return Read::Malformed;
    };
    let (id, from) = (id.to_owned(), from.to_owned());
    let kind = str_at(v, "/type").unwrap_or("").to_owned();
    let caption = |field: &str| {
        v.pointer(&format!("/{field}/caption"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (text, message_type, media) = match kind.as_str() {
        "text" => (
            str_at(v, "/text/body").unwrap_or("").to_owned(),
            MessageType::Text,
            None,
        ),
        // Quick-reply buttons and interactive replies: their title is
        // what the user chose.
        "button" => (
            str_at(v, "/button/text").unwrap_or("").to_owned(),
            MessageType::Text,
            None,
        ),
        "interactive" => (
            str_at(v, "/interactive/button_reply/title")
                .or_else(|| str_at(v, "/interactive/list_reply/title"))
                .unwrap_or("")
                .to_owned(),
            MessageType::Text,
            None,
        ),
        "image" => (
            caption("image"),
            MessageType::Photo,
            media_of(v, "image", MediaKind::Image),
        ),
        "audio" => {
            let voice = v
                .pointer("/audio/voice")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let kind = if voice {
                MediaKind::Voice
            } else {
                MediaKind::Audio
            };
            (
                String::new(),
                if voice {
                    MessageType::Voice
                } else {
                    MessageType::File
                },
                media_of(v, "audio", kind),
            )
        }
        "document" => (
            caption("document"),
            MessageType::File,
            media_of(v, "document", MediaKind::Document),
        ),
        "video" => (
            caption("video"),
            MessageType::File,
            media_of(v, "video", MediaKind::Document),
        ),
        "reaction" => return Read::Reaction { id, from },
        _ => return Read::Unreadable { id, from, kind },
    };
    let is_media = matches!(kind.as_str(), "image" | "audio" | "document" | "video");
    if is_media && media.is_none() {
        return Read::Unreadable { id, from, kind };
    }
    Read::Message(Inbound {
        id,
        from,
        text,
        message_type,
        media: media.into_iter().collect(),
        context_id: str_at(v, "/context/id").map(str::to_owned),
    })
}

/// An element of `value.statuses`, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The `wamid` of our message.
    pub id: String,
    /// sent, delivered, read, failed (or a newer word).
    pub status: String,
    /// To whom.
    pub recipient: String,
    /// Why it failed.
    pub errors: Vec<GraphError>,
}

/// Reads one element of `value.statuses`.
pub fn read_status(v: &Value) -> Option<Status> {
    Some(Status {
        id: str_at(v, "/id")?.to_owned(),
        status: str_at(v, "/status")?.to_owned(),
        recipient: str_at(v, "/recipient_id").unwrap_or("").to_owned(),
        errors: v
            .get("errors")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(GraphError::from_value).collect())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn signatures_match_only_the_exact_body_and_secret() {
        let body = br#"{"object":"whatsapp_business_account"}"#;
        let sig = signature(b"secret", body);
        assert!(sig.starts_with("sha256=") && sig.len() == 71, "{sig}");
        assert!(signature_ok(b"secret", body, Some(&sig)));
        assert!(signature_ok(
            b"secret",
            body,
            Some(&sig.to_uppercase().replace("SHA256", "sha256"))
        ));
        assert!(!signature_ok(b"other", body, Some(&sig)));
        assert!(!signature_ok(b"secret", b"{}", Some(&sig)));
        assert!(!signature_ok(b"secret", body, None));
        assert!(!signature_ok(b"secret", body, Some("sha256=")));
    }

    #[test]
    fn message_kinds_are_read_or_named() {
        let text = json!({"from":"15551234567","id":"wamid.1","type":"text","text":{"body":"hi"}});
        match read_message(&text) {
            Read::Message(m) => {
                assert_eq!((m.text.as_str(), m.from.as_str()), ("hi", "15551234567"))
            }
            other => panic!("{other:?}"),
        }
        let voice = json!({"from":"1555123","id":"wamid.2","type":"audio",
            "audio":{"id":"9001","mime_type":"audio/ogg; codecs=opus","voice":true}});
        match read_message(&voice) {
            Read::Message(m) => {
                assert_eq!(m.message_type, MessageType::Voice);
                assert_eq!(m.media[0].kind, MediaKind::Voice);
                assert_eq!(m.media[0].handle, "9001");
            }
            other => panic!("{other:?}"),
        }
        let video = json!({"from":"1555123","id":"wamid.6","type":"video",
            "video":{"id":"9002","mime_type":"video/mp4","caption":"look"}});
        match read_message(&video) {
            Read::Message(m) => {
                assert_eq!(
                    (m.text.as_str(), m.message_type),
                    ("look", MessageType::File)
                );
                assert_eq!(m.media[0].handle, "9002");
            }
            other => panic!("{other:?}"),
        }
        let button = json!({"from":"1555123","id":"wamid.7","type":"interactive",
            "interactive":{"type":"button_reply","button_reply":{"id":"b1","title":"Yes"}},
            "context":{"from":"15550783881","id":"wamid.0"}});
        match read_message(&button) {
            Read::Message(m) => {
                assert_eq!(m.text, "Yes");
                assert_eq!(m.context_id.as_deref(), Some("wamid.0"));
            }
            other => panic!("{other:?}"),
        }
        let reaction = json!({"from":"1555123","id":"wamid.3","type":"reaction",
            "reaction":{"message_id":"wamid.0","emoji":"👍"}});
        assert!(matches!(read_message(&reaction), Read::Reaction { .. }));
        for kind in ["location", "contacts", "sticker", "unsupported", "order"] {
            let v = json!({"from":"1555123","id":"wamid.4","type":kind});
            assert!(
                matches!(read_message(&v), Read::Unreadable { .. }),
                "{kind}"
            );
        }
        assert_eq!(read_message(&json!({"type":"text"})), Read::Malformed);
        // An image without its media object is not half-read.
        let bare = json!({"from":"1555123","id":"wamid.5","type":"image"});
        assert!(matches!(read_message(&bare), Read::Unreadable { .. }));
    }

    /// Hostile bytes (every truncation of a real notification, and seeded
    /// byte flips of it) are read or refused, never a panic.
    #[test]
    fn mangled_notifications_never_panic() {
        let good = serde_json::to_vec(&json!({"object":"whatsapp_business_account","entry":[{
            "id":"1","changes":[{"field":"messages","value":{
            "metadata":{"phone_number_id":"1"},
            "contacts":[{"wa_id":"1555","profile":{"name":"A"}}],
            "messages":[{"from":"1555","id":"wamid.1","type":"image",
                "image":{"id":"9","mime_type":"image/png","caption":"c"}}],
            "statuses":[{"id":"wamid.2","status":"failed","recipient_id":"1555",
                "errors":[{"code":131047,"title":"t"}]}]}}]}]}))
        .unwrap();
        let read = |bytes: &[u8]| {
            if let Ok(n) = serde_json::from_slice::<Notification>(bytes) {
                for change in n.entry.iter().flat_map(|e| &e.changes) {
                    change.value.messages.iter().for_each(|m| {
                        read_message(m);
                    });
                    change.value.statuses.iter().for_each(|s| {
                        read_status(s);
                    });
                }
            }
        };
        for cut in 0..good.len() {
            read(&good[..cut]);
        }
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let mut bytes = good.clone();
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % bytes.len() as u64) as usize;
                bytes[at] = (seed >> 32) as u8;
            }
            read(&bytes);
        }
    }

    #[test]
    fn failed_statuses_carry_their_errors() {
        let v = json!({"id":"wamid.9","status":"failed","timestamp":"1","recipient_id":"1555",
            "errors":[{"code":131047,"title":"Re-engagement message",
            "error_data":{"details":"Message failed to send because more than 24 hours have passed"}}]});
        let s = read_status(&v).unwrap();
        assert_eq!(s.status, "failed");
        assert_eq!(s.errors[0].code, 131_047);
        assert!(s.errors[0].details.as_deref().unwrap().contains("24 hours"));
    }
}
