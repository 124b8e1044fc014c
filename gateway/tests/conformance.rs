//! The adapter conformance suite (issue 41 §1): every platform adapter, one
//! set of promises, checked against real gateways. The kit is
//! `conformance_kit` (its doc says how a platform plugs in); each
//! platform's harness is `conformance/NAME.rs`, behind its cargo feature.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod conformance_kit;

#[cfg(feature = "discord")]
mod discord_support;
#[cfg(feature = "slack")]
mod slack_support;
#[cfg(feature = "telegram")]
mod telegram_support;

/// One harness per platform.
mod conformance {
    #[cfg(feature = "discord")]
    pub mod discord;
    #[cfg(feature = "slack")]
    pub mod slack;
    #[cfg(feature = "telegram")]
    pub mod telegram;
}

#[cfg(feature = "telegram")]
conformance_tests!(telegram, crate::conformance::telegram::Telegram);
#[cfg(feature = "discord")]
conformance_tests!(discord, crate::conformance::discord::Discord);
#[cfg(feature = "slack")]
#[path = "conformance/slack_direct.rs"]
mod slack_direct;
#[cfg(feature = "slack")]
conformance_tests!(slack, crate::conformance::slack::Slack);
