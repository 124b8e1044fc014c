//! Decoding of the stored `messages.tool_calls` JSON.
//!
//! The store writes tool calls with `serde_json::to_string(&[ToolCall])`,
//! always in the same compact shape:
//!
//! ```text
//! [{"id":"…","type":"function","function":{"name":"…","arguments":"…"}},…]
//! ```
//!
//! Loading a transcript (SPEC G5, before every run) decodes one such array
//! per tool-calling assistant message, and going through serde's generic
//! map machinery was about an eighth of the whole load. [`decode`] reads
//! exactly that shape directly and hands anything else — other key order,
//! whitespace, `\u` escapes, an older writer's output, hand edits — to
//! serde, so the result is always what serde would return.

use hermes_core::ToolCall;

/// Decodes a stored tool-call array; same result as
/// `serde_json::from_str::<Vec<ToolCall>>(json)`.
pub fn decode(json: &str) -> Result<Vec<ToolCall>, serde_json::Error> {
    match decode_canonical(json) {
        Some(calls) => Ok(calls),
        None => serde_json::from_str(json),
    }
}

/// The fast path: `None` unless `json` is exactly the canonical shape.
fn decode_canonical(json: &str) -> Option<Vec<ToolCall>> {
    let mut p = Cursor { s: json, i: 0 };
    p.expect("[")?;
    let mut calls = Vec::with_capacity(1);
    loop {
        p.expect("{\"id\":")?;
        let id = p.string()?;
        p.expect(",\"type\":\"function\",\"function\":{\"name\":")?;
        let name = p.string()?;
        p.expect(",\"arguments\":")?;
        let arguments = p.string()?;
        p.expect("}}")?;
        calls.push(ToolCall::new(id, name, arguments));
        if p.expect(",").is_none() {
            break;
        }
    }
    p.expect("]")?;
    (p.i == json.len()).then_some(calls)
}

struct Cursor<'a> {
    s: &'a str,
    /// Byte offset; always on a char boundary (we only stop at ASCII).
    i: usize,
}

impl Cursor<'_> {
    fn expect(&mut self, lit: &str) -> Option<()> {
        let rest = self.s.get(self.i..)?;
        rest.starts_with(lit).then(|| self.i += lit.len())
    }

    /// A JSON string with the escapes serde_json writes other than `\u`
    /// (which it uses only for control characters); `None` for anything
    /// else, including raw control characters, which JSON forbids.
    fn string(&mut self) -> Option<String> {
        self.expect("\"")?;
        let rest = self.s.get(self.i..)?;
        // One pass to the closing quote, noting whether anything is escaped,
        // so the result is allocated once at its final size.
        let bytes = rest.as_bytes();
        let mut end = 0;
        let mut escaped = false;
        loop {
            match *bytes.get(end)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    end += 2;
                }
                b if b < 0x20 => return None,
                _ => end += 1,
            }
        }
        // The stop byte is ASCII, so `end` is a char boundary.
        let raw = rest.get(..end)?;
        self.i += end + 1;
        if !escaped {
            return Some(raw.to_owned());
        }
        let mut out = String::with_capacity(raw.len());
        let mut parts = raw.split('\\');
        out.push_str(parts.next()?);
        // After each backslash: the escape letter, then plain text. An
        // escaped backslash splits into an empty part, handled by the flag.
        let mut literal_backslash = false;
        for part in parts {
            if literal_backslash {
                literal_backslash = false;
                out.push_str(part);
                continue;
            }
            let mut chars = part.chars();
            let decoded = match chars.next() {
                None => {
                    // `\\`: this empty part was the first backslash.
                    literal_backslash = true;
                    '\\'
                }
                Some('"') => '"',
                Some('/') => '/',
                Some('b') => '\u{8}',
                Some('f') => '\u{c}',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('t') => '\t',
                Some(_) => return None,
            };
            out.push(decoded);
            out.push_str(chars.as_str());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use rand::{RngExt, SeedableRng};

    /// Pieces that exercise every escape and multi-byte UTF-8.
    const PIECES: &[&str] = &[
        "a",
        "path",
        " ",
        "\"",
        "\\",
        "/",
        "\n",
        "\r",
        "\t",
        "\u{8}",
        "\u{c}",
        "\u{1}",
        "\u{1f}",
        "\u{7f}",
        "é",
        "Hà Nội",
        "日本",
        "🚀",
        "{\"k\":[1,2]}",
        "\\u0041",
        "'",
        "}",
        "]",
        ",",
        ":",
    ];

    fn random_string(rng: &mut impl RngExt) -> String {
        let n = rng.random_range(0..8);
        (0..n)
            .map(|_| PIECES[rng.random_range(0..PIECES.len())])
            .collect()
    }

    #[test]
    fn agrees_with_serde_on_what_the_store_writes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut fast = 0;
        for _ in 0..5_000 {
            let calls: Vec<ToolCall> = (0..rng.random_range(1..4))
                .map(|_| {
                    ToolCall::new(
                        random_string(&mut rng),
                        random_string(&mut rng),
                        random_string(&mut rng),
                    )
                })
                .collect();
            let json = serde_json::to_string(&calls).unwrap();
            assert_eq!(decode(&json).unwrap(), calls, "{json}");
            // serde_json writes \u escapes only for control characters
            // other than \b \f \n \r \t; exactly those leave the fast path.
            let needs_u = calls.iter().any(|c| {
                [&c.id, &c.function.name, &c.function.arguments]
                    .iter()
                    .any(|s| {
                        s.chars()
                            .any(|ch| ch < ' ' && !"\u{8}\u{c}\n\r\t".contains(ch))
                    })
            });
            match decode_canonical(&json) {
                Some(direct) => {
                    assert!(!needs_u, "{json}");
                    assert_eq!(direct, calls, "{json}");
                    fast += 1;
                }
                None => assert!(needs_u, "fast path refused {json}"),
            }
        }
        assert!(fast > 1_000, "fast path taken only {fast} times");
    }

    #[test]
    fn anything_else_gets_serdes_answer() {
        let cases = [
            "[]",
            "",
            "[",
            "null",
            "{}",
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}},]"#,
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}}] "#,
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}}]x"#,
            r#"[ {"id":"a","type":"function","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"type":"function","id":"a","function":{"arguments":"x","name":"n"}}]"#,
            r#"[{"id":"a","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"id":"a","type":"other","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"id":"\u0041\ud83d\ude80","type":"function","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"id":"\x","type":"function","function":{"name":"n","arguments":"x"}}]"#,
            r#"[{"id":"a\","type":"function","function":{"name":"n","arguments":"x"}}]"#,
            "[{\"id\":\"a\tb\",\"type\":\"function\",\"function\":{\"name\":\"n\",\"arguments\":\"x\"}}]",
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}}"#,
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"}}{"#,
            r#"[{"id":"a","type":"function","function":{"name":"n","arguments":"x"#,
            r#"[{"id":1,"type":"function","function":{"name":"n","arguments":"x"}}]"#,
        ];
        for json in cases {
            let serde = serde_json::from_str::<Vec<ToolCall>>(json);
            match (decode(json), serde) {
                (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "{json}"),
                (Err(_), Err(_)) => {}
                (ours, theirs) => panic!("{json}: ours {ours:?}, serde {theirs:?}"),
            }
        }
    }
}
