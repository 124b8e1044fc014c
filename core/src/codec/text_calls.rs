//! Tool calls a model wrote as text (issue 38).
//!
//! Small local models served without a tool-call parser (llama.cpp's server
//! without `--jinja`, Ollama with a template that does not know the model,
//! vLLM without `--tool-call-parser`) write the call into the answer's
//! content instead of `tool_calls`. [`parse`] recognises the formats they
//! use, each with an optional leading `<think>…</think>` block and any
//! surrounding whitespace:
//!
//! - `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, once or several
//!   times (Hermes, Qwen);
//! - `<|python_tag|>{"name": …, "parameters": {…}}` (Llama 3.x), optionally
//!   ended by `<|eom_id|>` or `<|eot_id|>`;
//! - `[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]` and
//!   `[TOOL_CALLS]name[ARGS]{…}` (Mistral);
//! - a bare JSON object `{"name": …, "arguments": {…}}` that is the whole
//!   message.
//!
//! # Guarantees
//! - **All or nothing.** The message is a call only if *all* of it is: one
//!   or more well-formed calls, each naming a tool that was offered, and
//!   nothing else but whitespace and the leading think block. JSON inside
//!   prose or a code fence, a call to a tool that was not offered, broken
//!   JSON, an unclosed tag, more than [`MAX_TOOL_CALLS`] calls: the message
//!   stays text, exactly as written. A wrong guess would run a tool the
//!   model only described; a missed one leaves text the user can read.
//! - **Arguments are a JSON object**, re-serialized compactly (a model that
//!   wrote them as a JSON string holding an object is forgiven). Whether
//!   they fit the tool's schema is the tool's business, as for a native call.
//! - **Pure and total**: no IO, no panic on any input (fuzzed through
//!   `fuzz_entry::text_calls`).
//!
//! [`may_be_call`] is the streaming side: whether the text received so far
//! could still turn out to be a call, so the loop holds it back instead of
//! showing it to the user as the answer.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use super::MAX_TOOL_CALLS;

/// One call found in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextCall {
    /// The tool's name, one of the offered names.
    pub name: String,
    /// The arguments, a JSON object in compact form.
    pub arguments: String,
}

/// A message that is wholly tool calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextCalls {
    /// The calls, in the order written.
    pub calls: Vec<TextCall>,
    /// The text of a leading `<think>…</think>` block, trimmed; the loop
    /// keeps it as the entry's reasoning.
    pub thinking: Option<String>,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const LLAMA_TAG: &str = "<|python_tag|>";
const LLAMA_ENDS: [&str; 2] = ["<|eom_id|>", "<|eot_id|>"];
const MISTRAL_TAG: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";

/// How a call may begin, after the think block.
const OPENINGS: [&str; 4] = [HERMES_OPEN, LLAMA_TAG, MISTRAL_TAG, "{"];

/// The calls `text` consists of, if it is nothing but calls to tools in
/// `offered`; `None` when it is (or may be) an answer.
pub fn parse(text: &str, offered: &[&str]) -> Option<TextCalls> {
    let (thinking, body) = split_think(text)?;
    let calls = if let Some(rest) = body.strip_prefix(HERMES_OPEN) {
        hermes(rest)?
    } else if let Some(rest) = body.strip_prefix(LLAMA_TAG) {
        llama(rest)?
    } else if let Some(rest) = body.strip_prefix(MISTRAL_TAG) {
        mistral(rest.trim_start())?
    } else if body.starts_with('{') {
        let object = object(body)?;
        // A bare object is the riskiest form (an answer may well be JSON):
        // it must hold the name and the arguments and nothing else.
        let known = ["name", "arguments", "parameters"];
        if object.len() != 2 || object.keys().any(|k| !known.contains(&k.as_str())) {
            return None;
        }
        if !object.contains_key("arguments") && !object.contains_key("parameters") {
            return None;
        }
        Vec::from([call(&Value::Object(object))?])
    } else {
        return None;
    };
    let fits = !calls.is_empty()
        && calls.len() <= MAX_TOOL_CALLS
        && calls.iter().all(|c| offered.contains(&c.name.as_str()));
    fits.then(|| TextCalls {
        calls,
        thinking: thinking.map(ToString::to_string),
    })
}

/// Whether text streamed so far (`prefix`) could still be the start of a
/// message [`parse`] accepts. Once false, it stays false however the text
/// goes on, so a caller can stop holding text back at the first `false`.
pub fn may_be_call(prefix: &str) -> bool {
    let start = prefix.trim_start();
    let body = match start.strip_prefix(THINK_OPEN) {
        Some(rest) => match rest.find(THINK_CLOSE) {
            Some(at) => rest[at + THINK_CLOSE.len()..].trim_start(),
            None => return true,
        },
        None if THINK_OPEN.starts_with(start) => return true,
        None => start,
    };
    OPENINGS
        .iter()
        .any(|o| body.starts_with(o) || o.starts_with(body))
}

/// The optional think block and the trimmed rest; `None` for an unclosed
/// think block or an empty rest.
fn split_think(text: &str) -> Option<(Option<&str>, &str)> {
    let text = text.trim();
    let (thinking, body) = match text.strip_prefix(THINK_OPEN) {
        Some(rest) => {
            let at = rest.find(THINK_CLOSE)?;
            let thinking = rest[..at].trim();
            let body = rest[at + THINK_CLOSE.len()..].trim_start();
            ((!thinking.is_empty()).then_some(thinking), body)
        }
        None => (None, text),
    };
    (!body.is_empty()).then_some((thinking, body))
}

/// `<tool_call>…</tool_call>` blocks, after the first opening tag.
fn hermes(mut rest: &str) -> Option<Vec<TextCall>> {
    let mut calls = Vec::new();
    loop {
        let end = rest.find(HERMES_CLOSE)?;
        calls.push(call(&Value::Object(object(rest[..end].trim())?))?);
        if calls.len() > MAX_TOOL_CALLS {
            return None;
        }
        rest = rest[end + HERMES_CLOSE.len()..].trim_start();
        if rest.is_empty() {
            return Some(calls);
        }
        rest = rest.strip_prefix(HERMES_OPEN)?;
    }
}

/// `<|python_tag|>` then one call object (or an array of them).
fn llama(rest: &str) -> Option<Vec<TextCall>> {
    let mut body = rest.trim();
    for end in LLAMA_ENDS {
        if let Some(b) = body.strip_suffix(end) {
            body = b.trim_end();
        }
    }
    calls_of(serde_json::from_str(body).ok()?)
}

/// After `[TOOL_CALLS]`: a JSON array of calls, or `name[ARGS]{…}` pieces.
fn mistral(rest: &str) -> Option<Vec<TextCall>> {
    if rest.starts_with('[') || rest.starts_with('{') {
        return calls_of(serde_json::from_str(rest).ok()?);
    }
    // The v11 tokenizer's form: `name[ARGS]{…}`, repeated after
    // `[TOOL_CALLS]` for each further call.
    let mut calls = Vec::new();
    for piece in rest.split(MISTRAL_TAG) {
        let (name, args) = piece.trim().split_once(MISTRAL_ARGS)?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        let arguments = object(args.trim())?;
        calls.push(TextCall {
            name: name.into(),
            arguments: serde_json::to_string(&Value::Object(arguments)).ok()?,
        });
        if calls.len() > MAX_TOOL_CALLS {
            return None;
        }
    }
    Some(calls)
}

/// One call object or an array of them.
fn calls_of(value: Value) -> Option<Vec<TextCall>> {
    match value {
        Value::Array(items) if items.len() <= MAX_TOOL_CALLS => items.iter().map(call).collect(),
        Value::Object(_) => Some(Vec::from([call(&value)?])),
        _ => None,
    }
}

/// A JSON object and nothing else.
fn object(text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(text).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// `{"name": "…", "arguments"|"parameters": {…}}`; missing arguments are
/// an empty object, arguments written as a string must hold an object.
fn call(value: &Value) -> Option<TextCall> {
    let map = value.as_object()?;
    let name = map.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = match map.get("arguments").or_else(|| map.get("parameters")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(Value::String(s)) => object(s.trim())?,
        Some(_) => return None,
    };
    Some(TextCall {
        name: name.into(),
        arguments: serde_json::to_string(&Value::Object(arguments)).ok()?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OFFERED: &[&str] = &["read_file", "terminal"];

    fn names(text: &str) -> Option<Vec<String>> {
        parse(text, OFFERED).map(|p| p.calls.into_iter().map(|c| c.name).collect())
    }

    #[test]
    fn prefixes_stay_undecided_until_they_cannot_be_a_call() {
        for held in [
            "",
            "  ",
            "<",
            "<thi",
            "<think>",
            "<think>hmm",
            "<think>x</think>",
            "<think>x</think> <tool",
            "{",
            " {\"na",
            "[TOOL",
            "<|python",
            "<tool_call>{",
        ] {
            assert!(may_be_call(held), "{held:?}");
        }
        for shown in [
            "Hello",
            "<b>",
            "<think>x</think>Sure",
            "[1, 2]",
            "```json",
            "Here: {",
        ] {
            assert!(!may_be_call(shown), "{shown:?}");
        }
    }

    #[test]
    fn a_message_is_a_call_only_when_it_is_all_calls() {
        assert_eq!(
            names("{\"name\":\"terminal\",\"arguments\":{}}").unwrap(),
            ["terminal"]
        );
        assert_eq!(
            names("{\"name\":\"terminal\"}"),
            None,
            "a bare object needs its arguments"
        );
        assert_eq!(
            names("{\"name\":\"terminal\",\"arguments\":{},\"x\":1}"),
            None
        );
        assert_eq!(
            names("<tool_call>{\"name\":\"terminal\"}</tool_call> and then"),
            None
        );
        assert_eq!(
            names("[TOOL_CALLS]terminal[ARGS]{\"command\":\"ls\"}").unwrap(),
            ["terminal"]
        );
        assert_eq!(names("[TOOL_CALLS]rm -rf[ARGS]{}"), None);
    }
}
