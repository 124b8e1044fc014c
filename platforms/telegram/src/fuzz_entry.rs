//! Entry points for the fuzz targets in `fuzz/` and the gateway's
//! proptests and corpus replay (the gateway's `fuzz_entry` re-exports
//! them): untrusted bytes through Telegram's parsers, a panic when one of
//! their promises breaks. Not API.

use crate::format::markdown_to_html;
use crate::{BotIdentity, GroupPolicy, read_answer, take_batch, translate};
use hermes_platform_kit::command::parse_command;

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
                rest = rest.get(end..).and_then(|r| r.get(1..)).unwrap_or_default();
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
                visible = visible.saturating_add(1);
            }
            '>' => panic!("a raw > in {html:?}"),
            c => {
                visible = visible.saturating_add(c.len_utf16());
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
