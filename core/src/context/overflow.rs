//! Recognising a provider's "the request does not fit" error, and the limit
//! it states.
//!
//! Providers word it differently, and several OpenAI-compatible servers
//! copy OpenAI's sentence. The phrases below were collected from real error
//! bodies (the test fixtures in `core/tests/fixtures/overflow/` cite where
//! each one was seen):
//!
//! | provider | wording (abridged) | limit |
//! |---|---|---|
//! | OpenAI, Groq, DeepSeek, llama-cpp-python, older vLLM | `This model's maximum context length is N tokens. However, …` / code `context_length_exceeded` | `N` |
//! | OpenRouter | `This endpoint's maximum context length is N tokens. However, you requested about …` | `N` |
//! | newer vLLM | `This model's maximum context length is N tokens. However, your request has … input tokens` | `N` |
//! | vLLM (long prompt) | `… is longer than the maximum model length of N` | `N` |
//! | Anthropic | `prompt is too long: M tokens > N maximum` | `N` |
//! | llama.cpp server | `the request exceeds the available context size …`, type `exceed_context_size_error`, `"n_ctx": N` | `N` |
//! | llama-cpp-python (raw) | `Requested tokens (M) exceed context window of N` | `N` |
//! | Mistral | `Prompt contains M tokens … too large for model with N maximum context length` | `N` |
//! | Gemini (OpenAI-compatible) | `The input token count (M) exceeds the maximum number of tokens allowed (N)` | `N` |
//! | LM Studio (MLX) | `Context size has been exceeded` | — |
//!
//! Matching is on lower-cased text, by plain substring search (no regex in
//! a `no_std` core); numbers may contain `,` or `_` separators.

use alloc::string::String;

/// What a context-length error said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overflow {
    /// The context window the provider named, in tokens.
    pub window: Option<u32>,
    /// The size it said the request had, in tokens, when it said.
    pub requested: Option<u32>,
}

/// Phrases that mean "the request is too long for the window".
const MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "exceed_context_size_error",
    "exceeds the available context size",
    "exceed context window",
    "exceeds context window",
    "context window exceeded",
    "prompt is too long",
    "maximum model length",
    "context size has been exceeded",
    "exceeds the maximum number of tokens allowed",
    "input is too long for",
];

/// Phrases followed (after a few separator characters) by the window size.
const WINDOW_BEFORE: &[&str] = &[
    "maximum context length is",
    "context window of",
    "maximum model length of",
    "maximum number of tokens allowed (",
    "\"n_ctx\":",
    "context length of",
];

/// Phrases preceded by the window size.
const WINDOW_AFTER: &[&str] = &["maximum context length", "maximum"];

/// Phrases followed by the request's size.
const REQUESTED_BEFORE: &[&str] = &[
    "you requested about",
    "you requested",
    "resulted in",
    "prompt is too long:",
    "\"n_prompt_tokens\":",
    "requested tokens (",
    "your request has",
    "prompt contains",
    "input token count (",
    "prompt (length",
];

/// Whether `text` (an error body or message) is a context-length error, and
/// what it says about the limit. `None` for any other error.
pub fn classify(text: &str) -> Option<Overflow> {
    let lower = text.to_lowercase();
    if !MARKERS.iter().any(|m| lower.contains(m)) {
        return None;
    }
    let window = WINDOW_BEFORE
        .iter()
        .find_map(|p| number_after(&lower, p))
        .or_else(|| WINDOW_AFTER.iter().find_map(|p| number_before(&lower, p)));
    let requested = REQUESTED_BEFORE
        .iter()
        .find_map(|p| number_after(&lower, p));
    Some(Overflow { window, requested })
}

/// The first number within a few characters after the first `phrase`.
fn number_after(text: &str, phrase: &str) -> Option<u32> {
    let start = text.find(phrase)? + phrase.len();
    let rest = &text[start..];
    let skip = rest
        .char_indices()
        .take(4)
        .find(|(_, c)| c.is_ascii_digit())
        .map(|(i, _)| i)?;
    parse_number(&rest[skip..])
}

/// The number ending within a few characters before some `phrase`
/// (`… 200000 maximum`, `… with 32768 maximum context length`).
fn number_before(text: &str, phrase: &str) -> Option<u32> {
    let mut from = 0;
    while let Some(found) = text[from..].find(phrase) {
        let at = from + found;
        let before = text[..at].trim_end();
        let digits_start = before
            .rfind(|c: char| !(c.is_ascii_digit() || c == ',' || c == '_'))
            .map_or(0, |i| i + 1);
        if digits_start < before.len()
            && let Some(n) = parse_number(&before[digits_start..])
        {
            return Some(n);
        }
        from = at + phrase.len();
    }
    None
}

/// Leading digits of `s`, allowing `,` and `_` between them.
fn parse_number(s: &str) -> Option<u32> {
    let mut digits = String::new();
    for c in s.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ',' | '_' if !digits.is_empty() => {}
            _ => break,
        }
    }
    digits.parse().ok().filter(|n| *n > 0)
}
