//! The repeat guard (SPEC Y6): a model that keeps making the same call and
//! getting the same result is told so, then asked for an answer.
//!
//! A call's *signature* is a hash of the tool's name, its arguments in
//! canonical JSON (object keys sorted, so `{"a":1,"b":2}` and
//! `{"b":2,"a":1}` are one call) and the result it got. Counting signatures
//! over the whole turn, not only consecutive ones, catches cycles too: in
//! `A, B, A, B, A` the signature of `A` has been seen three times.
//!
//! From the `warn_after`-th sighting the tool result carries a note that the
//! call was already made and its result will not change; from the
//! `stop_after`-th the next model call is made with `tool_choice = none`
//! and the result says so, so the model answers from what it has. Only the
//! hashes are kept (8 bytes and a count per distinct call), never the
//! results.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

/// When the repeat guard steps in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepeatGuard {
    warn_after: u32,
    stop_after: u32,
}

/// A repeat-guard setting that makes no sense.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepeatGuardError(pub String);

impl fmt::Display for RepeatGuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for RepeatGuardError {}

impl RepeatGuard {
    /// The default: a note from the 3rd identical call, answer from the 5th.
    pub const DEFAULT: RepeatGuard = RepeatGuard {
        warn_after: 3,
        stop_after: 5,
    };

    /// A guard that notes from the `warn_after`-th identical call and stops
    /// tools after the `stop_after`-th. The first call of anything is never
    /// a repeat, so `warn_after` is at least 2; a stop before the warning
    /// would skip it, so `stop_after` is at least `warn_after`.
    pub fn new(warn_after: u32, stop_after: u32) -> Result<Self, RepeatGuardError> {
        if warn_after < 2 {
            return Err(RepeatGuardError(format!(
                "warn_after = {warn_after}: the first call is never a repeat; use 2 or more"
            )));
        }
        if stop_after < warn_after {
            return Err(RepeatGuardError(format!(
                "stop_after = {stop_after} is below warn_after = {warn_after}"
            )));
        }
        Ok(RepeatGuard {
            warn_after,
            stop_after,
        })
    }

    /// The sighting from which results carry a note.
    pub fn warn_after(&self) -> u32 {
        self.warn_after
    }

    /// The sighting after which tools are turned off.
    pub fn stop_after(&self) -> u32 {
        self.stop_after
    }
}

impl Default for RepeatGuard {
    fn default() -> Self {
        RepeatGuard::DEFAULT
    }
}

/// What the guard makes of one answered call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Not (yet) a repeat worth a word.
    Fresh,
    /// The `n`-th identical call: the result gets a note.
    Warn(u32),
    /// The `n`-th identical call: tools go off for the next model call.
    Stop(u32),
}

/// The signatures seen in one run.
#[derive(Debug, Default)]
pub(super) struct RepeatTracker {
    seen: Vec<(u64, u32)>,
}

impl RepeatTracker {
    /// Records one answered call and judges it.
    pub(super) fn observe(
        &mut self,
        guard: &RepeatGuard,
        name: &str,
        arguments: &str,
        result: &str,
    ) -> Verdict {
        let signature = signature(name, arguments, result);
        let count = match self.seen.iter_mut().find(|(s, _)| *s == signature) {
            Some((_, n)) => {
                *n = n.saturating_add(1);
                *n
            }
            None => {
                self.seen.push((signature, 1));
                1
            }
        };
        if count >= guard.stop_after {
            Verdict::Stop(count)
        } else if count >= guard.warn_after {
            Verdict::Warn(count)
        } else {
            Verdict::Fresh
        }
    }
}

/// The note a repeated result carries.
pub(super) fn warn_note(name: &str, count: u32) -> String {
    format!(
        "\n\n[hermes: this is call {count} of `{name}` with these same arguments in this turn, \
         and it returned this same result every time; calling it again will not change it. \
         Use what you have, or try something different.]"
    )
}

/// The note on the result that stopped the loop.
pub(super) fn stop_note(name: &str, count: u32) -> String {
    format!(
        "\n\n[hermes: `{name}` was called {count} times with the same arguments and returned \
         the same result each time. Tools are off for your next reply: answer the user now \
         from what you have gathered, and say what is still missing.]"
    )
}

/// The note on the last result before the wallet's final call.
pub(super) const LAST_CALL_NOTE: &str = "\n\n[hermes: the iteration budget is spent. Tools are \
     off for your next reply: answer the user now from what you have gathered, and say what \
     is still missing.]";

/// The hash of (name, canonical arguments, result).
fn signature(name: &str, arguments: &str, result: &str) -> u64 {
    let mut h = Fnv::new();
    h.bytes(name.as_bytes());
    h.byte(0);
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value) => canonical(&value, &mut h),
        // Unparseable arguments got an error result; hash them as written.
        Err(_) => h.bytes(arguments.as_bytes()),
    }
    h.byte(0);
    h.bytes(result.as_bytes());
    h.finish()
}

/// Feeds `value` to the hash with object keys in sorted order, whatever
/// order the map keeps them in.
fn canonical(value: &serde_json::Value, h: &mut Fnv) {
    use serde_json::Value;
    match value {
        Value::Null => h.byte(b'n'),
        Value::Bool(b) => h.byte(if *b { b't' } else { b'f' }),
        Value::Number(n) => {
            h.byte(b'#');
            // Display of a Number is its canonical text; written straight
            // into the hash, without a String.
            let _ = write!(h, "{n}");
        }
        Value::String(s) => {
            h.byte(b'"');
            h.bytes(s.as_bytes());
            h.byte(b'"');
        }
        Value::Array(items) => {
            h.byte(b'[');
            for item in items {
                canonical(item, h);
                h.byte(b',');
            }
            h.byte(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            h.byte(b'{');
            for key in keys {
                h.byte(b'"');
                h.bytes(key.as_bytes());
                h.byte(b'"');
                if let Some(v) = map.get(key) {
                    canonical(v, h);
                }
                h.byte(b',');
            }
            h.byte(b'}');
        }
    }
}

/// An FNV-1a-style 64-bit hash, fed a word at a time: tiny, `no_std`, and
/// good enough to tell calls apart (a collision would only add a note to a
/// call that was not a repeat).
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Fnv(Self::OFFSET)
    }

    fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(Self::PRIME);
    }

    /// Eight bytes per step (then the rest one by one): tool results run
    /// to kilobytes, and this runs on every one of them.
    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0 ^ u64::from_le_bytes(word))
                .wrapping_mul(Self::PRIME)
                .rotate_left(29);
        }
        for &b in chunks.remainder() {
            self.byte(b);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Write for Fnv {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_make_a_new_call() {
        assert_eq!(
            signature("t", r#"{"a":1,"b":[true,null]}"#, "r"),
            signature("t", r#"{ "b" : [true, null], "a": 1 }"#, "r")
        );
        assert_ne!(
            signature("t", r#"{"a":1}"#, "r"),
            signature("t", r#"{"a":2}"#, "r")
        );
        assert_ne!(
            signature("t", r#"{"a":1}"#, "r"),
            signature("u", r#"{"a":1}"#, "r")
        );
        assert_ne!(
            signature("t", r#"{"a":1}"#, "r"),
            signature("t", r#"{"a":1}"#, "s")
        );
        assert_ne!(
            signature("t", r#"{"a":"1"}"#, "r"),
            signature("t", r#"{"a":1}"#, "r")
        );
    }

    #[test]
    fn settings_are_validated() {
        assert!(RepeatGuard::new(1, 5).is_err());
        assert!(RepeatGuard::new(4, 3).is_err());
        assert_eq!(RepeatGuard::new(3, 5), Ok(RepeatGuard::DEFAULT));
        assert!(RepeatGuard::new(2, 2).is_ok());
    }
}
