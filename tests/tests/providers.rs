//! Issue 11 end to end through the project's loopback provider
//! ([`FakeProvider`], which checks protocol rules on every request) and the
//! real client, chain, config and store: a turn that fell back stays on the
//! fallback and the next turn is back on the primary; cache breakpoints for
//! Claude and none for others; the reasoning echo per model; cached tokens
//! recorded per message, summed and priced. Every recorded request
//! validates against the OpenAI request schema.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_core::{
    Agent, AgentEvent, FnObserver, IterationBudget, LedgerEntry, StopReason, Tool, ToolContext,
    ToolError, ToolRegistry, ToolSpec,
};
use hermes_runtime::assemble;
use hermes_runtime::config::{self, Environment, Overrides, Settings};
use hermes_runtime::pricing::{PriceList, PriceSource, UsageReport};
use hermes_runtime::store::{NewSession, Store};
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};

const STREAMING_SCHEMA: &str =
    include_str!("../fixtures/openai-schemas/chat_completion_request_streaming.schema.json");

fn assert_valid(provider: &FakeProvider) {
    let schema: Value = serde_json::from_str(STREAMING_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for body in provider.requests() {
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "schema violations: {errors:#?}\nin {body:#}"
        );
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

/// Settings from a `config.toml` in a fresh home.
fn settings(toml: &str) -> (Settings, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), toml).unwrap();
    let env = Environment::from_pairs([("HERMES_HOME", home.path().display().to_string())]);
    let overrides = Overrides {
        workdir: Some(home.path().to_owned()),
        ..Overrides::default()
    };
    (config::load(&overrides, &env).unwrap(), home)
}

struct Clock(ToolSpec);

impl Tool for Clock {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        Ok("12:00".into())
    }
}

fn tools() -> Arc<ToolRegistry> {
    Arc::new(ToolRegistry::new().with(Clock(ToolSpec::new(
        "clock",
        "The time",
        json!({"type": "object", "properties": {}}),
    ))))
}

/// One turn on `settings`' chain; returns the outcome and the fallback
/// events it reported.
fn turn(
    agent: &Agent,
    text: &str,
    history: Vec<LedgerEntry>,
) -> (hermes_core::RunOutcome, Vec<String>) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let t = told.clone();
    let mut observer = FnObserver(move |e: &AgentEvent<'_>| {
        if let AgentEvent::Fallback(f) = e {
            t.lock()
                .unwrap()
                .push(format!("{} -> {}", f.failed, f.answering));
        }
    });
    let outcome = agent.run(text, history, &IterationBudget::new(10), &mut observer);
    let told = told.lock().unwrap().clone();
    (outcome, told)
}

#[test]
fn a_turn_that_fell_back_stays_there_and_the_next_turn_is_back_on_the_primary() {
    let primary = FakeProvider::start(vec![
        Reply::Status(503, "overloaded".into()),
        Reply::Status(503, "overloaded".into()),
        Reply::Status(503, "overloaded".into()),
        Reply::text("The primary is back."),
    ])
    .unwrap();
    let fallback = FakeProvider::start(vec![
        Reply::tool("call_1", "clock", "{}"),
        Reply::text("Noon."),
    ])
    .unwrap();
    let (settings, _home) = settings(&format!(
        "[provider]\nbase_url = \"{}\"\nmodel = \"primary-model\"\n\
         [[provider.fallback]]\nbase_url = \"{}\"\nmodel = \"fallback-model\"\n",
        primary.base_url(),
        fallback.base_url()
    ));
    let chain = assemble::provider_model(&settings, "primary-model").unwrap();
    let agent = Agent::new(chain, tools(), "You are a test agent.");

    let (first, told) = turn(&agent, "what time is it?", Vec::new());
    assert_eq!(first.stop, StopReason::Completed);
    assert_eq!(first.final_text, "Noon.");
    assert_eq!(told, ["primary-model -> fallback-model"], "told once");
    // The tool step of the same turn went straight to the fallback.
    assert_eq!(primary.requests().len(), 3);
    assert_eq!(fallback.requests().len(), 2);
    let models: Vec<_> = first
        .new_messages()
        .iter()
        .filter_map(|e| e.meta.model.as_deref())
        .collect();
    assert_eq!(models, ["fallback-model", "fallback-model"]);

    let (second, told) = turn(&agent, "and now?", first.messages);
    assert_eq!(second.final_text, "The primary is back.");
    assert!(told.is_empty());
    assert_eq!(primary.requests().len(), 4);
    assert_eq!(fallback.requests().len(), 2);
    assert_eq!(
        second.messages.last().unwrap().meta.model.as_deref(),
        Some("primary-model")
    );
    // The primary saw the whole conversation, the fallback's part included.
    let last = primary.requests().pop().unwrap();
    assert!(last.to_string().contains("Noon."));
    assert_valid(&primary);
    assert_valid(&fallback);
}

/// The second request of a tool loop on `model` with `extra` settings.
fn second_request(model: &str, extra: &str, first: Reply) -> Value {
    let provider = FakeProvider::start(vec![first, Reply::text("done")]).unwrap();
    let (settings, _home) = settings(&format!(
        "[provider]\nbase_url = \"{}\"\nmodel = \"{model}\"\n{extra}",
        provider.base_url()
    ));
    let chain = assemble::provider_model(&settings, model).unwrap();
    let agent = Agent::new(chain, tools(), "You are a test agent.");
    let history = vec![
        LedgerEntry::new(hermes_core::Message::user("earlier question")),
        LedgerEntry::new(hermes_core::Message::assistant("earlier answer")),
    ];
    let (outcome, _) = turn(&agent, "what time is it?", history);
    assert_eq!(
        outcome.final_text,
        "done",
        "{:?} {:?}",
        outcome.stop,
        provider.violations()
    );
    assert_valid(&provider);
    provider.requests().pop().unwrap()
}

fn markers(body: &Value) -> Vec<usize> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.to_string().contains("cache_control"))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn claude_gets_four_breakpoints_and_other_models_none() {
    let call = || Reply::tool("call_1", "clock", "{}");
    // system, user, assistant, user, assistant(tool call only), tool
    let body = second_request("anthropic/claude-sonnet-4", "", call());
    assert_eq!(markers(&body), vec![0, 2, 3, 5], "{body:#}");
    assert_eq!(body.to_string().matches("cache_control").count(), 4);
    assert_eq!(
        body["messages"][5]["content"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );

    let body = second_request("anthropic/claude-sonnet-4", "cache_ttl = \"1h\"\n", call());
    assert_eq!(
        body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );

    for (model, extra) in [
        ("gpt-4o-mini", ""),
        ("deepseek-chat", ""),
        ("anthropic/claude-sonnet-4", "cache = \"off\"\n"),
    ] {
        let body = second_request(model, extra, call());
        assert!(markers(&body).is_empty(), "{model} {extra}: {body:#}");
        assert!(body["messages"][0]["content"].is_string());
    }
    // A proxy serving Claude under another name: forced on.
    let body = second_request("my-proxy-model", "cache = \"anthropic\"\n", call());
    assert_eq!(markers(&body).len(), 4);
}

#[test]
fn the_reasoning_echo_follows_each_providers_rule() {
    let reasoned = || {
        Reply::tool("call_1", "clock", "{}").with(json!({"reasoning_content": "I need the clock."}))
    };
    // DeepSeek and Kimi K2 thinking want it back within the tool loop.
    for model in ["deepseek-chat", "deepseek-reasoner", "kimi-k2-thinking"] {
        let body = second_request(model, "", reasoned());
        let assistant = &body["messages"][4];
        assert_eq!(
            assistant["reasoning_content"], "I need the clock.",
            "{model}"
        );
        // The earlier turn called no tools: nothing is sent for it.
        assert!(
            body["messages"][2].get("reasoning_content").is_none(),
            "{model}"
        );
    }
    // Others never see it (strict servers refuse unknown fields).
    for (model, extra) in [
        ("gpt-4o", ""),
        ("anthropic/claude-sonnet-4", ""),
        ("deepseek-chat", "reasoning_echo = \"off\"\n"),
    ] {
        let body = second_request(model, extra, reasoned());
        assert!(
            !body.to_string().contains("I need the clock"),
            "{model}: {body:#}"
        );
    }
    // OpenRouter's reasoning_details go back verbatim (auto on OpenRouter;
    // forced here, the test server being on 127.0.0.1).
    let details = json!([{"type": "reasoning.text", "text": "I need the clock.", "signature": "c2ln", "index": 0}]);
    let first = Reply::tool("call_1", "clock", "{}")
        .with(json!({"reasoning": "I need the clock.", "reasoning_details": details}));
    let body = second_request(
        "anthropic/claude-sonnet-4",
        "reasoning_echo = \"reasoning_details\"\n",
        first,
    );
    assert_eq!(body["messages"][4]["reasoning_details"], details);
    assert!(body["messages"][4].get("reasoning_content").is_none());
}

#[test]
fn the_reasoning_effort_setting_reaches_the_request() {
    let body = second_request(
        "o4-mini",
        "reasoning_effort = \"high\"\n",
        Reply::tool("c", "clock", "{}"),
    );
    assert_eq!(body["reasoning_effort"], "high");
    let body = second_request("o4-mini", "", Reply::tool("c", "clock", "{}"));
    assert!(body.get("reasoning_effort").is_none());
}

#[test]
fn cached_tokens_are_stored_per_message_summed_and_priced() {
    let usage = |prompt: u64, cached: u64| {
        json!({"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10,
               "prompt_tokens_details": {"cached_tokens": cached}})
    };
    let provider = FakeProvider::start(vec![
        Reply::tool("call_1", "clock", "{}").with_usage(usage(1000, 0)),
        Reply::text("Noon.").with_usage(usage(1100, 1000)),
    ])
    .unwrap();
    let (settings, home) = settings(&format!(
        "[provider]\nbase_url = \"{}\"\nmodel = \"m\"\n\
         price = {{ input = 2.0, output = 8.0, cache_read = 0.5 }}\n",
        provider.base_url()
    ));
    let db = home.path().join("state.db");
    let mut store = Store::open(&db).unwrap();
    let session = store
        .create_session(&NewSession {
            model: Some("m"),
            ..NewSession::default()
        })
        .unwrap();
    let agent = Agent::new(
        assemble::provider_model(&settings, "m").unwrap(),
        tools(),
        "sys",
    );
    let (outcome, _) = turn(&agent, "time?", Vec::new());
    assert_eq!(outcome.usage.cached_tokens, 1000);
    assert_eq!(outcome.usage.prompt_tokens, 2100);
    store
        .append_messages(&session.id, outcome.new_messages())
        .unwrap();
    drop(store);

    let store = Store::open(&db).unwrap();
    let stored = store.load_transcript(&session.id).unwrap();
    assert_eq!(stored[3].meta.usage.unwrap().cached_tokens, 1000);
    assert_eq!(stored[3].meta.model.as_deref(), Some("m"));
    let report = UsageReport::for_session(&store, &session.id).unwrap();
    assert_eq!(report.calls(), 2);
    assert_eq!(report.total().cached_tokens, 1000);
    let price = settings.provider.price.unwrap();
    let text = report.render(&PriceList(vec![("m".into(), price, PriceSource::Config)]));
    // 1100 uncached × 2 + 1000 cached × 0.5 + 20 completion × 8, per million.
    assert!(text.contains("cost: $0.0029"), "{text}");
    assert!(
        text.contains("47 % of prompt tokens read from the cache"),
        "{text}"
    );
    assert_valid(&provider);
}
