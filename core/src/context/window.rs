//! The model's context window: a size in tokens and where it came from,
//! shared by every agent on the same model so that a limit learned from one
//! provider error helps them all.

use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Where a context window size came from, most trusted first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowSource {
    /// Set by the user (`[provider] context_length`, `HERMES_CONTEXT_LENGTH`).
    Configured,
    /// Reported by the provider's own metadata (`/models`, `/props`, …).
    Provider,
    /// Stated by the provider in a context-length error and learned from it.
    Learned,
    /// The built-in table of well-known model families.
    Table,
    /// Nothing else knew: the conservative default.
    Default,
}

impl WindowSource {
    /// A short name for display (`/status`, `hermes doctor`).
    pub const fn as_str(self) -> &'static str {
        match self {
            WindowSource::Configured => "configured",
            WindowSource::Provider => "provider metadata",
            WindowSource::Learned => "learned from a provider error",
            WindowSource::Table => "built-in model table",
            WindowSource::Default => "default",
        }
    }

    const fn to_u8(self) -> u8 {
        match self {
            WindowSource::Configured => 0,
            WindowSource::Provider => 1,
            WindowSource::Learned => 2,
            WindowSource::Table => 3,
            WindowSource::Default => 4,
        }
    }

    const fn from_u8(v: u8) -> Self {
        match v {
            0 => WindowSource::Configured,
            1 => WindowSource::Provider,
            2 => WindowSource::Learned,
            3 => WindowSource::Table,
            _ => WindowSource::Default,
        }
    }
}

impl fmt::Display for WindowSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The smallest window the context manager accepts: below this no system
/// prompt and reply fit, and the arithmetic of the policy degenerates.
pub const MIN_WINDOW_TOKENS: u32 = 512;

/// A context window size, shared (behind an `Arc`) and updatable: an agent
/// that hits a provider's context-length error lowers it for every agent
/// holding the same handle.
#[derive(Debug)]
pub struct ContextWindow {
    tokens: AtomicU32,
    source: AtomicU8,
}

impl ContextWindow {
    /// A window of `tokens` (at least [`MIN_WINDOW_TOKENS`]) from `source`.
    pub fn new(tokens: u32, source: WindowSource) -> Self {
        ContextWindow {
            tokens: AtomicU32::new(tokens.max(MIN_WINDOW_TOKENS)),
            source: AtomicU8::new(source.to_u8()),
        }
    }

    /// The window size in tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens.load(Ordering::Acquire)
    }

    /// Where the current size came from.
    pub fn source(&self) -> WindowSource {
        WindowSource::from_u8(self.source.load(Ordering::Acquire))
    }

    /// Takes the limit a provider stated in a context-length error. Only
    /// ever shrinks the window (an error about a bigger limit than ours is
    /// about something else, such as `max_tokens`); returns whether it
    /// changed.
    pub fn learn(&self, stated: u32) -> bool {
        let stated = stated.max(MIN_WINDOW_TOKENS);
        let previous = self.tokens.fetch_min(stated, Ordering::AcqRel);
        if stated < previous {
            self.source
                .store(WindowSource::Learned.to_u8(), Ordering::Release);
            true
        } else {
            false
        }
    }
}
