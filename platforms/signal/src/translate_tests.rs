#![allow(clippy::unwrap_used)]
use super::*;

const BOT: &str = "+15550000001";
const BOT_UUID: &str = "b0b0b0b0-0000-4000-8000-000000000001";

fn me<'a>(allowed: &'a dyn Fn(&str) -> bool) -> Me<'a> {
    Me {
        number: BOT,
        uuid: Some(BOT_UUID),
        require_mention: true,
        allowed,
    }
}

fn envelope(data: Value) -> Value {
    json!({
        "envelope": {
            "source": "+15550000002", "sourceNumber": "+15550000002",
            "sourceUuid": "a1a1a1a1-0000-4000-8000-000000000002", "sourceName": "Alice",
            "sourceDevice": 1, "timestamp": 1700000000000u64,
            "serverReceivedTimestamp": 1700000000100u64, "serverDeliveredTimestamp": 1700000000200u64,
            "dataMessage": data,
        },
        "account": BOT,
    })
}

fn message(item: &Value, me: &Me<'_>) -> MessageEvent {
    match translate(item, me) {
        Inbound::Message(m) => *m,
        other => panic!("not a message: {other:?}"),
    }
}

#[test]
fn a_direct_message_names_its_sender_as_the_allow_list_does() {
    let item = envelope(
        json!({"timestamp": 1700000000000u64, "message": "hi", "expiresInSeconds": 0, "viewOnce": false}),
    );
    let none = |_: &str| false;
    let m = message(&item, &me(&none));
    assert_eq!(m.text, "hi");
    assert_eq!(m.source.chat_id, "+15550000002");
    assert_eq!(m.source.chat_type, ChatType::Dm);
    assert_eq!(m.message_id, "1700000000000:+15550000002");
    assert_eq!(
        parse_message_id(&m.message_id),
        Some((1700000000000, "+15550000002"))
    );
    let by_uuid = |id: &str| id == "a1a1a1a1-0000-4000-8000-000000000002";
    let m = message(&item, &me(&by_uuid));
    assert_eq!(m.source.user_id, "a1a1a1a1-0000-4000-8000-000000000002");
}

#[test]
fn groups_need_a_mention_of_the_bot_by_number_or_uuid_or_a_reply_to_it() {
    let none = |_: &str| false;
    let group =
        json!({"groupId": "R3JvdXBJZA==", "groupName": "G", "revision": 1, "type": "DELIVER"});
    let plain = envelope(json!({"timestamp": 1, "message": "hello all", "groupInfo": group}));
    assert!(matches!(translate(&plain, &me(&none)), Inbound::Skip(_)));
    let by_uuid = envelope(
        json!({"timestamp": 1, "message": "\u{FFFC} what time is it", "groupInfo": group,
        "mentions": [{"name": BOT_UUID, "number": null, "uuid": BOT_UUID, "start": 0, "length": 1}]}),
    );
    let m = message(&by_uuid, &me(&none));
    assert_eq!(m.text, "what time is it");
    assert_eq!(m.source.chat_id, "group.R3JvdXBJZA==");
    assert_eq!(m.source.chat_type, ChatType::Group);
    let other = envelope(
        json!({"timestamp": 1, "message": "ask \u{FFFC}", "groupInfo": group,
        "mentions": [{"name": "+15550000009", "number": "+15550000009", "uuid": "c", "start": 4, "length": 1}]}),
    );
    assert!(matches!(translate(&other, &me(&none)), Inbound::Skip(_)));
    let reply = envelope(
        json!({"timestamp": 1, "message": "and tomorrow?", "groupInfo": group,
        "quote": {"id": 5, "author": BOT, "authorNumber": BOT, "authorUuid": BOT_UUID, "text": "It is noon.", "attachments": []}}),
    );
    let m = message(&reply, &me(&none));
    assert_eq!(m.text, "> It is noon.\n\nand tomorrow?");
    let mut free = me(&none);
    free.require_mention = false;
    assert_eq!(message(&plain, &free).text, "hello all");
}

#[test]
fn attachments_become_media_and_unusable_kinds_are_skipped_or_placeholders() {
    let none = |_: &str| false;
    let item = envelope(json!({"timestamp": 7, "message": null, "attachments": [
        {"contentType": "image/jpeg", "filename": "cat.jpg", "id": "abc123.jpg", "size": 10, "width": 1, "height": 1, "caption": null, "uploadTimestamp": 1},
        {"contentType": "audio/aac", "filename": null, "id": "v.aac", "size": 5}]}));
    let m = message(&item, &me(&none));
    assert_eq!(m.media.len(), 2);
    assert_eq!(m.media[0].kind, MediaKind::Image);
    assert_eq!(m.media[1].kind, MediaKind::Voice);
    assert_eq!(
        m.media[0].handle,
        media_handle("abc123.jpg", "+15550000002")
    );
    let reaction = envelope(
        json!({"timestamp": 8, "reaction": {"emoji": "👍", "targetAuthor": BOT, "targetAuthorNumber": BOT, "targetSentTimestamp": 5, "isRemove": false}}),
    );
    assert!(matches!(
        translate(&reaction, &me(&none)),
        Inbound::Skip("a reaction")
    ));
    let sticker = envelope(json!({"timestamp": 9, "sticker": {"packId": "p", "stickerId": 2}}));
    assert_eq!(message(&sticker, &me(&none)).text, "[sticker]");
    let contact = envelope(
        json!({"timestamp": 10, "contacts": [{"name": {"given": "Bob", "nickname": null}, "phone": [{"value": "+15550000003", "type": "MOBILE"}]}]}),
    );
    assert_eq!(
        message(&contact, &me(&none)).text,
        "[shared contact: Bob +15550000003]"
    );
    let typing = json!({"envelope": {"source": "+1555", "sourceNumber": "+1555", "timestamp": 1, "typingMessage": {"action": "STARTED", "timestamp": 1}}, "account": BOT});
    assert!(matches!(translate(&typing, &me(&none)), Inbound::Skip(_)));
    let failed = json!({"envelope": {"source": "+1555", "sourceNumber": "+1555", "timestamp": 1}, "exception": {"message": "Untrusted identity", "type": "UntrustedIdentityException"}, "account": BOT});
    assert!(matches!(
        translate(&failed, &me(&none)),
        Inbound::Failed { .. }
    ));
}

/// An envelope of a kind the adapter does not know is named, not answered;
/// one with nothing but its address is skipped quietly.
#[test]
fn unknown_envelope_kinds_are_named_for_the_log() {
    let none = |_: &str| false;
    let item = json!({"envelope": {"source": "+15550000002", "sourceNumber": "+15550000002",
        "sourceUuid": "b", "sourceDevice": 1, "timestamp": 7, "serverReceivedTimestamp": 8,
        "serverDeliveredTimestamp": 9, "pinMessage": {"targetTimestamp": 5}}, "account": BOT});
    assert_eq!(
        translate(&item, &me(&none)),
        Inbound::Unknown("pinMessage".to_owned())
    );
    let bare = json!({"envelope": {"source": "+15550000002", "timestamp": 7}, "account": BOT});
    assert!(matches!(translate(&bare, &me(&none)), Inbound::Skip(_)));
}
