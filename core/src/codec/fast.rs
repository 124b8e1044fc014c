//! The fast path for the chunks that make up nearly every stream: a content
//! delta, a tool call's fragment (its id and name, then its arguments a few
//! bytes at a time), or the finish chunk that ends each answer, each in a
//! full envelope.
//!
//! Most of a chunk's bytes are envelope (`id`, `model`, `system_fingerprint`,
//! …) that the decoder throws away; a validating skim over them, appending the
//! unescaped content straight into the accumulated text, is several times
//! cheaper than a general deserializer and allocates nothing for content
//! (a tool call's escaped strings are unescaped into their own `String`, as
//! serde does).
//!
//! **Contract:** [`chunk`] either declines (`None`, leaving `out` as it was)
//! or returns exactly what the serde path would have decoded: the document
//! is valid JSON (UTF-8 checked up front, string escapes, number grammar,
//! nesting capped below serde_json's limit, no trailing bytes), no field the
//! serde path reads is duplicated, and every field that would carry
//! something else (`usage`, `error`, reasoning and its details, refusal) is
//! absent or `null`; `finish_reason` is `null` or a string without escapes;
//! `tool_calls` holds at most [`TOOL_DELTAS`] calls whose `index` is a plain
//! unsigned integer. Anything unusual — escaped keys, surrogate escapes
//! outside the strings the decoder keeps — declines, and the serde path
//! decides.

use alloc::borrow::Cow;
use alloc::string::String;

/// Deeper nesting than this declines (serde_json errors at 128).
const MAX_DEPTH: u32 = 100;

/// Tool-call fragments one chunk may carry on this path (a stream sends
/// one at a time); a chunk with more declines.
pub(crate) const TOOL_DELTAS: usize = 4;

/// One fragment of a tool call, as either path reads it: the call it
/// continues (by `index`, else by `id`), and text to join to its id, name
/// and arguments.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolDelta<'a> {
    pub(crate) index: Option<u32>,
    pub(crate) id: Option<Cow<'a, str>>,
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) arguments: Option<Cow<'a, str>>,
}

/// What a handled chunk carried besides its content.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FastChunk<'a> {
    /// The first choice's `finish_reason`, when a non-empty string.
    pub(crate) finish_reason: Option<&'a str>,
    /// The first choice's tool-call fragments, in order.
    pub(crate) tool_calls: heapless::Vec<ToolDelta<'a>, TOOL_DELTAS>,
}

/// Appends the content of a chunk to `out`, and the rest of what it
/// carries to `found` (the caller's, empty: a chunk is hundreds of bytes
/// big with its tool calls, and content chunks, nearly all of a stream,
/// would copy it back and forth for nothing — 11 % of the decoder's time).
/// `Some` when the chunk was handled (the appended text may be empty);
/// `None` to decline, `out` as it was and `found` to be dropped.
pub(crate) fn chunk<'a>(data: &'a [u8], out: &mut String, found: &mut FastChunk<'a>) -> Option<()> {
    let start = out.len();
    let result = core::str::from_utf8(data).ok().and_then(|s| {
        let mut cur = Cursor {
            s,
            b: data,
            i: 0,
            found,
        };
        cur.document(out)?;
        found.finish_reason = found.finish_reason.filter(|r| !r.is_empty());
        Some(())
    });
    if result.is_none() {
        out.truncate(start);
    }
    result
}

struct Cursor<'a, 'f> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    /// The first choice's finish reason and tool calls, once read.
    found: &'f mut FastChunk<'a>,
}

impl<'a> Cursor<'a, '_> {
    fn document(&mut self, out: &mut String) -> Option<()> {
        let mut seen_choices = false;
        let mut seen_usage = false;
        self.object(|cur, key| {
            match key {
                "choices" => {
                    if core::mem::replace(&mut seen_choices, true) {
                        return None;
                    }
                    if !cur.null() {
                        cur.choices(out)?;
                    }
                }
                "usage" => {
                    if core::mem::replace(&mut seen_usage, true) {
                        return None;
                    }
                    cur.expect_null()?;
                }
                "error" => return None,
                _ => cur.skip_value(1)?,
            }
            Some(())
        })?;
        self.ws();
        (self.i == self.b.len()).then_some(())
    }

    fn choices(&mut self, out: &mut String) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Some(());
        }
        self.choice(out)?;
        loop {
            self.ws();
            match self.next()? {
                b',' => {
                    self.ws();
                    self.skip_value(2)?;
                }
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    fn choice(&mut self, out: &mut String) -> Option<()> {
        self.known_fields(["delta", "finish_reason"], 3, |cur, slot| {
            if slot == 0 {
                cur.delta(out)
            } else {
                // A word such as `stop` or `tool_calls`; an escaped one
                // declines.
                cur.found.finish_reason = Some(cur.plain_string()?);
                Some(())
            }
        })
    }

    /// The content goes to `out`; any other non-null field but the tool
    /// calls declines.
    fn delta(&mut self, out: &mut String) -> Option<()> {
        const NAMES: [&str; 6] = [
            "content",
            "refusal",
            "reasoning_content",
            "reasoning",
            "tool_calls",
            "reasoning_details",
        ];
        self.known_fields(NAMES, 4, |cur, slot| match slot {
            0 if cur.peek() == Some(b'"') => cur.string_into(out),
            4 => cur.tool_calls(),
            _ => None,
        })
    }

    /// `[ call, … ]` into `found.tool_calls`.
    fn tool_calls(&mut self) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Some(());
        }
        loop {
            let call = self.tool_call()?;
            self.found.tool_calls.push(call).ok()?;
            self.ws();
            match self.next()? {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// `{"index": n, "id": "…", "function": {"name": "…", "arguments": "…"}}`,
    /// each part optional or `null`, other keys (`type`) skipped.
    fn tool_call(&mut self) -> Option<ToolDelta<'a>> {
        let mut call = ToolDelta::default();
        self.known_fields(["index", "id", "function"], 6, |cur, slot| {
            match slot {
                0 => call.index = Some(cur.index()?),
                1 => call.id = Some(cur.text()?),
                _ => cur.function(&mut call)?,
            }
            Some(())
        })?;
        Some(call)
    }

    fn function(&mut self, call: &mut ToolDelta<'a>) -> Option<()> {
        self.known_fields(["name", "arguments"], 7, |cur, slot| {
            let text = Some(cur.text()?);
            if slot == 0 {
                call.name = text;
            } else {
                call.arguments = text;
            }
            Some(())
        })
    }

    /// A `u32` written as plain digits; anything else (a sign, a fraction,
    /// an exponent, too large) is not one to serde either, and declines.
    fn index(&mut self) -> Option<u32> {
        let start = self.i;
        self.number()?;
        self.s.get(start..self.i)?.parse().ok()
    }

    /// A string value, borrowed when it has no escapes.
    fn text(&mut self) -> Option<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let at = self.i;
        if let Some(plain) = self.plain_string() {
            return Some(Cow::Borrowed(plain));
        }
        self.i = at;
        let mut unescaped = String::new();
        self.string_into(&mut unescaped)?;
        Some(Cow::Owned(unescaped))
    }

    /// An object as serde's derive reads one: each of `names` at most once
    /// (a repeat declines), `null` the same as absent, other keys' values
    /// skipped at `depth`. `field` gets the cursor on a named key's non-null
    /// value and the key's place in `names`.
    fn known_fields<const N: usize>(
        &mut self,
        names: [&str; N],
        depth: u32,
        mut field: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let mut seen = [false; N];
        self.object(|cur, key| {
            let Some(slot) = names.iter().position(|&name| name == key) else {
                return cur.skip_value(depth);
            };
            if core::mem::replace(seen.get_mut(slot)?, true) {
                return None;
            }
            if cur.null() {
                return Some(());
            }
            field(cur, slot)
        })
    }

    /// `{ "key": value, … }`, calling `field` with the cursor on each value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.ws();
        self.eat(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.plain_string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            field(self, key)?;
            self.ws();
            match self.next()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A string without escapes: a key, or a finish reason (an escaped one
    /// declines).
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        self.i = find_string_special(self.b, self.i);
        let key = self.s.get(start..self.i)?;
        self.eat(b'"')?;
        Some(key)
    }

    /// Unescapes a string value into `out` (cursor on the opening quote).
    fn string_into(&mut self, out: &mut String) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let run = self.i;
            self.i = find_string_special(self.b, self.i);
            out.push_str(self.s.get(run..self.i)?);
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    };
                    out.push(c);
                }
                _ => return None,
            }
        }
    }

    /// After `\u`: one code point, joining a surrogate pair; lone surrogates
    /// decline (serde_json rejects them).
    fn unicode_escape(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        match hi {
            0xD800..=0xDBFF => {
                self.eat(b'\\')?;
                self.eat(b'u')?;
                let lo = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return None;
                }
                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
            }
            0xDC00..=0xDFFF => None,
            _ => char::from_u32(hi),
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut v = 0;
        for _ in 0..4 {
            let d = char::from(self.next()?).to_digit(16)?;
            v = v * 16 + d;
        }
        Some(v)
    }

    /// Skips a string, validating it (cursor on the opening quote).
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i = find_string_special(self.b, self.i);
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        // Surrogates outside the content: let serde decide.
                        if (0xD800..=0xDFFF).contains(&self.hex4()?) {
                            return None;
                        }
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(|cur, _| cur.skip_value(depth + 1)),
            b'[' => {
                self.i += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => {}
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digit()?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digit()?;
            self.digits();
        }
        Some(())
    }

    fn digit(&mut self) -> Option<()> {
        self.next().filter(u8::is_ascii_digit).map(|_| ())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// Consumes `null` if it is next.
    fn null(&mut self) -> bool {
        self.literal(b"null").is_some()
    }

    fn expect_null(&mut self) -> Option<()> {
        self.literal(b"null")
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `x` that is below `n` (`n <= 128`). Bytes
/// above the first match may be flagged spuriously (borrows), so only the
/// lowest flag is meaningful — which is all the searches below use.
#[inline]
const fn bytes_below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(LO * n as u64) & !x & HI
}

/// High bit set in each byte of `x` equal to `b` (lowest flag exact).
#[inline]
const fn bytes_equal(x: u64, b: u8) -> u64 {
    bytes_below(x ^ (LO * b as u64), 1)
}

/// The first index at or after `from` whose byte satisfies `flag` (checked
/// eight bytes at a time) / `is`, or `bytes.len()`.
#[inline]
fn find_first(
    bytes: &[u8],
    from: usize,
    flag: impl Fn(u64) -> u64,
    is: impl Fn(u8) -> bool,
) -> usize {
    let Some(tail) = bytes.get(from..) else {
        return bytes.len();
    };
    let (words, rest) = tail.as_chunks::<8>();
    for (n, word) in words.iter().enumerate() {
        let m = flag(u64::from_le_bytes(*word));
        if m != 0 {
            return from + n * 8 + (m.trailing_zeros() / 8) as usize;
        }
    }
    let done = from + words.len() * 8;
    rest.iter()
        .position(|&c| is(c))
        .map_or(bytes.len(), |p| done + p)
}

/// The next `"`, `\\` or control byte in a JSON string.
fn find_string_special(bytes: &[u8], from: usize) -> usize {
    find_first(
        bytes,
        from,
        |x| bytes_equal(x, b'"') | bytes_equal(x, b'\\') | bytes_below(x, 0x20),
        |c| c == b'"' || c == b'\\' || c < 0x20,
    )
}

/// The next `\r` or `\n`, if any.
pub(super) fn find_line_end(bytes: &[u8]) -> Option<usize> {
    let at = find_first(
        bytes,
        0,
        |x| bytes_equal(x, b'\n') | bytes_equal(x, b'\r'),
        |c| c == b'\n' || c == b'\r',
    );
    (at < bytes.len()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_searches_find_the_first_match_anywhere() {
        for len in 0..40 {
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut v = alloc::vec![b'a'; len];
                    v[at] = special;
                    // Later matches and high bytes must not disturb the answer.
                    if at + 1 < len {
                        v[len - 1] = 0x01;
                    }
                    assert_eq!(find_string_special(&v, 0), at, "{len} {at} {special}");
                    for from in 0..=at {
                        assert_eq!(find_string_special(&v, from), at);
                    }
                }
                let mut v = alloc::vec![0xC3; len];
                v[at] = b'\r';
                assert_eq!(find_line_end(&v), Some(at));
                v[at] = b'\n';
                assert_eq!(find_line_end(&v), Some(at));
            }
            assert_eq!(find_string_special(&alloc::vec![0xFF; len], 0), len);
            assert_eq!(find_line_end(&alloc::vec![b' '; len]), None);
        }
        assert_eq!(find_string_special(b"ab", 5), 2);
    }
}
