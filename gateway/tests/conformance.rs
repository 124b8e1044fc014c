//! The adapter conformance suite (issue 41 §1): every platform adapter, one
//! set of promises, checked against real gateways. The kit is
//! `conformance_kit` (its doc says how a platform plugs in); each
//! platform's harness is `conformance/NAME.rs`, behind its cargo feature.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod conformance_kit;

#[cfg(feature = "signal")]
mod signal_support;
#[cfg(feature = "telegram")]
mod telegram_support;

/// One harness per platform.
mod conformance {
    #[cfg(feature = "signal")]
    pub mod signal;
    #[cfg(feature = "telegram")]
    pub mod telegram;
}

#[cfg(feature = "telegram")]
conformance_tests!(telegram, crate::conformance::telegram::Telegram);
/// Signal passes the promises; its kill -9 soak fails and is not run by
/// default: signal-cli acknowledges a message to Signal's server when a
/// `receive` takes it, so a `receive` still running when the gateway is
/// SIGKILLed takes the next message into an answer nobody reads (the fake
/// daemon does what signal-cli does). Measured: 20 rounds, 17 SIGKILLs,
/// 17 messages lost — each the first one written after a kill.
/// ARCHITECTURE.md, "Signal", says what would fix it.
#[cfg(feature = "signal")]
mod signal {
    #[test]
    fn promises() {
        crate::conformance_kit::suite::run::<crate::conformance::signal::Signal>(
            "signal::promises",
        );
    }

    #[test]
    #[ignore = "signal-cli's receive has no acknowledgement: a SIGKILL loses the message its running receive takes"]
    fn kill_9_soak() {
        crate::conformance_kit::soak::run::<crate::conformance::signal::Signal>(
            "signal::kill_9_soak",
        );
    }
}
