//! The fast and full tiers (`hermes_tests::tier`): a test whose component
//! is missing says SKIP and passes under plain `cargo test`, and fails under
//! CI. Each case runs this binary's `tier::probe` as a child, with the
//! component hidden and the tier chosen by the environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use hermes_tests::tier::{Component, require};

const PROBE: &str = "HERMES_TIER_PROBE";

/// In a child: the guard of a test that needs PostgreSQL, its answer
/// printed. Outside a child it does nothing.
#[test]
fn probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let here = require(&[Component::Postgres]);
    println!("RESULT={here}");
}

fn run_probe(tier: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "tier::probe", "--nocapture", "--test-threads=1"])
        .env(PROBE, "1")
        .env("HERMES_TIER_HIDE", "postgres")
        .env_remove("CI")
        .env_remove("HERMES_FULL_TIER");
    for (k, v) in tier {
        command.env(k, v);
    }
    command.output().unwrap()
}

#[test]
fn a_missing_component_is_a_loud_skip_in_the_fast_tier() {
    let out = run_probe(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("RESULT=false"), "{stdout}");
    assert!(
        stderr.contains("SKIP tier::probe: postgres not found (")
            && stderr.contains(".ci/run installs it"),
        "the skip names the test, the component and how to get it: {stderr}"
    );
    // `CI=false` is no CI.
    let out = run_probe(&[("CI", "false")]);
    assert!(out.status.success());
}

#[test]
fn a_missing_component_fails_the_full_tier() {
    for tier in [("CI", "true"), ("HERMES_FULL_TIER", "1")] {
        let out = run_probe(&[tier]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{tier:?} failed the test: {stdout}");
        assert!(!stdout.contains("RESULT="), "{stdout}");
        assert!(
            stdout.contains("needs postgres not found")
                || stderr.contains("needs postgres not found"),
            "{tier:?}: {stdout}{stderr}"
        );
    }
}
