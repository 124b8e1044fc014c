//! The real `hermes` binary against a scripted loopback provider: process
//! tests (arguments, stdin, exit codes, files) and PTY tests (what a person
//! at a terminal sees and types).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup;
mod config;
mod context;
mod cron;
mod database;
mod extras;
mod foreign_home;
mod frugal;
mod import;
mod interactive;
mod kept;
mod local;
mod memory;
mod oneshot;
mod sessions;
mod skills;
mod speech;
#[path = "../../../gateway/tests/speech_support/mod.rs"]
mod speech_support;
mod support;
mod symbol_orders;
