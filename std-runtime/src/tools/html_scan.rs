//! A small HTML scanner for the search backends' result pages: start tags
//! with their attributes, end tags, and text, entities decoded (the common named ones and every numeric one;
//! `web_fetch`'s HTML reduction decodes with the same function).
//!
//! It replaced the `html5gum` tokenizer (issue 39, item 3): that crate
//! carries the whole WHATWG table of 2,231 named character references as
//! string pairs — ≈ 4,500 relative relocations, dirtied at every start of
//! every process — while these pages need a handful of tags and the common
//! entities. Not a conforming HTML parser: comments, doctypes and processing
//! instructions are skipped, `<script>` and `<style>` contents are dropped,
//! a `<` that opens no tag is text, and an unterminated tag ends the input.
//! Linear in the input; never panics (`std-runtime/tests/hostile_bytes.rs`
//! drives it through the DuckDuckGo parser).

/// One piece of a page.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// `<name attr="value" …>`: the name lower-cased, values decoded.
    Start {
        name: String,
        attributes: Vec<(String, String)>,
        self_closing: bool,
    },
    /// `</name>`.
    End,
    /// Text between tags, entities decoded.
    Text(String),
}

impl Piece {
    /// The value of a start tag's attribute `name`.
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        match self {
            Piece::Start { attributes, .. } => attributes
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

/// The pieces of `html`, in order.
pub(crate) fn scan(html: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            push_text(&mut out, rest);
            break;
        };
        push_text(&mut out, &rest[..lt]);
        rest = &rest[lt..];
        let after = &rest[1..];
        if let Some(comment) = after.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
        } else if after.starts_with(['!', '?']) {
            rest = after.find('>').map_or("", |end| &after[end + 1..]);
        } else if let Some(closing) = after.strip_prefix('/') {
            if closing.starts_with(|c: char| c.is_ascii_alphabetic()) {
                out.push(Piece::End);
                rest = closing.find('>').map_or("", |end| &closing[end + 1..]);
            } else {
                push_text(&mut out, "<");
                rest = after;
            }
        } else if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let (piece, left) = start_tag(after);
            rest = left;
            if let Piece::Start {
                name,
                self_closing: false,
                ..
            } = &piece
                && (name == "script" || name == "style")
            {
                // Raw text: skipped up to its end tag.
                let close = format!("</{name}");
                rest = find_ascii_case_insensitive(rest, &close).map_or("", |at| &rest[at..]);
                continue;
            }
            out.push(piece);
        } else {
            push_text(&mut out, "<");
            rest = after;
        }
    }
    out
}

fn push_text(out: &mut Vec<Piece>, raw: &str) {
    if raw.is_empty() {
        return;
    }
    let text = decode_entities(raw);
    if let Some(Piece::Text(last)) = out.last_mut() {
        last.push_str(&text);
    } else {
        out.push(Piece::Text(text));
    }
}

/// A start tag from just after its `<`; returns the tag and what follows
/// its `>`.
fn start_tag(s: &str) -> (Piece, &str) {
    let name_end = s
        .find(|c: char| c.is_ascii_whitespace() || c == '>' || c == '/')
        .unwrap_or(s.len());
    let name = s[..name_end].to_ascii_lowercase();
    let mut rest = &s[name_end..];
    let mut attributes = Vec::new();
    let mut self_closing = false;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix('>') {
            rest = after;
            break;
        }
        if let Some(after) = rest.strip_prefix('/') {
            self_closing = after.starts_with('>');
            rest = after;
            continue;
        }
        let key_end = rest
            .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '>' || c == '/')
            .unwrap_or(rest.len())
            .max(rest.chars().next().map_or(0, char::len_utf8));
        let key = rest[..key_end].to_ascii_lowercase();
        rest = rest[key_end..].trim_start_matches(|c: char| c.is_ascii_whitespace());
        let mut value = String::new();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start_matches(|c: char| c.is_ascii_whitespace());
            let (raw, left) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    match body.find(q) {
                        Some(end) => (&body[..end], &body[end + 1..]),
                        None => (body, ""),
                    }
                }
                _ => {
                    let end = after
                        .find(|c: char| c.is_ascii_whitespace() || c == '>')
                        .unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            value = decode_entities(raw);
            rest = left;
        }
        if !attributes.iter().any(|(k, _): &(String, String)| *k == key) {
            attributes.push((key, value));
        }
    }
    (
        Piece::Start {
            name,
            attributes,
            self_closing,
        },
        rest,
    )
}

/// Where `needle` (ASCII) first occurs in `hay`, ignoring ASCII case.
fn find_ascii_case_insensitive(hay: &str, needle: &str) -> Option<usize> {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    (0..hay.len().saturating_sub(needle.len() - 1))
        .find(|&i| hay[i..i + needle.len()].eq_ignore_ascii_case(needle))
}

/// Decodes the common named entities and all numeric ones; unknown entities
/// are kept as written.
pub(crate) fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // Entities are short; look for the `;` in the first bytes only.
        // Bytes, not a string slice: the 12th byte may fall inside a
        // multi-byte character (`&amp;中文`), and `;` is ASCII, so its
        // index is always a char boundary.
        let semi = rest.as_bytes().iter().take(12).position(|&b| b == b';');
        let decoded = semi.and_then(|semi| {
            let name = &rest[1..semi];
            let c = if let Some(num) = name.strip_prefix('#') {
                let code = match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse::<u32>().ok(),
                };
                code.and_then(char::from_u32)
            } else {
                named_entity(name)
            };
            c.map(|c| (c, semi))
        });
        match decoded {
            Some((c, semi)) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn named_entity(name: &str) -> Option<char> {
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "laquo" => '«',
        "raquo" => '»',
        "middot" => '·',
        "bull" => '•',
        "deg" => '°',
        "times" => '×',
        "euro" => '€',
        "pound" => '£',
        "eacute" => 'é',
        "egrave" => 'è',
        "uuml" => 'ü',
        "ouml" => 'ö',
        "auml" => 'ä',
        "szlig" => 'ß',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(name: &str, attributes: &[(&str, &str)]) -> Piece {
        Piece::Start {
            name: name.to_owned(),
            attributes: attributes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            self_closing: false,
        }
    }

    #[test]
    fn tags_attributes_and_text_with_entities() {
        let pieces = scan(
            "<!DOCTYPE html><!-- x > y --><A class=\"result__a\" HREF='/l/?u=a&amp;b' data-x=1 hidden>\
             R&amp;D &lt;3</a><br/>tail",
        );
        assert_eq!(
            pieces,
            vec![
                start(
                    "a",
                    &[
                        ("class", "result__a"),
                        ("href", "/l/?u=a&b"),
                        ("data-x", "1"),
                        ("hidden", "")
                    ]
                ),
                Piece::Text("R&D <3".into()),
                Piece::End,
                Piece::Start {
                    name: "br".into(),
                    attributes: vec![],
                    self_closing: true
                },
                Piece::Text("tail".into()),
            ]
        );
        assert_eq!(pieces[0].attribute("href"), Some("/l/?u=a&b"));
    }

    #[test]
    fn scripts_styles_and_stray_brackets() {
        let pieces = scan("a < b <script>if (x</y) {}</SCRIPT><style>p{}</style>c </ d");
        let text: String = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "a < b c </ d");
    }

    #[test]
    fn unterminated_input_ends_without_panicking() {
        for s in [
            "<",
            "<a",
            "<a href=\"x",
            "<!--",
            "</",
            "<a b='",
            "é<é",
            "<a é=é>",
            "&#xFFFFFFFF;<",
        ] {
            let _ = scan(s);
        }
    }
}
