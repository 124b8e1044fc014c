//! Hostile bytes into the gateway's parsers, on stable: proptests for the
//! invariants the fuzz targets check (`fuzz/`, nightly), and a replay of the
//! committed seeds and crash inputs (`fuzz/seeds/`, `fuzz/regressions/`).
//! Both call the same `hermes_gateway::fuzz_entry` functions as the targets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_gateway::fuzz_entry;
use hermes_gateway::split::LengthUnit;
use hermes_tests::fuzz_inputs::replay;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn committed_fuzz_inputs_still_pass() {
    replay("split_message", fuzz_entry::split_message);
    replay("command", fuzz_entry::command);
    #[cfg(feature = "telegram")]
    {
        replay("telegram_updates", fuzz_entry::telegram_updates);
        replay("telegram_format", fuzz_entry::telegram_format);
    }
    #[cfg(feature = "wecom")]
    {
        replay("wecom_frame", fuzz_entry::wecom_frame);
        replay("wecom_merge", fuzz_entry::wecom_merge);
    }
    #[cfg(feature = "wecom_callback")]
    {
        replay("wecom_callback_body", fuzz_entry::wecom_callback_body);
        replay("wecom_decrypt", fuzz_entry::wecom_decrypt);
        replay("wecom_message_xml", fuzz_entry::wecom_message_xml);
    }
}

/// Reply text: words, fences (with and without language tags, indented,
/// inline), long lines, multi-byte and astral characters.
fn reply_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("word "),
            Just("\n"),
            Just("\n\n"),
            Just("```"),
            Just("```rust\n"),
            Just("\n```\n"),
            Just("   ```sh\n"),
            Just("`"),
            Just(" ```inline``` "),
            Just("é"),
            Just("中文"),
            Just("😀"),
            Just("\t"),
            Just("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
            Just("```json {\"a\":1,\"b\":[1,2,3]}"),
            Just("**b**"),
            Just("_i_"),
            Just("[l](https://e.x)"),
            Just("<"),
            Just("&"),
            Just("# "),
        ],
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

fn unit() -> impl Strategy<Value = LengthUnit> {
    prop_oneof![
        Just(LengthUnit::Chars),
        Just(LengthUnit::Utf16),
        Just(LengthUnit::Bytes)
    ]
}

/// A Telegram update with hostile values where the Bot API puts numbers
/// and text.
fn update() -> impl Strategy<Value = serde_json::Value> {
    let id = prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(0i64),
        any::<i64>(),
        1..100i64
    ];
    (
        id.clone(),
        id.clone(),
        id,
        prop_oneof![Just("private"), Just("group"), Just("supergroup"), Just("channel"), Just("")],
        "(/new|/new@HermesBot|/x@other|@hermesbot|hello|中文|\\s|@){0,6}",
        any::<bool>(),
    )
        .prop_map(|(update_id, message_id, chat_id, kind, text, is_bot)| {
            json!({"update_id": update_id, "message": {
                "message_id": message_id, "date": 0, "text": text,
                "from": {"id": chat_id, "is_bot": is_bot, "first_name": "A"},
                "chat": {"id": chat_id, "type": kind},
                "message_thread_id": message_id, "is_topic_message": is_bot,
                "reply_to_message": {"message_id": message_id, "from": {"id": 42, "is_bot": true}, "chat": {"id": chat_id, "type": kind}}
            }})
        })
}

/// A WeCom frame with any strings where the server puts ids and text.
fn wecom_frame() -> impl Strategy<Value = String> {
    let s = "(a|中|@|\\u{2005}| |\\n|\"|){0,6}";
    (s, s, s, prop_oneof![Just("text"), Just("voice"), Just("file"), Just("mixed"), Just("image"), Just(""), Just("x")], prop_oneof![Just("single"), Just("group")])
        .prop_map(|(msgid, user, content, msgtype, chattype)| {
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": user},
                "body": {"msgid": msgid, "chattype": chattype, "chatid": user, "from": {"userid": user},
                    "msgtype": msgtype, "text": {"content": content}, "voice": {"content": content},
                    "file": {"name": content}, "mixed": {"msg_item": [{"msgtype": "text", "text": {"content": content}}]},
                    "quote": {"msgtype": msgtype, "text": {"content": content}}}})
            .to_string()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn split_pieces_fit_rebuild_the_text_and_balance_fences(
        text in reply_text(),
        limit in 0usize..300,
        unit in unit(),
    ) {
        fuzz_entry::split_message_with(&text, limit, unit);
    }

    #[test]
    fn split_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        fuzz_entry::split_message(&bytes);
    }

    #[test]
    fn commands_parse_consistently(text in "[/ @a-zA-Z0-9_.\\t\\n\u{2005}é]{0,20}") {
        fuzz_entry::command(text.as_bytes());
    }

    #[test]
    fn merged_wecom_pieces_keep_order_bounds_and_commands(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        #[cfg(feature = "wecom")]
        fuzz_entry::wecom_merge(&bytes);
        let _ = bytes;
    }

    #[test]
    fn wecom_frames_parse_or_fail_cleanly(frame in wecom_frame()) {
        #[cfg(feature = "wecom")]
        fuzz_entry::wecom_frame(frame.as_bytes());
        let _ = frame;
    }

    #[test]
    fn telegram_batches_keep_offsets_moving_forward(
        updates in proptest::collection::vec(update(), 0..6),
        pick in any::<u8>(),
    ) {
        let mut input = vec![pick];
        input.extend_from_slice(json!({"ok": true, "result": updates}).to_string().as_bytes());
        #[cfg(feature = "telegram")]
        fuzz_entry::telegram_updates(&input);
        let _ = input;
    }

    #[test]
    fn telegram_html_is_well_formed(text in reply_text()) {
        #[cfg(feature = "telegram")]
        fuzz_entry::telegram_format(text.as_bytes());
        let _ = text;
    }
}
