//! Conversations that outlive the context window (SPEC X1), end to end: the
//! real provider client, the real SQLite store and `TurnWriter`, the real
//! tools, against the loopback `FakeProvider` enforcing a window and
//! refusing in the words of real providers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_core::context::digest::DIGEST_HEADER;
use hermes_core::context::summary::{SUMMARIZER_PROMPT, SUMMARY_HEADER};
use hermes_core::context::{ContextConfig, ContextWindow, WindowSource};
use hermes_core::{
    Agent, IterationBudget, LedgerEntry, Message, StopReason, Tool, ToolContext, ToolError,
    ToolRegistry, ToolSpec,
};
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::config::{Environment, Overrides, Settings, load};
use hermes_runtime::context::{self, Windows};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{NewSession, Store};
use hermes_runtime::tools::{ToolEnv, build_registry};
use hermes_runtime::turn::{TurnView, drive};
use hermes_tests::{Advertise, FakeProvider, Overflow, Reply, Responder, Window};
use serde_json::Value;

const SYSTEM: &str = "You are Hermes, under test. Answer every numbered turn.";

const REQUEST_SCHEMA: &str =
    include_str!("../fixtures/openai-schemas/chat_completion_request.schema.json");
const REQUEST_STREAMING_SCHEMA: &str =
    include_str!("../fixtures/openai-schemas/chat_completion_request_streaming.schema.json");

/// Every request body is a valid OpenAI chat-completions request.
fn assert_valid_requests(requests: &[Value]) {
    let plain: Value = serde_json::from_str(REQUEST_SCHEMA).unwrap();
    let streaming: Value = serde_json::from_str(REQUEST_STREAMING_SCHEMA).unwrap();
    let plain = jsonschema::validator_for(&plain).unwrap();
    let streaming = jsonschema::validator_for(&streaming).unwrap();
    for (i, request) in requests.iter().enumerate() {
        let validator = if request["stream"] == Value::Bool(true) {
            &streaming
        } else {
            &plain
        };
        let errors: Vec<String> = validator
            .iter_errors(request)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "request {i}: {errors:#?}");
    }
}

fn system_of(request: &Value) -> &str {
    request["messages"][0]["content"].as_str().unwrap_or("")
}

fn is_summary(request: &Value) -> bool {
    system_of(request) == SUMMARIZER_PROMPT
}

/// The number `N` of the last `turn N` in `text`.
fn turn_number(text: &str) -> Option<u64> {
    let at = text.rfind("turn ")?;
    text[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

fn words(n: usize) -> String {
    (0..n)
        .map(|i| ["amber", "birch", "cedar", "dune", "ember", "fjord"][i % 6])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Plays the model: summaries for the summariser, a `lookup` tool call for
/// every third turn, a text answer otherwise.
fn conversation_responder() -> Responder {
    Arc::new(|request: &Value| {
        if is_summary(request) {
            let excerpt = request["messages"][1]["content"].as_str().unwrap_or("");
            let turns = excerpt.matches("[user]").count();
            return Reply::text(format!(
                "Goal: answer numbered turns. Work done: {turns} more turns answered. {}",
                words(25)
            ));
        }
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        let content = last["content"].as_str().unwrap_or("");
        match last["role"].as_str() {
            Some("tool") => {
                let id = last["tool_call_id"].as_str().unwrap_or("");
                let n = turn_number(&id.replace("call_", "turn ")).unwrap_or(0);
                Reply::text(format!("answer {n} after the lookup"))
            }
            _ => match turn_number(content) {
                Some(n) if n.is_multiple_of(3) => {
                    Reply::tool(&format!("call_{n}"), "lookup", &format!("{{\"n\":{n}}}"))
                }
                Some(n) => Reply::text(format!("answer {n}: {}", words(50))),
                None => Reply::text("answer ?"),
            },
        }
    })
}

/// A tool with a mid-sized result.
struct Lookup(ToolSpec);

impl Lookup {
    fn new() -> Self {
        Lookup(ToolSpec::new(
            "lookup",
            "Looks a number up.",
            serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ))
    }
}

impl Tool for Lookup {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        Ok(format!("lookup {arguments}: {}", words(60)))
    }
}

/// Checks what the turn driver records: every entry, every compaction.
struct Checked;

impl TurnView for Checked {
    fn store(&mut self, entry: &LedgerEntry, writer: &mut TurnWriter<'_>) -> bool {
        assert!(writer.append(entry));
        true
    }
}

fn settings(home: &std::path::Path, base_url: &str) -> Settings {
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.display().to_string()),
        ("HERMES_BASE_URL", base_url.to_owned()),
        ("HERMES_MODEL", "fake-model".to_owned()),
    ]);
    load(
        &Overrides {
            workdir: Some(home.to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap()
}

fn client(base_url: &str, stream: bool) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: base_url.to_owned(),
        model: "fake-model".into(),
        stream,
        max_attempts: 1,
        ..ClientOptions::default()
    })
    .unwrap()
}

fn turn_text(n: u64) -> String {
    // `markerNx` is a word found only in this turn's message.
    format!("turn {n}: marker{n}x {}", words(85))
}

/// Runs turns `turns` the way the gateway does: each from the stored view.
fn run_turns(
    store: &Mutex<Store>,
    session: &str,
    agent: &Agent,
    turns: impl IntoIterator<Item = u64>,
) -> Vec<StopReason> {
    let mut stops = Vec::new();
    for n in turns {
        let history = store.lock().unwrap().load_view(session).unwrap();
        // Through the driver every front end uses.
        let driven = drive(
            agent,
            Message::user(turn_text(n)),
            history,
            &IterationBudget::new(10),
            TurnWriter::new(store, session),
            &mut Checked,
        );
        assert_eq!(driven.store_failure().map(ToString::to_string), None);
        assert_eq!(
            driven.writer.compaction_failure().map(ToString::to_string),
            None
        );
        let out = driven.outcome;
        if out.stop == StopReason::Completed {
            assert!(
                out.final_text.starts_with(&format!("answer {n}")),
                "turn {n}: {}",
                out.final_text
            );
        }
        stops.push(out.stop);
    }
    stops
}

#[test]
fn thirty_turns_through_a_window_a_third_of_their_size() {
    const WINDOW: u64 = 3_000;
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: WINDOW,
            overflow: Overflow::OpenAi,
            advertise: Advertise::ModelsContextLength,
        }),
        Some(conversation_responder()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path(), &provider.base_url());
    let client = client(&provider.base_url(), true);
    // The window comes from the provider's /models listing.
    let windows = Windows::new();
    let window = windows.get(&settings, &client, "fake-model");
    assert_eq!(
        (window.tokens(), window.source()),
        (3_000, WindowSource::Provider)
    );
    let context = context::context_config(&settings, window, &client);
    let tools = ToolRegistry::new().with(Lookup::new());
    let agent = Agent::new(Arc::new(client), Arc::new(tools), SYSTEM).with_context(context);

    let store = Mutex::new(Store::open(&dir.path().join("state.db")).unwrap());
    let session = store
        .lock()
        .unwrap()
        .create_session(&NewSession {
            system_prompt: Some(SYSTEM),
            ..NewSession::default()
        })
        .unwrap()
        .id;
    let stops = run_turns(&store, &session, &agent, 1..=30);
    assert!(
        stops.iter().all(|s| *s == StopReason::Completed),
        "{stops:?}"
    );

    let requests = provider.requests();
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert!(
        provider.refused().is_empty(),
        "refused: {:?}",
        provider.refused()
    );
    assert_valid_requests(&requests);
    assert!(provider.counts().iter().all(|c| *c <= WINDOW));
    // The system prompt of every conversation request is byte-identical.
    let conversation: Vec<&Value> = requests.iter().filter(|r| !is_summary(r)).collect();
    assert!(conversation.iter().all(|r| system_of(r) == SYSTEM));
    assert!(requests.iter().filter(|r| is_summary(r)).count() >= 3);

    let store = store.lock().unwrap();
    // Every original is stored, and the whole is three times the window.
    let originals = store.load_transcript(&session).unwrap();
    let users: Vec<u64> = originals
        .iter()
        .filter_map(|e| match &e.message {
            Message::User { content, .. } => turn_number(content),
            _ => None,
        })
        .collect();
    assert_eq!(users, (1..=30).collect::<Vec<_>>());
    let mut whole = Vec::new();
    hermes_core::codec::encode_request(
        &hermes_core::codec::RequestOptions::new("fake-model"),
        &hermes_core::ChatRequest {
            system_prompt: SYSTEM,
            messages: &originals,
            tools: agent.tools().specs(),
            tool_choice: hermes_core::ToolChoice::Auto,
        },
        &mut whole,
    )
    .unwrap();
    assert!(
        hermes_tests::provider_tokens(&whole) >= 3 * WINDOW,
        "{} tokens",
        hermes_tests::provider_tokens(&whole)
    );
    // The early turns are still findable, and exportable.
    for n in [1, 2, 5] {
        let hits = store.search(&format!("marker{n}x"), 5).unwrap();
        assert_eq!(hits.len(), 1, "turn {n}");
        assert_eq!(hits[0].session_id, session);
    }
    assert!(store.compactions(&session).unwrap().len() >= 3);
    // What the next turn starts from: the head, one summary, the recent turns.
    let view = store.load_view(&session).unwrap();
    assert!(
        view.len() < originals.len() / 3,
        "{} of {}",
        view.len(),
        originals.len()
    );
    assert_eq!(view[0], originals[0]);
    let marked: Vec<&LedgerEntry> = view
        .iter()
        .filter(|e| e.meta.compaction.is_some())
        .collect();
    assert_eq!(marked.len(), 1);
    assert!(
        marked[0]
            .message
            .content()
            .unwrap()
            .starts_with(SUMMARY_HEADER)
    );
    assert_eq!(view.last(), originals.last());
}

#[test]
fn every_real_overflow_wording_is_recovered_from_and_its_limit_learned() {
    for overflow in [
        Overflow::OpenAi,
        Overflow::OpenRouter,
        Overflow::Anthropic,
        Overflow::LlamaCpp,
        Overflow::Vllm,
        Overflow::LlamaCppPython,
    ] {
        let provider = FakeProvider::start_with(
            vec![],
            Some(Window {
                tokens: 2_500,
                overflow,
                advertise: Advertise::Nowhere,
            }),
            Some(conversation_responder()),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&provider.base_url(), true);
        // The agent believes in a far bigger window than the provider has.
        let window = Arc::new(ContextWindow::new(100_000, WindowSource::Table));
        let agent = Agent::new(
            Arc::new(client),
            Arc::new(ToolRegistry::new().with(Lookup::new())),
            SYSTEM,
        )
        .with_context(ContextConfig::new(window.clone()));
        let store = Mutex::new(Store::open(&dir.path().join("state.db")).unwrap());
        let session = store
            .lock()
            .unwrap()
            .create_session(&NewSession::default())
            .unwrap()
            .id;
        let stops = run_turns(&store, &session, &agent, 1..=14);
        assert!(
            stops.iter().all(|s| *s == StopReason::Completed),
            "{overflow:?}: {stops:?}"
        );
        assert!(
            !provider.refused().is_empty(),
            "{overflow:?}: never overflowed"
        );
        assert_eq!(window.tokens(), 2_500, "{overflow:?}: limit not learned");
        assert_eq!(window.source(), WindowSource::Learned);
        assert!(
            provider.violations().is_empty(),
            "{:?}",
            provider.violations()
        );
        assert_valid_requests(&provider.requests());
        if overflow == Overflow::LlamaCppPython {
            // The refused stream was asked again without streaming, which
            // named the limit.
            let requests = provider.requests();
            let counts = provider.counts();
            let refused_plain = requests
                .iter()
                .zip(&counts)
                .any(|(r, c)| *c > 2_500 && r["stream"] == Value::Bool(false));
            assert!(refused_plain, "no non-streamed retry of the empty stream");
        }
    }
}

#[test]
fn the_window_is_read_where_each_server_advertises_it() {
    for (advertise, detail) in [
        (Advertise::ModelsContextLength, "/models context_length"),
        (Advertise::ModelsMaxModelLen, "/models max_model_len"),
        (Advertise::Props, "/props default_generation_settings.n_ctx"),
        (Advertise::OllamaShow, "/api/show parameters num_ctx"),
    ] {
        let provider = FakeProvider::start_with(
            vec![],
            Some(Window {
                tokens: 6_144,
                overflow: Overflow::OpenAi,
                advertise,
            }),
            None,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let settings = settings(dir.path(), &provider.base_url());
        let info = context::resolve(&settings, &client(&provider.base_url(), true), "fake-model");
        assert_eq!(
            (info.tokens, info.source),
            (6_144, WindowSource::Provider),
            "{advertise:?}"
        );
        assert!(
            info.detail.contains(detail),
            "{advertise:?}: {}",
            info.detail
        );
    }
    // Nothing advertised: the table knows nothing of `fake-model`, so the
    // conservative default; a setting beats everything.
    let provider = FakeProvider::start(vec![]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path(), &provider.base_url());
    let info = context::resolve(&settings, &client(&provider.base_url(), true), "fake-model");
    assert_eq!(
        (info.tokens, info.source),
        (context::DEFAULT_WINDOW, WindowSource::Default)
    );
    let info = context::resolve(
        &settings,
        &client(&provider.base_url(), true),
        "gpt-4o-mini",
    );
    assert_eq!((info.tokens, info.source), (128_000, WindowSource::Table));
    std::fs::write(
        dir.path().join("config.toml"),
        "[provider]\ncontext_length = 12000\n",
    )
    .unwrap();
    let configured = self::settings(dir.path(), &provider.base_url());
    let info = context::resolve(
        &configured,
        &client(&provider.base_url(), true),
        "fake-model",
    );
    assert_eq!(
        (info.tokens, info.source),
        (12_000, WindowSource::Configured)
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn a_one_megabyte_file_read_does_not_blow_an_eight_thousand_token_window() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let line = "0123456789 abcdefghij klmnopqrst uvwxyz ABCDEFGHIJ KLMNOPQRST UVWXYZ\n";
    std::fs::write(work.join("big.txt"), line.repeat((1 << 20) / line.len())).unwrap();
    let responder: Responder = Arc::new(|request: &Value| {
        let last = request["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        if last["role"] == "tool" {
            Reply::text("answer: read it")
        } else {
            Reply::tool("call_1", "read_file", r#"{"path":"big.txt"}"#)
        }
    });
    let provider =
        FakeProvider::start_with(vec![], Some(Window::openai(8_192)), Some(responder)).unwrap();
    let client = Arc::new(client(&provider.base_url(), false));
    let tools =
        build_registry(&ToolEnv::new(&work, dir.path()), Some(&["file".to_owned()])).unwrap();
    let window = Arc::new(ContextWindow::new(8_192, WindowSource::Configured));
    let agent =
        Agent::new(client, Arc::new(tools), SYSTEM).with_context(ContextConfig::new(window));
    let out = agent.run_conversation("read big.txt", Vec::new());
    assert_eq!(out.stop, StopReason::Completed, "{:?}", out.stop);
    let result = out
        .messages
        .iter()
        .find_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        result.contains("cut to fit the model's context window"),
        "{}",
        &result[result.len() - 300..]
    );
    assert!(provider.refused().is_empty(), "{:?}", provider.refused());
}

#[test]
fn a_sub_agent_compacts_its_own_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(
        work.join("notes.txt"),
        format!("{}\n", words(150)).repeat(4),
    )
    .unwrap();
    // The parent delegates; the child reads the notes ten times, then reports.
    let responder: Responder = Arc::new(|request: &Value| {
        if is_summary(request) {
            return Reply::text(format!(
                "Goal: read notes.txt ten times. Work done: several reads. {}",
                words(20)
            ));
        }
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        if system_of(request).starts_with("You are a Hermes sub-agent") {
            // How far the child got is in the ids of its calls.
            let reads = last["tool_call_id"]
                .as_str()
                .and_then(|id| id.strip_prefix("read_"))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            return if reads >= 10 {
                Reply::text("child report: read notes.txt ten times")
            } else {
                Reply::tool(
                    &format!("read_{}", reads + 1),
                    "read_file",
                    r#"{"path":"notes.txt"}"#,
                )
            };
        }
        if last["role"] == "tool" {
            Reply::text(format!(
                "parent: {}",
                last["content"].as_str().unwrap_or("")
            ))
        } else {
            Reply::tool(
                "delegate_1",
                "delegate_task",
                r#"{"goal":"read notes.txt ten times"}"#,
            )
        }
    });
    let provider =
        FakeProvider::start_with(vec![], Some(Window::openai(4_000)), Some(responder)).unwrap();
    let client: Arc<OpenAiClient> = Arc::new(client(&provider.base_url(), true));
    let window = Arc::new(ContextWindow::new(4_000, WindowSource::Configured));
    let context = ContextConfig::new(window);
    let mut env = ToolEnv::new(&work, dir.path());
    env.delegate_model = Some(client.clone());
    env.context = Some(context.clone());
    let tools = build_registry(&env, Some(&["file".to_owned(), "delegate".to_owned()])).unwrap();
    let agent = Agent::new(client, Arc::new(tools), SYSTEM).with_context(context);
    let out = agent.run(
        "delegate the reading",
        Vec::new(),
        &IterationBudget::new(30),
        &mut hermes_core::NoObserver,
    );
    assert_eq!(out.stop, StopReason::Completed, "{:?}", out.stop);
    assert!(
        out.final_text
            .contains("child report: read notes.txt ten times"),
        "{}",
        out.final_text
    );
    let requests = provider.requests();
    // The child kept its conversation within the window while it ran: its
    // one long turn is never summarised (that would put a summary between
    // its steps, issue 38), its older tool results are cut instead.
    let child_cut = requests.iter().any(|r| {
        system_of(r).starts_with("You are a Hermes sub-agent")
            && r["messages"].as_array().unwrap().iter().any(|m| {
                m["role"] == "tool"
                    && m["content"]
                        .as_str()
                        .is_some_and(|c| c.contains("cut to fit the model's context window"))
            })
    });
    assert!(child_cut, "the sub-agent never kept within its window");
    assert!(provider.refused().is_empty(), "{:?}", provider.refused());
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert_valid_requests(&requests);
}

#[test]
fn summaries_are_written_by_the_compression_model_when_one_is_set() {
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window::openai(3_000)),
        Some(conversation_responder()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        "[provider]\ncontext_length = 3000\ncompression_model = \"small-summariser\"\n",
    )
    .unwrap();
    let settings = settings(dir.path(), &provider.base_url());
    let client = client(&provider.base_url(), false);
    let window = Windows::new().get(&settings, &client, "fake-model");
    assert_eq!(window.source(), WindowSource::Configured);
    let context = context::context_config(&settings, window, &client);
    let agent = Agent::new(
        Arc::new(client),
        Arc::new(ToolRegistry::new().with(Lookup::new())),
        SYSTEM,
    )
    .with_context(context);
    let store = Mutex::new(Store::open_in_memory().unwrap());
    let session = store
        .lock()
        .unwrap()
        .create_session(&NewSession::default())
        .unwrap()
        .id;
    let stops = run_turns(&store, &session, &agent, 1..=10);
    assert!(
        stops.iter().all(|s| *s == StopReason::Completed),
        "{stops:?}"
    );
    let requests = provider.requests();
    let (summaries, turns): (Vec<&Value>, Vec<&Value>) =
        requests.iter().partition(|r| is_summary(r));
    assert!(!summaries.is_empty());
    assert!(summaries.iter().all(|r| r["model"] == "small-summariser"));
    assert!(turns.iter().all(|r| r["model"] == "fake-model"));
}

/// Thirty turns through a 6000-token window whose summariser never gives a
/// usable summary (it answers `broken`): every turn is answered, each
/// compaction is an automatic digest, the summariser is asked once and
/// then left alone for its cooldown, and the originals stay searchable.
fn thirty_turns_with_a_summariser_that(broken: Reply) {
    const WINDOW: u64 = 6_000;
    let responder = conversation_responder();
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window::openai(WINDOW)),
        Some(Arc::new(move |request: &Value| {
            if is_summary(request) {
                broken.clone()
            } else {
                responder(request)
            }
        })),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        format!("[provider]\ncontext_length = {WINDOW}\n"),
    )
    .unwrap();
    let settings = settings(dir.path(), &provider.base_url());
    let client = client(&provider.base_url(), true);
    let window = Windows::new().get(&settings, &client, "fake-model");
    let context = context::context_config(&settings, window, &client);
    let agent = Agent::new(
        Arc::new(client),
        Arc::new(ToolRegistry::new().with(Lookup::new())),
        SYSTEM,
    )
    .with_context(context);
    let store = Mutex::new(Store::open(&dir.path().join("state.db")).unwrap());
    let session = store
        .lock()
        .unwrap()
        .create_session(&NewSession::default())
        .unwrap()
        .id;
    let stops = run_turns(&store, &session, &agent, 1..=30);
    assert!(
        stops.iter().all(|s| *s == StopReason::Completed),
        "{stops:?}"
    );
    let requests = provider.requests();
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert_valid_requests(&requests);
    assert_eq!(
        requests.iter().filter(|r| is_summary(r)).count(),
        1,
        "the summariser is asked again during its cooldown"
    );
    let store = store.lock().unwrap();
    let compactions = store.compactions(&session).unwrap();
    assert!(compactions.len() >= 2, "{}", compactions.len());
    let view = store.load_view(&session).unwrap();
    let marked: Vec<&LedgerEntry> = view
        .iter()
        .filter(|e| e.meta.compaction.is_some())
        .collect();
    assert_eq!(marked.len(), 1);
    let digest = marked[0].message.content().unwrap();
    assert!(digest.starts_with(SUMMARY_HEADER), "{digest}");
    assert!(digest.contains(DIGEST_HEADER), "{digest}");
    assert!(digest.contains("lookup ×"), "{digest}");
    for n in [1, 2, 5] {
        assert_eq!(store.search(&format!("marker{n}x"), 5).unwrap().len(), 1);
    }
}

#[test]
fn thirty_turns_with_a_summariser_that_always_answers_500() {
    thirty_turns_with_a_summariser_that(Reply::Status(500, "Internal Server Error".into()));
}

#[test]
fn thirty_turns_with_a_summariser_that_answers_empty_text() {
    thirty_turns_with_a_summariser_that(Reply::text(""));
}

#[test]
fn thirty_turns_with_a_summariser_that_answers_with_a_tool_call() {
    thirty_turns_with_a_summariser_that(Reply::tool("call_s", "lookup", "{\"n\":0}"));
}
