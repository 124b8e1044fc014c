//! The webhook payloads Meta sends (Cloud API reference, "Webhooks →
//! messages"): a user's message of each kind, and the status of one of the
//! business's messages, inside the `whatsapp_business_account` wrapper.

use serde_json::{Value, json};

use super::{DISPLAY_NUMBER, PHONE_ID, WABA_ID, now_s};

/// The notification wrapper around one `value`.
pub fn notification(value: Value) -> Value {
    json!({
        "object": "whatsapp_business_account",
        "entry": [{
            "id": WABA_ID,
            "changes": [{ "value": value, "field": "messages" }]
        }]
    })
}

fn metadata() -> Value {
    json!({"display_phone_number": DISPLAY_NUMBER, "phone_number_id": PHONE_ID})
}

/// A user's message notification (`message` is the `messages[]` element).
pub fn user_message(from: &str, name: &str, message: Value) -> Value {
    notification(json!({
        "messaging_product": "whatsapp",
        "metadata": metadata(),
        "contacts": [{"profile": {"name": name}, "wa_id": from}],
        "messages": [message]
    }))
}

pub fn text(from: &str, wamid: &str, body: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "text",
           "text": {"body": body}})
}

pub fn image(from: &str, wamid: &str, media_id: &str, caption: &str) -> Value {
    image_of_type(from, wamid, media_id, caption, "image/jpeg")
}

pub fn image_of_type(from: &str, wamid: &str, media_id: &str, caption: &str, mime: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "image",
           "image": {"caption": caption, "mime_type": mime, "sha256": "a1b2", "id": media_id}})
}

pub fn voice(from: &str, wamid: &str, media_id: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "audio",
           "audio": {"mime_type": "audio/ogg; codecs=opus", "sha256": "c3d4",
                     "id": media_id, "voice": true}})
}

pub fn document(from: &str, wamid: &str, media_id: &str, filename: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "document",
           "document": {"caption": "", "filename": filename, "mime_type": "application/pdf",
                        "sha256": "e5f6", "id": media_id}})
}

pub fn reaction(from: &str, wamid: &str, to_wamid: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "reaction",
           "reaction": {"message_id": to_wamid, "emoji": "\u{1F44D}"}})
}

pub fn location(from: &str, wamid: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "location",
           "location": {"latitude": 52.52, "longitude": 13.405, "name": "Berlin"}})
}

pub fn sticker(from: &str, wamid: &str) -> Value {
    json!({"from": from, "id": wamid, "timestamp": now_s().to_string(), "type": "sticker",
           "sticker": {"mime_type": "image/webp", "sha256": "0000", "id": "777", "animated": false}})
}

pub fn status_value(wamid: &str, status: &str, to: &str, errors: Option<Value>) -> Value {
    let mut s = json!({"id": wamid, "status": status, "timestamp": now_s().to_string(),
                       "recipient_id": to});
    if let Some(e) = errors {
        s["errors"] = e;
    }
    notification(json!({
        "messaging_product": "whatsapp",
        "metadata": metadata(),
        "statuses": [s]
    }))
}
