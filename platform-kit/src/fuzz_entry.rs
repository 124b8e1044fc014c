//! Entry points for the fuzz targets of the kit's parsers (re-exported by
//! the gateway's `fuzz_entry`, which every fuzz target calls). Not API.
//!
//! Each function takes untrusted bytes, runs a parser over them and panics
//! when one of the parser's promises breaks.

use crate::command::{Command, parse_command};
use crate::split::{LengthUnit, MIN_LIMIT, Piece, is_fence_line, split_pieces};

/// Whether a fence is open at the end of `text`, read from its start.
fn ends_open(text: &str) -> bool {
    text.split('\n').filter(|l| is_fence_line(l)).count() % 2 == 1
}

/// `split_message`'s promises for one text, limit and unit: every piece
/// fits, the bodies rebuild the text exactly, and every piece renders with
/// its fences closed (the last one may keep the author's unclosed fence).
/// Returns the rendered pieces.
pub fn split_message_with(text: &str, limit: usize, unit: LengthUnit) -> Vec<String> {
    let pieces = split_pieces(text, limit, unit);
    let bodies: String = pieces.iter().map(|p| p.body).collect();
    assert_eq!(bodies, text, "the bodies do not rebuild the text");
    assert!(!pieces.is_empty());
    let widest = text
        .chars()
        .map(|c| unit.measure(c.encode_utf8(&mut [0; 4])))
        .max()
        .unwrap_or(0);
    let rendered: Vec<String> = pieces.iter().map(Piece::render).collect();
    let text_ends_open = ends_open(text);
    for (i, piece) in rendered.iter().enumerate() {
        let units = unit.measure(piece);
        assert!(
            units <= limit.max(MIN_LIMIT),
            "piece {i} of {} has {units} units (limit {limit}): {piece:?}",
            rendered.len()
        );
        if !text.contains("```") && limit >= widest {
            assert!(units <= limit, "piece {i} has {units} units: {piece:?}");
        }
        let last = i + 1 == rendered.len();
        if !(last && text_ends_open) {
            assert!(
                !ends_open(piece),
                "piece {i} leaves a fence open: {piece:?}"
            );
        }
        if rendered.len() > 1 {
            assert!(!pieces[i].body.is_empty(), "empty piece {i}");
        }
    }
    rendered
}

/// [`split_message_with`] on bytes: two bytes pick the limit, one the unit,
/// the rest is the text.
pub fn split_message(data: &[u8]) {
    let (params, rest) = data.split_at(data.len().min(3));
    let param = |i: usize| params.get(i).copied().unwrap_or(0);
    let limit = usize::from(u16::from_le_bytes([param(0), param(1)]) % 600);
    let unit = match param(2) % 3 {
        0 => LengthUnit::Chars,
        1 => LengthUnit::Utf16,
        _ => LengthUnit::Bytes,
    };
    let text = String::from_utf8_lossy(rest);
    split_message_with(&text, limit, unit);
}

/// Slash commands: a command starts with `/` after blanks, its word is
/// ASCII letters, digits or `_`, its argument is trimmed, and leading
/// blanks change nothing.
pub fn command(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = parse_command(&text);
    if let Some(cmd) = &parsed {
        assert!(text.trim_start().starts_with('/'), "{text:?}");
        match cmd {
            Command::Unknown(word) => assert!(
                !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{word:?}"
            ),
            Command::Model(Some(arg)) => {
                assert!(!arg.is_empty() && arg.trim() == arg, "{arg:?}");
            }
            _ => {}
        }
    }
    assert_eq!(parse_command(&format!(" \t{text}")), parsed);
}
