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

use alloc::string::String;
use alloc::sync::Arc;
use core::fmt;

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
/// Whether the text is JSON is checked where a debug build makes it a
/// definition's [`parameters`](crate::ToolSpec::parameters)
/// ([`SchemaText::from_static`]).
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

/// A tool's parameter schema: a JSON text, compact as the request carries
/// it, which the request encoders copy into the body as it is.
///
/// JSON by construction: written from a value ([`from_value`]), the
/// program's own literals ([`from_static`]) or text made from another
/// schema text by a transformation that keeps it JSON ([`from_trusted`]);
/// the last two are checked by every debug build that makes them, which
/// every test that builds a tool does. Not a `serde_json::value::RawValue`:
/// that parses its text whenever one is made, and every start made one for
/// each built-in tool (≈ 150 k instructions, 5 % of a 0-turn one-shot,
/// issue 39).
///
/// [`from_value`]: Self::from_value
/// [`from_static`]: Self::from_static
/// [`from_trusted`]: Self::from_trusted
#[derive(Clone)]
pub struct SchemaText(Repr);

/// A literal is borrowed for the program's life; anything else is shared:
/// the registry keeps a copy of every definition and the request encoder
/// another.
#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Shared(Arc<str>),
}

impl SchemaText {
    /// A schema the program carries as a literal (most often one that
    /// [`schema_text!`](crate::schema_text) made compact).
    pub fn from_static(text: &'static str) -> Self {
        debug_assert_json(text);
        SchemaText(Repr::Static(text))
    }

    /// A built value's text (an MCP server's schema, a test's).
    pub fn from_value(value: &serde_json::Value) -> Self {
        // A `Value` always serializes (its keys are strings); `{}` is only
        // the type system's due.
        let text = serde_json::to_string(value).unwrap_or_else(|_| String::from("{}"));
        SchemaText(Repr::Shared(Arc::from(text)))
    }

    /// Text made from another schema's text by a transformation that keeps
    /// it JSON (the small window's compact form: dropping members). Not
    /// checked in a release build: a text that is not JSON would make a
    /// request the provider refuses, with its error.
    pub fn from_trusted(text: String) -> Self {
        debug_assert_json(&text);
        SchemaText(Repr::Shared(Arc::from(text)))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(text) => text,
            Repr::Shared(text) => text,
        }
    }

    /// The schema as a value, parsed from its text (`null` should it not
    /// parse, which its constructors do not let happen).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.as_str()).unwrap_or_default()
    }

    /// Whether both are the same text in memory (one literal, one share):
    /// the request encoder compares its kept definitions at every call.
    pub fn is_same(&self, other: &Self) -> bool {
        let (a, b) = (self.as_str(), other.as_str());
        core::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()
    }
}

/// Equal when the texts are; the same text in memory is equal at once.
impl PartialEq for SchemaText {
    fn eq(&self, other: &Self) -> bool {
        self.is_same(other) || self.as_str() == other.as_str()
    }
}

impl Eq for SchemaText {}

impl fmt::Debug for SchemaText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A debug build's check that `text` is JSON.
fn debug_assert_json(text: &str) {
    if cfg!(debug_assertions)
        && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text)
    {
        panic!("a tool's schema is not JSON ({e}): {text}");
    }
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
    fn a_value_a_literal_and_a_trusted_text_compare_by_text() {
        use super::SchemaText;
        const T: &str = crate::schema_text!(r#"{ "type": "object" }"#);
        let literal = SchemaText::from_static(T);
        let built = SchemaText::from_value(&serde_json::json!({"type": "object"}));
        let trusted = SchemaText::from_trusted(alloc::string::String::from(T));
        assert_eq!(literal, built);
        assert_eq!(built, trusted);
        assert!(literal.is_same(&literal.clone()));
        assert!(!literal.is_same(&built));
        assert_eq!(built.to_value(), serde_json::json!({"type": "object"}));
        assert_eq!(alloc::format!("{literal:?}"), r#""{\"type\":\"object\"}""#);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not JSON")]
    fn a_debug_build_refuses_a_literal_that_is_not_json() {
        let _ = super::SchemaText::from_static(r#"{"type":"object""#);
    }

    #[test]
    fn an_empty_text_stays_empty() {
        const T: &str = crate::schema_text!("  \n ");
        assert_eq!(T, "");
    }
}
