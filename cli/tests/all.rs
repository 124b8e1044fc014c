//! The CLI's integration tests, one test binary (issue 40: every test
//! binary costs a link in every CI run). Each module is what used to be its
//! own binary, so a test is named `sandbox::...`; `cli` holds the process
//! and terminal tests of the `hermes` command (`tests/cli/`).
//!
//! Test modules are loaded with `#[path]` so that their own `mod x;` lines
//! resolve to `tests/x/mod.rs` as they did when each was a crate root.

// The Telegram fake several modules run the gateway against.
#[path = "../../gateway/tests/telegram_support/mod.rs"]
mod telegram_support;

// One module per former test binary.
#[path = "board_smoke.rs"]
mod board_smoke;
#[path = "cli/main.rs"]
mod cli;
#[path = "gateway_daemon.rs"]
mod gateway_daemon;
#[path = "pairing.rs"]
mod pairing;
#[path = "providers.rs"]
mod providers;
#[path = "sandbox.rs"]
mod sandbox;
#[path = "x7_tools.rs"]
mod x7_tools;
