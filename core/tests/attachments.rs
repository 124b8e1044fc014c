//! Attachments on user messages (SPEC X6): how the encoder sends them
//! (image parts from the resolver, text references otherwise), checked
//! against the published OpenAI request schemas; what the estimate and the
//! summariser make of them; which ones belong to the current turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use hermes_core::codec::{RequestOptions, encode_request, encode_request_with};
use hermes_core::context::estimate::{IMAGE_TOKENS, message_tokens};
use hermes_core::{
    Attachment, AttachmentResolver, ChatRequest, LedgerEntry, Message, TextReferences, ToolCall,
    current_turn_start,
};
use serde_json::{Value, json};

const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");
const REQUEST_STREAMING_SCHEMA: &str = include_str!(
    "../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);

fn assert_valid(body: &Value) {
    let schema = if body["stream"] == json!(true) {
        REQUEST_STREAMING_SCHEMA
    } else {
        REQUEST_SCHEMA
    };
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations: {errors:#?}\nin {body:#}"
    );
}

/// A resolver lending the URLs of a map, as the runtime lends its data URLs.
struct Urls(HashMap<String, String>);

impl AttachmentResolver for Urls {
    fn image_url(&self, attachment: &Attachment) -> Option<&str> {
        self.0.get(&attachment.path).map(String::as_str)
    }
}

fn photo(path: &str) -> Attachment {
    Attachment::image("image/jpeg", path, 1234)
}

fn encode(entries: &[LedgerEntry], resolver: &dyn AttachmentResolver, stream: bool) -> Value {
    let request = ChatRequest {
        system_prompt: "sys",
        messages: entries,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let mut opts = RequestOptions::new("gpt-4o");
    opts.stream = stream;
    let mut out = Vec::new();
    encode_request_with(&opts, &request, resolver, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_resolved_image_is_an_image_url_part_after_the_caption() {
    let entries = [LedgerEntry::new(Message::user_with(
        "what is this?",
        vec![photo("s1/m1-0.jpg")],
    ))];
    let urls = Urls(HashMap::from([(
        "s1/m1-0.jpg".to_owned(),
        "data:image/jpeg;base64,/9j/4AAQ".to_owned(),
    )]));
    for stream in [false, true] {
        let body = encode(&entries, &urls, stream);
        assert_valid(&body);
        assert_eq!(
            body["messages"][1],
            json!({"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
            ]})
        );
    }
}

#[test]
fn an_image_without_a_caption_is_a_lone_image_part() {
    let entries = [LedgerEntry::new(Message::user_with(
        "",
        vec![photo("s1/a.png")],
    ))];
    let urls = Urls(HashMap::from([(
        "s1/a.png".to_owned(),
        "data:image/png;base64,iVBO".to_owned(),
    )]));
    let body = encode(&entries, &urls, false);
    assert_valid(&body);
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}])
    );
}

#[test]
fn unresolved_images_are_text_references_in_one_string_and_the_ledger_field_stays_off_the_wire() {
    let mut described = photo("s1/cat.jpg");
    described.description = Some("A grey cat asleep on a red sofa.".into());
    let entries = [
        LedgerEntry::new(Message::user_with("look", vec![photo("s1/old.jpg")])),
        LedgerEntry::new(Message::assistant("nice")),
        LedgerEntry::new(Message::user_with("and this one", vec![described])),
    ];
    let body = encode(&entries, &TextReferences, false);
    assert_valid(&body);
    let first = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        first.starts_with("look\n\n[Image old.jpg (image/jpeg)"),
        "{first}"
    );
    assert!(first.contains("not included in this request"), "{first}");
    let second = body["messages"][3]["content"].as_str().unwrap();
    assert_eq!(
        second,
        "and this one\n\n[Image cat.jpg: A grey cat asleep on a red sofa.]"
    );
    let text = serde_json::to_string(&body).unwrap();
    assert!(!text.contains("attachments"), "{text}");
    assert!(!text.contains("\"path\""), "{text}");

    // `encode_request` is the same as resolving nothing.
    let request = ChatRequest {
        system_prompt: "sys",
        messages: &entries,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let mut plain = Vec::new();
    encode_request(&RequestOptions::new("gpt-4o"), &request, &mut plain).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&plain).unwrap(), body);
}

#[test]
fn only_the_images_the_resolver_lends_are_sent_as_images() {
    let entries = [LedgerEntry::new(Message::user_with(
        "two photos",
        vec![photo("s/a.jpg"), photo("s/b.jpg")],
    ))];
    let urls = Urls(HashMap::from([(
        "s/b.jpg".to_owned(),
        "data:image/jpeg;base64,AAAA".to_owned(),
    )]));
    let body = encode(&entries, &urls, true);
    assert_valid(&body);
    let parts = body["messages"][1]["content"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0], json!({"type": "text", "text": "two photos"}));
    assert_eq!(parts[1]["type"], "text");
    assert!(
        parts[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Image a.jpg")
    );
    assert_eq!(parts[2]["image_url"]["url"], "data:image/jpeg;base64,AAAA");
}

#[test]
fn messages_without_attachments_encode_as_before() {
    let entries = [
        LedgerEntry::new(Message::user("hi")),
        LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("c1", "t", "{}")],
        }),
        LedgerEntry::new(Message::tool("c1", "ok")),
    ];
    let body = encode(&entries, &Urls(HashMap::new()), false);
    assert_valid(&body);
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
}

#[test]
fn attachments_survive_a_serde_round_trip_and_old_messages_read_without_them() {
    let mut a = photo("s/x.webp");
    a.media_type = "image/webp".into();
    a.description = Some("a chart".into());
    let m = Message::user_with("see", vec![a.clone()]);
    let text = serde_json::to_string(&m).unwrap();
    let back: Message = serde_json::from_str(&text).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.attachments(), &[a]);
    let old: Message = serde_json::from_str(r#"{"role":"user","content":"hi"}"#).unwrap();
    assert_eq!(old, Message::user("hi"));
    assert_eq!(
        serde_json::to_string(&Message::user("hi")).unwrap(),
        r#"{"role":"user","content":"hi"}"#
    );
}

#[test]
fn an_image_counts_as_a_large_picture_in_the_estimate() {
    let plain = message_tokens(&Message::user("caption"));
    let with = message_tokens(&Message::user_with("caption", vec![photo("s/a.jpg")]));
    assert_eq!(with - plain, IMAGE_TOKENS);
}

#[test]
fn the_current_turn_starts_at_the_last_run_of_user_messages() {
    let u = |t: &str| LedgerEntry::new(Message::user(t));
    let a = |t: &str| LedgerEntry::new(Message::assistant(t));
    let call = LedgerEntry::new(Message::Assistant {
        content: None,
        tool_calls: vec![ToolCall::new("c", "t", "{}")],
    });
    let result = LedgerEntry::new(Message::tool("c", "r"));
    assert_eq!(current_turn_start(&[]), 0);
    assert_eq!(current_turn_start(&[u("1")]), 0);
    assert_eq!(current_turn_start(&[u("1"), a("2"), u("3")]), 2);
    // A replaced message is transcribed just before the one that replaced it.
    assert_eq!(current_turn_start(&[u("1"), a("2"), u("3"), u("4")]), 2);
    // A tool loop belongs to the turn it runs in.
    assert_eq!(
        current_turn_start(&[u("1"), a("2"), u("3"), call, result]),
        2
    );
    assert_eq!(current_turn_start(&[a("x")]), 1);
}
