//! The gateway runner end to end, through the in-process test adapter, a
//! scripted model whose pace the test controls, and a real SQLite store in a
//! temp dir.
//!
//! Determinism: nothing here waits for a fixed time and hopes. Tests wait for
//! observable states (a reply sent, the model blocked in a call) with
//! generous timeouts, and where an ordering must hold they make it hold — for
//! example by holding the store lock so a turn cannot finish while messages
//! are injected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod busy;
mod commands;
mod crash;
mod lifecycle;
mod routing;
mod support;
