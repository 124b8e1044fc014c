//! Entry points for the fuzz targets in `fuzz/` and for the proptests and
//! corpus replay in `gateway/tests/hostile_bytes.rs`. Not API.
//!
//! Each function takes untrusted bytes, runs a parser over them and panics
//! when one of the parser's promises breaks; the fuzzer, the proptests and
//! the committed crash inputs all drive these same functions.
//!
//! The WeCom callback adapter (XML + message crypto) has its own entries in
//! `hermes_wecom_callback::endpoint` (they must never panic); they are re-exported
//! here as [`wecom_callback_body`], [`wecom_decrypt`] and
//! [`wecom_message_xml`] so every target calls into this module.

pub use hermes_platform_kit::fuzz_entry::{command, split_message, split_message_with};

#[cfg(feature = "wecom_callback")]
pub use hermes_wecom_callback::{
    fuzz_callback_body as wecom_callback_body, fuzz_decrypt as wecom_decrypt,
    fuzz_message_xml as wecom_message_xml,
};

#[cfg(feature = "telegram")]
pub use telegram::{telegram_format, telegram_updates};

#[cfg(feature = "telegram")]
mod telegram {
    use crate::command::parse_command;
    use crate::telegram::format::markdown_to_html;
    use crate::telegram::{BotIdentity, GroupPolicy, read_answer, take_batch, translate};

    /// A `getUpdates` answer, read the way the poll loop reads it: the
    /// offset only moves forward and past every update handed on, and
    /// every update translates (or is skipped) without a panic, keeping its
    /// ids.
    ///
    /// Input: one byte picks the current offset, the rest is the body.
    pub fn telegram_updates(data: &[u8]) {
        let Some((&pick, body)) = data.split_first() else {
            return;
        };
        let offset = match pick % 4 {
            0 => None,
            1 => Some(0),
            2 => Some(i64::from(pick)),
            _ => Some(i64::MAX),
        };
        for status in [200u16, 429, 502] {
            let answer = read_answer(status, body);
            if !(200..300).contains(&status) {
                assert!(answer.is_err(), "HTTP {status} read as success");
            }
        }
        let Ok(result) = read_answer(200, body) else {
            return;
        };
        let batch = take_batch(result, offset);
        if let (Some(o), Some(n)) = (offset, batch.next) {
            assert!(n >= o, "the offset went back from {o} to {n}");
        }
        if offset.is_some() {
            assert!(batch.next.is_some());
        }
        let bot = BotIdentity {
            id: 42,
            username: Some("HermesBot".into()),
        };
        let policies = [
            GroupPolicy::default(),
            GroupPolicy {
                respond_to_all: true,
                ..GroupPolicy::default()
            },
        ];
        for (id, update) in batch.updates {
            assert!(
                offset.is_none_or(|o| id >= o),
                "update {id} is below {offset:?}"
            );
            assert!(batch.next.is_some_and(|n| n > id || n == i64::MAX));
            let Ok(update) = update else { continue };
            for policy in &policies {
                if let Ok(inbound) = translate(update.clone(), &bot, policy) {
                    assert_eq!(inbound.event.source.chat_id, inbound.chat_id.to_string());
                    assert_eq!(inbound.event.message_id, inbound.message_id.to_string());
                    assert!(!inbound.event.source.user_id.is_empty());
                    let _ = parse_command(&inbound.event.text);
                }
            }
        }
    }

    /// Telegram formatting: whatever the Markdown, the HTML is well formed
    /// for Telegram (only its tags, properly nested, nothing inside `code`
    /// or `pre` but `pre > code`, no link in a link, attribute values and
    /// text escaped), and its visible text is no longer than the source (so
    /// a piece cut to the limit stays within it).
    pub fn telegram_format(data: &[u8]) {
        let source = String::from_utf8_lossy(data);
        let html = markdown_to_html(&source);
        let visible = check_telegram_html(&html);
        let limit = source.encode_utf16().count();
        assert!(
            visible <= limit,
            "{visible} visible units from {limit}: {source:?} → {html:?}"
        );
    }

    /// Checks the HTML and returns its visible length in UTF-16 units.
    fn check_telegram_html(html: &str) -> usize {
        let mut open: Vec<&str> = Vec::new();
        let mut visible = 0usize;
        let mut rest = html;
        while let Some(c) = rest.chars().next() {
            match c {
                '<' => {
                    let end = rest
                        .find('>')
                        .unwrap_or_else(|| panic!("unterminated tag in {html:?}"));
                    let tag = &rest[1..end];
                    rest = &rest[end + 1..];
                    if let Some(name) = tag.strip_prefix('/') {
                        assert_eq!(open.pop(), Some(name), "misnested </{name}> in {html:?}");
                        continue;
                    }
                    let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
                    let parent = open.last().copied();
                    match name {
                        "b" | "i" | "s" => assert!(attrs.is_empty(), "{html:?}"),
                        "a" => {
                            let url = attrs
                                .strip_prefix("href=\"")
                                .and_then(|a| a.strip_suffix('"'))
                                .unwrap_or_else(|| panic!("bad link {tag:?} in {html:?}"));
                            check_escaped(url, html);
                            assert!(!open.contains(&"a"), "a link in a link: {html:?}");
                        }
                        "pre" => assert!(attrs.is_empty(), "{html:?}"),
                        "code" => {
                            if !attrs.is_empty() {
                                assert_eq!(parent, Some("pre"), "{html:?}");
                                let lang = attrs
                                    .strip_prefix("class=\"language-")
                                    .and_then(|a| a.strip_suffix('"'))
                                    .unwrap_or_else(|| panic!("bad class {tag:?}"));
                                assert!(!lang.is_empty() && !lang.contains(['"', '<', '>', '&']));
                            }
                        }
                        other => panic!("tag <{other}> Telegram does not know, in {html:?}"),
                    }
                    let inside_code =
                        matches!(parent, Some("code")) || (parent == Some("pre") && name != "code");
                    assert!(!inside_code, "<{name}> inside <{parent:?}>: {html:?}");
                    open.push(name);
                }
                '&' => {
                    let entity = ["&amp;", "&lt;", "&gt;", "&quot;"]
                        .into_iter()
                        .find(|e| rest.starts_with(e))
                        .unwrap_or_else(|| panic!("a raw & in {html:?}"));
                    rest = &rest[entity.len()..];
                    visible += 1;
                }
                '>' => panic!("a raw > in {html:?}"),
                c => {
                    visible += c.len_utf16();
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        assert!(open.is_empty(), "unclosed {open:?} in {html:?}");
        visible
    }

    fn check_escaped(value: &str, html: &str) {
        assert!(
            !value.contains(['"', '<', '>']),
            "unescaped attribute in {html:?}"
        );
        let mut rest = value;
        while let Some(at) = rest.find('&') {
            rest = &rest[at..];
            let entity = ["&amp;", "&lt;", "&gt;", "&quot;"]
                .into_iter()
                .find(|e| rest.starts_with(e))
                .unwrap_or_else(|| panic!("a raw & in an attribute of {html:?}"));
            rest = &rest[entity.len()..];
        }
    }
}

#[cfg(feature = "wecom")]
pub use wecom::{wecom_frame, wecom_merge};

#[cfg(feature = "wecom")]
mod wecom {
    use std::collections::HashMap;
    use std::time::Duration;

    use serde_json::Value;

    use crate::command::parse_command;
    use crate::event::{ChatType, MessageEvent, MessageType, SessionSource};
    use crate::wecom::merge::{FragmentMerger, MergeConfig};
    use crate::wecom::wire::{self, Inbound};

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
}
