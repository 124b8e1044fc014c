//! A tool's parameter schema written as JSON text in the source, made
//! compact when the program is compiled ([`schema_text!`]).
//!
//! Why text: `serde_json::json!` expands into code that builds the value a
//! node at a time (≈ 9× the size of the text: a seven-field schema was
//! 7.5 KB of code), and every start built every tool's tree — maps,
//! strings, their pages — only for the request encoder to walk it back
//! into the same text (issue 39). The text is what the request carries.
//!
//! [`schema_text!`]: crate::schema_text

/// Whether `byte` is JSON's insignificant whitespace (RFC 8259, `ws`).
const fn is_json_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// Writes `text` without the whitespace outside its strings into `out`,
/// as much of it as fits, and says how long the whole compact text is.
/// Only ASCII whitespace is left out, so what stays is UTF-8 still.
const fn compact_into(text: &str, out: &mut [u8]) -> usize {
    let bytes = text.as_bytes();
    let mut n = 0;
    let mut i = 0;
    let mut in_string = false;
    let mut escaped = false;
    while i < bytes.len() {
        let b = bytes[i];
        let keep = if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            true
        } else if is_json_space(b) {
            false
        } else {
            in_string = b == b'"';
            true
        };
        if keep {
            if n < out.len() {
                out[n] = b;
            }
            n += 1;
        }
        i += 1;
    }
    n
}

/// How many bytes of `text` stay once the whitespace outside its strings
/// is left out.
#[doc(hidden)]
pub const fn compact_len(text: &str) -> usize {
    compact_into(text, &mut [])
}

/// `text` without the whitespace outside its strings, `N` bytes long
/// (`N` = [`compact_len`]`(text)`).
#[doc(hidden)]
pub const fn compact<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    compact_into(text, &mut out);
    out
}

/// The compact form of a JSON text literal, made at compile time: a
/// `&'static str` with the whitespace outside strings left out.
///
/// Whether the text is JSON is checked where it becomes a definition's
/// [`parameters`](crate::ToolSpec::parameters) (`RawValue::from_string`).
///
/// ```
/// const SCHEMA: &str = hermes_core::schema_text!(
///     r#"{
///         "type": "object",
///         "properties": {"path": {"type": "string", "description": "A file, or \"-\"."}}
///     }"#
/// );
/// assert_eq!(
///     SCHEMA,
///     r#"{"type":"object","properties":{"path":{"type":"string","description":"A file, or \"-\"."}}}"#
/// );
/// ```
#[macro_export]
macro_rules! schema_text {
    ($text:expr $(,)?) => {{
        const TEXT: &str = $text;
        const COMPACT: [u8; $crate::tool::schema_text::compact_len(TEXT)] =
            $crate::tool::schema_text::compact(TEXT);
        const STR: &str = match ::core::str::from_utf8(&COMPACT) {
            Ok(text) => text,
            Err(_) => panic!("a schema's compact text is not UTF-8"),
        };
        STR
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn whitespace_inside_strings_and_escapes_stays() {
        const T: &str =
            crate::schema_text!("{ \"a b\" : [ 1 ,\t\"x\\\" y\\\\\" ] ,\n \"é\": \"\\n \" }");
        assert_eq!(T, "{\"a b\":[1,\"x\\\" y\\\\\"],\"é\":\"\\n \"}");
    }

    #[test]
    fn an_empty_text_stays_empty() {
        const T: &str = crate::schema_text!("  \n ");
        assert_eq!(T, "");
    }
}
