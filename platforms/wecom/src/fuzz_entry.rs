//! Entry points for the fuzz targets in `fuzz/` (re-exported by the
//! gateway's `fuzz_entry`) and the gateway's hostile-bytes tests. Not API.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use crate::merge::{FragmentMerger, MergeConfig};
use crate::wire::{self, Inbound};
use hermes_platform_kit::command::parse_command;
use hermes_platform_kit::event::{ChatType, MessageEvent, MessageType, SessionSource};

/// One WebSocket frame from WeCom: never a panic, a parsed message has
/// the ids replies and dedup need, and the frames we build carry any
/// text intact and parse back as ours.
pub fn wecom_frame(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(Inbound::Message { message, .. }) = wire::parse_frame(&text) {
        assert!(!message.msgid.is_empty());
        assert!(!message.user_id.is_empty());
        assert!(!message.chat_id.is_empty());
        if message.chat_type == ChatType::Dm {
            assert_eq!(message.chat_id, message.user_id);
        }
    }
    // Our own frames, with the input as every string.
    let mut parts = text.splitn(3, '\u{0}');
    let (a, b, c) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    for (frame, cmd, content) in [
        (wire::respond_markdown(a, b), wire::CMD_RESPOND, b),
        (wire::send_markdown(a, c, b), wire::CMD_SEND, b),
        (wire::subscribe(a, b, c), wire::CMD_SUBSCRIBE, ""),
        (wire::ping(a), wire::CMD_PING, ""),
    ] {
        let value: Value = match serde_json::from_str(&frame) {
            Ok(v) => v,
            Err(e) => panic!("we built invalid JSON {frame:?}: {e}"),
        };
        assert_eq!(value["headers"]["req_id"], a);
        if !content.is_empty() {
            assert_eq!(value["body"]["markdown"]["content"], content);
        }
        match wire::parse_frame(&frame) {
            Ok(Inbound::Other { cmd: got }) => assert_eq!(got, cmd),
            other => panic!("our {cmd} frame reads back as {other:?}"),
        }
    }
}

const MERGE: MergeConfig = MergeConfig {
    wait: Duration::from_millis(200),
    max_wait: Duration::from_millis(600),
    near_limit: 24,
    max_total_wait: Duration::from_millis(1000),
    max_bytes: 64,
    max_pieces: 4,
};

/// The three senders the merge harness uses: a DM, and two people in
/// one group.
fn source(key: usize) -> SessionSource {
    let (chat_type, chat_id, user_id) = match key {
        0 => (ChatType::Dm, "alice", "alice"),
        1 => (ChatType::Group, "g", "alice"),
        _ => (ChatType::Group, "g", "bob"),
    };
    SessionSource {
        platform: "wecom".into(),
        chat_id: chat_id.into(),
        chat_type,
        user_id: user_id.into(),
        user_name: None,
        thread_id: None,
    }
}

fn key_of(source: &SessionSource) -> usize {
    match (source.chat_type, source.user_id.as_str()) {
        (ChatType::Dm, _) => 0,
        (_, "alice") => 1,
        _ => 2,
    }
}

/// A piece pushed into the merger and not yet seen delivered.
struct Held {
    id: String,
    text: String,
    at: Duration,
}

/// The fragment merger under pushes and polls the bytes choose: each
/// delivered message is a run of consecutive pieces of one sender,
/// joined exactly as documented (no separator after a piece close to
/// the limit, else a line break), within the piece and byte bounds;
/// commands come alone; nothing is held past its deadline or past
/// `max_total_wait`; nothing is lost (`flush` hands out the rest).
pub fn wecom_merge(data: &[u8]) {
    let mut merger = FragmentMerger::new(MERGE);
    let mut now = Duration::ZERO;
    let mut held: HashMap<usize, Vec<Held>> = HashMap::new();
    let mut next_id = 0u32;
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let arg = bytes.next().unwrap_or(0);
        match op % 4 {
            0 | 1 => {
                let key = usize::from(arg % 3);
                now += Duration::from_millis(u64::from(arg / 3 % 8) * 50);
                let len = bytes.next().unwrap_or(0);
                let len = if len & 0x80 != 0 {
                    MERGE.near_limit + usize::from(len % 4)
                } else {
                    usize::from(len % 32)
                };
                let text: String = bytes
                    .by_ref()
                    .take(len)
                    .map(|b| b"ab /new\nxy@_"[usize::from(b % 12)] as char)
                    .collect();
                next_id += 1;
                let id = format!("m{next_id}");
                held.entry(key).or_default().push(Held {
                    id: id.clone(),
                    text: text.clone(),
                    at: now,
                });
                merger.push(
                    now,
                    MessageEvent {
                        message_id: id,
                        text,
                        source: source(key),
                        message_type: MessageType::Text,
                        media: Vec::new(),
                    },
                );
            }
            2 => now += Duration::from_millis(u64::from(arg) * 10),
            _ => {}
        }
        let due = merger.poll(now);
        check_delivered(due, &mut held);
        if let Some(deadline) = merger.next_deadline() {
            assert!(deadline > now, "a message overdue at {now:?} was kept");
        }
        for pieces in held.values() {
            if let Some(oldest) = pieces.first() {
                assert!(
                    now < oldest.at + MERGE.max_total_wait,
                    "a piece from {:?} still held at {now:?}",
                    oldest.at
                );
            }
        }
    }
    let rest = merger.flush();
    check_delivered(rest, &mut held);
    assert!(merger.is_empty());
    assert!(held.values().all(Vec::is_empty), "pieces were lost");
}

fn check_delivered(events: Vec<MessageEvent>, held: &mut HashMap<usize, Vec<Held>>) {
    for event in events {
        let key = key_of(&event.source);
        let pieces = held.entry(key).or_default();
        let run = pieces
            .iter()
            .position(|p| p.id == event.message_id)
            .unwrap_or_else(|| panic!("{} delivered out of order", event.message_id));
        let run: Vec<Held> = pieces.drain(..=run).collect();
        assert!(run.len() <= MERGE.max_pieces, "{} pieces merged", run.len());
        let mut expected = String::new();
        for (i, p) in run.iter().enumerate() {
            if i > 0 && run[i - 1].text.chars().count() < MERGE.near_limit {
                expected.push('\n');
            }
            expected.push_str(&p.text);
        }
        assert_eq!(event.text, expected);
        if run.len() > 1 {
            assert!(event.text.len() <= MERGE.max_bytes, "{:?}", event.text);
            assert!(
                run.iter().all(|p| parse_command(&p.text).is_none()),
                "a command was merged: {:?}",
                event.text
            );
        }
    }
}
