//! What an adapter costs, through the same harness as its promises
//! (issues 41, 42: BENCHMARKS.md "Adapters: idle RSS and messages per
//! second"): a real gateway — the release `hermes` named by
//! [`super::gateway::EXE_ENV`], else the re-run test binary — serving one
//! platform against its peer and the scripted provider.
//!
//! 1. **Idle RSS:** one DM answered (everything a turn touches is paged
//!    in), then the gateway left alone for `HERMES_MEASURE_SETTLE_SECS`
//!    (default 5) and its `VmRSS` read from `/proc`.
//! 2. **Messages per second through the whole path:**
//!    `HERMES_MEASURE_MESSAGES` (default 100) DMs in rounds: each of the
//!    harness's users writes one (its own token), the round ends when all
//!    are answered; the clock stops when the last one is answered (peer → adapter → inbox →
//!    turn → provider → store → adapter → peer). Every message must be
//!    answered exactly once, or the measurement fails.
//!
//! Prints one tab-separated line (`measure`, platform, figures) for the
//! script to collect. `#[ignore]`d: a figure, not a check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::gateway::{env_number, serve_if_child};
use super::suite::{World, answer};
use super::{Harness, Place, SaidMark, Sender};

/// Runs the measurement on `H` (the test `test`, by its full name).
pub fn run<H: Harness>(test: &str) {
    // The child serves first: it runs with a cleared environment, where
    // the components' variables are not set (`gateway.rs`).
    serve_if_child();
    if !hermes_tests::tier::require(H::needs()) {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut world = World::<H>::new(test, &rt);
    world.start();
    let pid = world.gateway_pid().expect("the gateway runs");

    let (token, posted) = world.ask(Sender::User(0), Place::Dm, "warm up");
    world.await_answer(&token, &posted);
    let settle = env_number("HERMES_MEASURE_SETTLE_SECS").unwrap_or(5);
    std::thread::sleep(Duration::from_secs(settle));
    let idle_kib = status_kib(pid, "VmRSS");

    let messages = env_number("HERMES_MEASURE_MESSAGES").unwrap_or(100) as usize;
    let users = world.caps.users;
    // In rounds: every user writes one message, then waits for its answer
    // — people wait for an answer before writing again, and a burst into
    // one chat is merged by the busy mode, not answered message by message.
    // Everything said so far (the warm-up) is behind the mark.
    let mut mark = SaidMark::default();
    world.harness.said_since(&mut mark);
    let started = Instant::now();
    let mut sent = 0;
    while sent < messages {
        let round = users.min(messages - sent);
        let mut waiting: Vec<_> = (0..round)
            .map(|user| world.ask(Sender::User(user), Place::Dm, "how are you"))
            .collect();
        // Polled every millisecond (the suite's own wait polls every
        // 50 ms, which would cap a round at ~20 per second), reading only
        // what is new since the last poll; each answer checked as the
        // suite checks one (its chat, the message it points at).
        let deadline = Instant::now() + super::ANSWER_WITHIN;
        while !waiting.is_empty() {
            for said in world.harness.said_since(&mut mark) {
                let Some(i) = waiting
                    .iter()
                    .position(|(token, _)| said.text.contains(&answer(token)))
                else {
                    continue;
                };
                let (token, posted) = waiting.swap_remove(i);
                world.check_answer(&token, &posted, &said);
            }
            assert!(
                Instant::now() < deadline,
                "{}: a round was never answered",
                H::NAME
            );
            if !waiting.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        sent += round;
    }
    let elapsed = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    world.check_none_answered_twice();
    let peak_kib = status_kib(pid, "VmHWM");
    world.stop();

    let exe = std::env::var(super::gateway::EXE_ENV).unwrap_or_else(|_| "test binary".into());
    println!(
        "measure\t{}\tidle_rss_kib\t{idle_kib}\tpeak_rss_kib\t{peak_kib}\tmessages\t{messages}\tusers\t{users}\tseconds\t{elapsed:.2}\tper_second\t{:.1}\texe\t{exe}",
        H::NAME,
        messages as f64 / elapsed
    );
}

/// A `kB` line of `/proc/PID/status`.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}
