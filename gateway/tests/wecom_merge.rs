//! The WeCom fragment merger on a fake clock (SPEC G8): pure state machine,
//! so every timing edge is exact.
#![cfg(feature = "wecom")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hermes_gateway::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource,
};
use hermes_wecom::merge::{FragmentMerger, MergeConfig};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn piece(id: &str, chat: &str, user: &str, text: &str) -> MessageEvent {
    MessageEvent {
        message_id: id.to_owned(),
        text: text.to_owned(),
        source: SessionSource {
            platform: "wecom".into(),
            chat_id: chat.to_owned(),
            chat_type: if chat == user {
                ChatType::Dm
            } else {
                ChatType::Group
            },
            user_id: user.to_owned(),
            user_name: None,
            thread_id: None,
        },
        message_type: MessageType::Text,
        media: Vec::new(),
    }
}

fn merger() -> FragmentMerger {
    FragmentMerger::new(MergeConfig::default())
}

#[test]
fn defaults_are_the_spec_values() {
    let c = MergeConfig::default();
    assert_eq!(
        (c.wait, c.max_wait, c.near_limit),
        (ms(600), ms(2000), 3900)
    );
}

#[test]
fn a_short_message_waits_600ms() {
    let mut m = merger();
    m.push(ms(1000), piece("m1", "alice", "alice", "hello"));
    assert_eq!(m.next_deadline(), Some(ms(1600)));
    assert!(m.poll(ms(1599)).is_empty());
    let out = m.poll(ms(1600));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "hello");
    assert!(m.is_empty());
    assert_eq!(m.next_deadline(), None);
}

#[test]
fn a_near_limit_piece_keeps_waiting_up_to_2s() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", &"x".repeat(3900)));
    assert!(m.poll(ms(600)).is_empty(), "near the limit: more is coming");
    assert!(m.poll(ms(1999)).is_empty());
    assert_eq!(m.poll(ms(2000)).len(), 1);
}

#[test]
fn a_piece_just_under_the_threshold_waits_the_short_time() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", &"x".repeat(3899)));
    assert_eq!(m.poll(ms(600)).len(), 1);
}

#[test]
fn threshold_counts_characters_not_bytes() {
    let mut m = merger();
    // 1300 three-byte characters: 3900 bytes but far from the limit.
    m.push(ms(0), piece("m1", "alice", "alice", &"字".repeat(1300)));
    assert_eq!(m.poll(ms(600)).len(), 1);
}

#[test]
fn split_pieces_join_without_separator_and_reply_to_the_newest() {
    let mut m = merger();
    let (a, b, c) = ("a".repeat(4000), "b".repeat(3950), "tail");
    m.push(ms(0), piece("m1", "alice", "alice", &a));
    assert!(m.poll(ms(1500)).is_empty());
    m.push(ms(1500), piece("m2", "alice", "alice", &b));
    // The deadline moved: 1500 + 2000.
    assert!(m.poll(ms(3499)).is_empty());
    m.push(ms(3000), piece("m3", "alice", "alice", c));
    assert_eq!(m.next_deadline(), Some(ms(3600)));
    assert!(m.poll(ms(3599)).is_empty());
    let out = m.poll(ms(3600));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, format!("{a}{b}{c}"));
    assert_eq!(out[0].message_id, "m3");
    assert_eq!(out[0].message_type, MessageType::Text);
}

#[test]
fn a_burst_of_short_messages_becomes_lines_of_one_message() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", "first"));
    m.push(ms(300), piece("m2", "alice", "alice", "second"));
    assert!(m.poll(ms(600)).is_empty());
    let out = m.poll(ms(900));
    assert_eq!(out[0].text, "first\nsecond");
}

#[test]
fn a_piece_after_the_wait_is_a_new_message() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", "one"));
    assert_eq!(m.poll(ms(600)).len(), 1);
    m.push(ms(700), piece("m2", "alice", "alice", "two"));
    let out = m.poll(ms(1300));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "two");
}

#[test]
fn different_chats_and_group_members_never_mix() {
    let mut m = merger();
    m.push(ms(0), piece("a1", "alice", "alice", &"a".repeat(3950)));
    m.push(ms(10), piece("b1", "bob", "bob", "bob dm"));
    m.push(ms(20), piece("g1", "grp", "carol", "carol in group"));
    m.push(ms(30), piece("g2", "grp", "dave", "dave in group"));
    m.push(ms(40), piece("a2", "alice", "alice", "a-tail"));
    assert!(m.poll(ms(609)).is_empty());
    let texts: Vec<_> = m.poll(ms(630)).into_iter().map(|e| e.text).collect();
    assert_eq!(texts, vec!["bob dm", "carol in group", "dave in group"]);
    assert!(m.poll(ms(639)).is_empty());
    let out = m.poll(ms(640));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, format!("{}a-tail", "a".repeat(3950)));
    assert_eq!(out[0].source.chat_id, "alice");
    assert_eq!(out[0].message_id, "a2");
}

#[test]
fn mixed_content_kinds_join_as_mixed() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", "look"));
    let mut img = piece("m2", "alice", "alice", "[The user sent an image]");
    img.message_type = MessageType::Photo;
    m.push(ms(100), img);
    let out = m.poll(ms(700));
    assert_eq!(out[0].message_type, MessageType::Mixed);
    assert_eq!(out[0].text, "look\n[The user sent an image]");
}

#[test]
fn a_photo_right_after_its_text_joins_it_with_its_media() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", "what is this?"));
    let mut img = piece("m2", "alice", "alice", "");
    img.message_type = MessageType::Photo;
    img.media = vec![MediaRef::new(
        MediaKind::Image,
        r#"{"url":"https://x","aeskey":"k"}"#,
    )];
    m.push(ms(100), img);
    let out = m.poll(ms(700));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "what is this?", "no stray line break");
    assert_eq!(out[0].media.len(), 1, "the photo is kept");
    assert_eq!(out[0].message_id, "m2");
}

#[test]
fn flush_hands_out_everything_held() {
    let mut m = merger();
    m.push(ms(0), piece("m1", "alice", "alice", "x"));
    m.push(ms(0), piece("m2", "bob", "bob", "y"));
    let out = m.flush();
    assert_eq!(out.len(), 2);
    assert!(m.is_empty());
    assert!(m.poll(ms(10_000)).is_empty());
}

#[test]
fn merge_slash_command_after_a_message_stays_a_command() {
    let mut m = merger();
    m.push(
        ms(0),
        piece("m1", "alice", "alice", "please write a long essay"),
    );
    m.push(ms(100), piece("m2", "alice", "alice", "/stop"));
    // Both due at once, the held text first, the command alone.
    assert_eq!(m.next_deadline(), Some(ms(100)));
    let out = m.poll(ms(100));
    let texts: Vec<&str> = out.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["please write a long essay", "/stop"]);
    assert_eq!(out[1].message_id, "m2");
    assert!(m.is_empty());
    // A command with nothing held goes out at once too, and a piece after
    // it starts a new message instead of joining the command.
    m.push(ms(200), piece("m3", "alice", "alice", "/status"));
    m.push(ms(200), piece("m4", "alice", "alice", "more"));
    let out = m.poll(ms(200));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "/status");
    assert_eq!(m.poll(ms(800))[0].text, "more");
    // A path is text, not a command: it merges.
    m.push(ms(1000), piece("m5", "alice", "alice", "look at"));
    m.push(ms(1100), piece("m6", "alice", "alice", "/usr/bin/x"));
    let out = m.poll(ms(1700));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "look at\n/usr/bin/x");
}

#[test]
fn merge_is_bounded_in_total_wait_from_the_first_piece() {
    let mut m = merger();
    // A piece every 500 ms would otherwise keep the message held forever.
    for i in 0..10u64 {
        m.push(ms(i * 500), piece(&format!("m{i}"), "bob", "bob", "x"));
        assert!(m.poll(ms(i * 500)).is_empty());
    }
    // Due 5 s after the first piece, although the last one (at 4.5 s) would
    // wait until 5.1 s.
    assert_eq!(m.next_deadline(), Some(ms(5000)));
    assert!(m.poll(ms(4999)).is_empty());
    let out = m.poll(ms(5000));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].text.lines().count(), 10);
}

#[test]
fn merge_is_bounded_in_pieces_and_bytes() {
    let mut m = merger();
    for i in 0..32u64 {
        m.push(ms(i), piece(&format!("p{i}"), "carol", "carol", "y"));
    }
    // The 32nd piece completes the message: due at once.
    let out = m.poll(ms(31));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text.lines().count(), 32);
    assert!(m.is_empty());

    // 64 KiB: a piece that would overflow starts a new message.
    let big = "z".repeat(40 * 1024);
    m.push(ms(100), piece("b1", "carol", "carol", &big));
    m.push(ms(200), piece("b2", "carol", "carol", &big));
    let out = m.poll(ms(200));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text.len(), 40 * 1024);
    assert_eq!(out[0].message_id, "b1");
    // The second is held on its own (near the limit: the long wait).
    let out = m.flush();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].message_id, "b2");
    assert!(out[0].text.len() <= MergeConfig::default().max_bytes);
}
