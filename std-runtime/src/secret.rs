//! [`Secret`]: a key, token or password that cannot be printed by accident.
//!
//! Its `Debug` and `Display` show only [`mask`](crate::redact::mask)'s stub
//! (`sk-…1234`), so a settings struct that holds one can derive `Debug` and
//! a field added later cannot leak by someone forgetting to hide it. The
//! value itself comes out only through [`Secret::expose`], which reads as
//! what it is at the one place that sends it (SPEC E2).

use std::fmt;

use crate::redact::mask;

/// A secret string. See the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself: for the header, the handshake or the signature
    /// that needs it — never for a log line, a message or a tool.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", mask(&self.0))
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mask(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_show_only_the_mask() {
        let key = Secret::new("sk-or-v1-0123456789abcdef");
        for shown in [format!("{key:?}"), format!("{key}"), format!("{key:#?}")] {
            assert!(!shown.contains("0123456789"), "{shown}");
            assert!(shown.contains("sk-…cdef"), "{shown}");
        }
        assert_eq!(key.expose(), "sk-or-v1-0123456789abcdef");
        assert_eq!(format!("{}", Secret::from("short")), "****");
        assert!(Secret::default().is_empty());
    }

    #[test]
    fn a_derived_debug_of_a_struct_holding_one_masks_it() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Settings {
            name: String,
            token: Secret,
            other: Option<Secret>,
        }
        let s = Settings {
            name: "bot".into(),
            token: "123456:ABCDEF-the-bot-token".into(),
            other: Some(Secret::new("password-1234567")),
        };
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains("the-bot-token"), "{shown}");
        assert!(!shown.contains("password-1234567"), "{shown}");
        assert!(shown.contains("bot"), "{shown}");
    }
}
