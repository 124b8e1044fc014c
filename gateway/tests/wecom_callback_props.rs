//! Bounded property tests of the callback's pure parts: arbitrary bytes and
//! arbitrary XML never panic the decoders (the same `fuzz_*` entry points a
//! fuzzer drives), encryption round-trips, and any tampering is refused.
#![cfg(feature = "wecom_callback")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_wecom_callback::crypto::CallbackCrypto;
use hermes_wecom_callback::endpoint::Endpoint;
use hermes_wecom_callback::xml::{Inbound, parse_message};
use hermes_wecom_callback::{fuzz_callback_body, fuzz_decrypt, fuzz_message_xml};
use proptest::prelude::*;

const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
const KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";
const CORP: &str = "ww1436e0e65a779aee";

/// XML-ish text: tags WeCom uses, CDATA, entities, broken pieces.
fn xmlish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<xml>".to_owned()),
        Just("</xml>".to_owned()),
        Just("<![CDATA[".to_owned()),
        Just("]]>".to_owned()),
        Just("&amp;".to_owned()),
        Just("&#x1F600;".to_owned()),
        Just("&bogus;".to_owned()),
        Just("<!DOCTYPE x [<!ENTITY a \"b\">]>".to_owned()),
        prop::sample::select(vec![
            "ToUserName",
            "FromUserName",
            "CreateTime",
            "MsgType",
            "Content",
            "MsgId",
            "AgentID",
            "Encrypt",
            "MediaId",
            "Event",
            "Recognition",
        ])
        .prop_flat_map(|tag| {
            "\\PC{0,12}".prop_map(move |body| format!("<{tag}>{body}</{tag}>"))
        }),
        "\\PC{0,8}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        fuzz_callback_body(&data);
        fuzz_decrypt(&data);
        fuzz_message_xml(&data);
    }

    #[test]
    fn random_xml_never_panics(xml in xmlish()) {
        fuzz_callback_body(xml.as_bytes());
        fuzz_decrypt(xml.as_bytes());
        fuzz_message_xml(xml.as_bytes());
        let body = format!("<xml><ToUserName>{CORP}</ToUserName><Encrypt>{xml}</Encrypt></xml>");
        fuzz_callback_body(body.as_bytes());
    }

    #[test]
    fn encryption_round_trips(message in prop::collection::vec(any::<u8>(), 0..3000), random in any::<[u8; 16]>()) {
        let c = CallbackCrypto::new(TOKEN, KEY, CORP).unwrap();
        prop_assert_eq!(c.decrypt(&c.encrypt(&message, random)).unwrap(), message);
    }

    /// A signed message with one ciphertext character changed is refused by
    /// the signature; re-signed, it fails decryption or parsing — it never
    /// turns into a different message.
    #[test]
    fn tampered_callbacks_are_refused(text in "[a-z ]{1,200}", at in any::<prop::sample::Index>(), with in "[A-Za-z0-9+/]") {
        let c = CallbackCrypto::new(TOKEN, KEY, CORP).unwrap();
        let endpoint = Endpoint::new(c.clone(), None, None);
        let xml = format!("<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><Content>{text}</Content><MsgId>1</MsgId></xml>");
        let enc = c.encrypt(xml.as_bytes(), [3; 16]);
        let i = at.index(enc.trim_end_matches('=').len());
        let mut tampered = enc.clone();
        tampered.replace_range(i..=i, &with);
        prop_assume!(tampered != enc);
        let body = format!("<xml><Encrypt>{tampered}</Encrypt></xml>");
        let old_sig = c.sign("1", "n", &enc);
        let q = format!("msg_signature={old_sig}&timestamp=1&nonce=n");
        prop_assert_eq!(endpoint.receive(&q, body.as_bytes(), 1).unwrap_err().status(), 403);
        let new_sig = c.sign("1", "n", &tampered);
        let q = format!("msg_signature={new_sig}&timestamp=1&nonce=n");
        match endpoint.receive(&q, body.as_bytes(), 1) {
            Err(_) => {}
            // CBC without a MAC: a change in one block garbles it and flips
            // bits in the next; if the XML still parses, the changed bytes
            // must show, never a clean message of the attacker's choice.
            Ok(Inbound::Message(m)) => prop_assert_ne!(m.text, text),
            Ok(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    #[test]
    fn well_formed_text_messages_parse(user in "[A-Za-z0-9_]{1,32}", text in "\\PC{0,200}", id in 1u64..u64::MAX) {
        let cdata_safe = text.replace("]]>", "]] >");
        let xml = format!(
            "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName><CreateTime>1</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{cdata_safe}]]></Content><MsgId>{id}</MsgId></xml>"
        );
        let Inbound::Message(m) = parse_message(xml.as_bytes()).unwrap() else {
            return Err(TestCaseError::fail("not a message"));
        };
        prop_assert_eq!(m.user_id, user);
        prop_assert_eq!(m.text, cdata_safe);
        prop_assert_eq!(m.msg_id, id.to_string());
    }
}
