//! The fallback chain (SPEC X2) against the pinned `@copilotkit/aimock`:
//! the primary fails with each failure class — rate limit (after the
//! retries, and at once for a long `Retry-After`), overload, server error,
//! timeout, a dropped connection, auth, billing, an unknown model — and the
//! fallback answers the same call; a bad request and a context overflow do
//! not fall back. The chain is built from a real `config.toml` with a
//! `[[provider.fallback]]` entry (fixtures in
//! `tests/emulators/aimock/fixtures/fallback.json`, which fail by model
//! name). Every request aimock recorded validates against the OpenAI
//! request schema.
//!
//! Requires `npm ci --prefix tests/emulators/aimock`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{Agent, AgentEvent, FnObserver, IterationBudget, StopReason, ToolRegistry};
use hermes_runtime::assemble;
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::config::{self, Environment, Overrides};
use hermes_runtime::fallback::{FallbackModel, Link};
use hermes_tests::aimock::Aimock;
use serde_json::Value;
use support::within;

const FIXTURES: &str = "fallback.json";
const HANG_GUARD: Duration = Duration::from_secs(120);
const STREAMING_SCHEMA: &str = include_str!(
    "../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);

fn assert_valid(body: &Value) {
    let schema: Value = serde_json::from_str(STREAMING_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations: {errors:#?}\nin {body:#}"
    );
}

/// The chain `config.toml` describes: `primary` on aimock, then `gpt-4o`
/// (same server, its own key).
fn chain(mock: &Aimock, primary: &str) -> (Arc<FallbackModel>, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[provider]\nbase_url = \"{}\"\napi_key = \"sk-primary-key\"\nmodel = \"{primary}\"\n\n\
             [[provider.fallback]]\nmodel = \"gpt-4o\"\napi_key = \"sk-fallback-key\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let env = Environment::from_pairs([("HERMES_HOME", home.path().display().to_string())]);
    let settings = config::load(
        &Overrides {
            workdir: Some(home.path().to_owned()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    assert_eq!(settings.provider.fallbacks.len(), 1);
    (assemble::provider_model(&settings, primary).unwrap(), home)
}

struct Answer {
    stop: StopReason,
    text: String,
    answered_by: Option<String>,
    /// (failed, reason, answering) of each fallback event.
    switches: Vec<(String, String, String)>,
}

fn ask(model: Arc<FallbackModel>, text: &'static str) -> Answer {
    within(HANG_GUARD, move || {
        let agent = Agent::new(
            model,
            Arc::new(ToolRegistry::new()),
            "You are a test agent.",
        );
        let switches = Arc::new(Mutex::new(Vec::new()));
        let s = switches.clone();
        let mut observer = FnObserver(move |e: &AgentEvent<'_>| {
            if let AgentEvent::Fallback(f) = e {
                s.lock().unwrap().push((
                    f.failed.to_owned(),
                    f.reason.to_owned(),
                    f.answering.to_owned(),
                ));
            }
        });
        let outcome = agent.run(text, Vec::new(), &IterationBudget::new(5), &mut observer);
        let answered_by = outcome.messages.last().and_then(|e| e.meta.model.clone());
        let switches = switches.lock().unwrap().clone();
        Answer {
            stop: outcome.stop,
            text: outcome.final_text,
            answered_by,
            switches,
        }
    })
}

/// (model, status, Authorization) of every chat request, schema-checked.
fn journal(mock: &Aimock) -> Vec<(String, u64, String)> {
    mock.chat_requests()
        .iter()
        .map(|e| {
            assert_valid(&e["body"]);
            (
                e["body"]["model"].as_str().unwrap().to_owned(),
                e["response"]["status"].as_u64().unwrap_or(0),
                e["headers"]["authorization"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

/// The primary failed `attempts` times with `status`, then the fallback
/// answered; the user was told which model answered, once.
fn falls_back(primary: &str, status: u64, attempts: usize, reason: &str) {
    let mock = Aimock::start(FIXTURES);
    let (model, _home) = chain(&mock, primary);
    let answer = ask(model, "hello");
    assert_eq!(
        answer.stop,
        StopReason::Completed,
        "{primary}: {:?}",
        answer.stop
    );
    assert_eq!(answer.text, "The fallback answered.", "{primary}");
    assert_eq!(answer.answered_by.as_deref(), Some("gpt-4o"));
    assert_eq!(answer.switches.len(), 1, "{:?}", answer.switches);
    let (failed, why, answering) = &answer.switches[0];
    assert_eq!((failed.as_str(), answering.as_str()), (primary, "gpt-4o"));
    assert!(why.starts_with(reason), "{primary}: {why}");
    let mut expected: Vec<(String, u64)> = vec![(primary.to_owned(), status); attempts];
    expected.push(("gpt-4o".to_owned(), 200));
    let seen = journal(&mock);
    assert_eq!(
        seen.iter()
            .map(|(m, s, _)| (m.clone(), *s))
            .collect::<Vec<_>>(),
        expected,
        "{primary}"
    );
    // aimock journals keys redacted; each link sent one (the fallback's own).
    assert!(seen.iter().all(|(_, _, auth)| !auth.is_empty()));
}

#[test]
fn a_rate_limit_falls_back_after_the_retries() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-429", 429, 3, "rate limited");
}

#[test]
fn a_rate_limit_longer_than_the_client_waits_falls_back_at_once() {
    hermes_tests::require!(Npm("aimock"));
    let started = Instant::now();
    falls_back("primary-429-long", 429, 1, "rate limited");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn an_overloaded_primary_falls_back_after_the_retries() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-503", 503, 3, "overloaded");
}

#[test]
fn a_server_error_falls_back_after_the_retries() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-500", 500, 3, "server error");
}

#[test]
fn auth_failures_fall_back_at_once() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-401", 401, 1, "authentication failed");
    falls_back("primary-403", 403, 1, "authentication failed");
}

#[test]
fn a_billing_failure_falls_back_at_once() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-402", 402, 1, "out of credit or quota");
}

#[test]
fn a_model_the_primary_does_not_serve_falls_back() {
    hermes_tests::require!(Npm("aimock"));
    falls_back("primary-404", 404, 1, "model not available");
}

#[test]
fn a_bad_request_and_a_context_overflow_do_not_fall_back() {
    hermes_tests::require!(Npm("aimock"));
    for primary in ["primary-400", "primary-overflow"] {
        let mock = Aimock::start(FIXTURES);
        let (model, _home) = chain(&mock, primary);
        let answer = ask(model, "hello");
        match &answer.stop {
            StopReason::ModelError(e) => assert!(e.message.contains("HTTP 400"), "{}", e.message),
            other => panic!("{primary}: {other:?}"),
        }
        assert!(answer.switches.is_empty());
        let seen = journal(&mock);
        assert_eq!(
            seen.len(),
            1,
            "{primary}: the fallback was not asked: {seen:?}"
        );
    }
}

/// A chain whose primary sends aimock's chaos headers (a stalled or dropped
/// connection), with short timeouts: failures the config cannot script.
fn chaos_chain(mock: &Aimock, header: (&str, &str)) -> Arc<FallbackModel> {
    let primary = OpenAiClient::new(ClientOptions {
        base_url: mock.base_url(),
        model: "primary-ok".into(),
        idle_read_timeout: Duration::from_millis(400),
        max_attempts: 2,
        backoff_base: Duration::from_millis(5),
        extra_headers: vec![(header.0.into(), header.1.into())],
        ..ClientOptions::default()
    })
    .unwrap();
    let fallback = OpenAiClient::new(ClientOptions {
        base_url: mock.base_url(),
        model: "gpt-4o".into(),
        ..ClientOptions::default()
    })
    .unwrap();
    Arc::new(FallbackModel::new(
        Link {
            name: "primary-ok".into(),
            model: Arc::new(primary),
        },
        vec![Link {
            name: "gpt-4o".into(),
            model: Arc::new(fallback),
        }],
    ))
}

#[test]
fn a_timeout_falls_back_after_the_retries() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let answer = ask(
        chaos_chain(&mock, ("x-aimock-chaos-latency", "5000")),
        "hello",
    );
    assert_eq!(answer.text, "The fallback answered.");
    assert_eq!(answer.switches.len(), 1);
    assert!(
        answer.switches[0].1.starts_with("timed out"),
        "{:?}",
        answer.switches
    );
}

#[test]
fn a_dropped_connection_falls_back() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let answer = ask(
        chaos_chain(&mock, ("x-aimock-chaos-disconnect", "1")),
        "hello",
    );
    assert_eq!(answer.text, "The fallback answered.");
    assert_eq!(answer.switches.len(), 1);
    assert!(
        answer.switches[0].1.starts_with("unreachable"),
        "{:?}",
        answer.switches
    );
}

#[test]
fn a_healthy_primary_answers_itself() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let (model, _home) = chain(&mock, "primary-ok");
    let answer = ask(model, "hello");
    assert_eq!(answer.text, "The primary answered.");
    assert!(answer.switches.is_empty());
    assert_eq!(journal(&mock).len(), 1);
}
