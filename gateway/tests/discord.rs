//! The Discord adapter against the loopback fake Discord
//! (`discord_support`): the Gateway's connection life (heartbeats, RESUME,
//! op 7, op 9, close codes) on the adapter alone, and whole conversations
//! through the runner (DMs, the mention rule, sessions, long answers, rate
//! limits, replays answered once). Every message body the adapter sent is
//! checked against Discord's published request schema.
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod discord_checks;
mod discord_clarify;
use crate::discord_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use discord_support::{Behaviour, FakeDiscord, TOKEN};
use hermes_core::{ChatRequest, Completion, FinishReason, Message, Model, ModelError, StreamSink};
use hermes_discord::{DiscordAdapter, DiscordConfig, DiscordState};
use hermes_gateway::adapter::{AdapterError, PlatformAdapter};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::{ChatType, MessageEvent};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{TestAgentFactory, collector, recv_within};
use hermes_runtime::store::{Store, SystemClock};
use serde_json::Value;
use tokio::sync::mpsc;

const ALICE: &str = "111";
const BOB: &str = "222";
const CHANNEL: &str = "601";

fn config(fake: &FakeDiscord) -> DiscordConfig {
    let mut c = DiscordConfig::new(TOKEN);
    c.api_url = fake.api_url();
    c.reconnect_base = Duration::from_millis(50);
    c.reconnect_max = Duration::from_millis(400);
    c.invalid_session_wait = (Duration::from_millis(20), Duration::from_millis(60));
    c.connect_timeout = Duration::from_secs(5);
    c.max_retry_after = Duration::from_secs(10);
    c
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, Duration::from_secs(20))
        .await
        .expect("no event within 20 s")
}

/// The adapter alone, connected, delivering into a channel.
async fn adapter(
    behaviour: Behaviour,
) -> (
    FakeDiscord,
    DiscordAdapter,
    mpsc::UnboundedReceiver<MessageEvent>,
) {
    let fake = FakeDiscord::start(behaviour).await;
    let adapter = DiscordAdapter::new(config(&fake));
    let (handler, rx) = collector();
    adapter.connect(handler).await.unwrap();
    (fake, adapter, rx)
}

/// A model that says how many user messages its conversation holds, and
/// answers `long` with [`long_answer`].
struct Counting;

fn long_answer() -> String {
    lines(200)
}

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| format!("line {i:03}: {}\n", "abcdefghij".repeat(4)))
        .collect::<String>()
}

impl Model for Counting {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let users: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|e| match &e.message {
                Message::User { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let last = users.last().copied().unwrap_or_default();
        if last == "hello there" {
            // A turn that takes a moment, as a real one does. An instant
            // answer can end the turn before the typing task's first
            // request, and then no typing is sent — on purpose: typing
            // after the reply would show the bot typing once it answered.
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let content = if last == "long" {
            long_answer()
        } else if last == "huge" {
            lines(600)
        } else {
            format!("{} seen; reply to: {last}", users.len())
        };
        Ok(Completion {
            content: Some(content),
            finish_reason: Some(FinishReason::Stop),
            ..Completion::default()
        })
    }
}

/// The whole gateway over the adapter.
struct Bot {
    fake: FakeDiscord,
    adapter: DiscordAdapter,
    runner: GatewayRunner,
    _dir: tempfile::TempDir,
}

async fn bot(behaviour: Behaviour, tweak: impl FnOnce(&mut DiscordConfig)) -> Bot {
    let fake = FakeDiscord::start(behaviour).await;
    let mut c = config(&fake);
    tweak(&mut c);
    let adapter = DiscordAdapter::new(c);
    let dir = tempfile::tempdir().unwrap();
    let mut gw = GatewayConfig::default();
    gw.allow.allow_all = true;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter.clone())],
        factory: TestAgentFactory::new(Arc::new(Counting)),
        store: Arc::new(Mutex::new(
            Store::open(&dir.path().join("state.db")).unwrap(),
        )),
        clock: Arc::new(SystemClock),
        config: gw,
    });
    runner.start().await.unwrap();
    Bot {
        fake,
        adapter,
        runner,
        _dir: dir,
    }
}

/// Every `POST …/messages` body the adapter sent is a valid
/// create-message request by Discord's published schema, every
/// `PATCH …/messages/{id}` a valid edit-message request
/// (`tests/emulators/discord-spec`, from discord-api-spec), and every
/// interaction callback a valid type 4 or type 7 response.
fn assert_bodies_match_discord_schema(fake: &FakeDiscord) {
    hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("discord-spec"));
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/emulators/discord-spec");
    assert!(
        dir.join("node_modules/discord-api-spec").is_dir(),
        "run `npm ci --prefix {}` first (.ci/run does)",
        dir.display()
    );
    let out = std::process::Command::new("node")
        .arg("schema.mjs")
        .current_dir(&dir)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schemas: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = |name: &str| jsonschema::validator_for(&schemas[name]).unwrap();
    let (create, edit, message, update) = (
        validator("create_message"),
        validator("edit_message"),
        validator("interaction_message"),
        validator("interaction_update"),
    );
    let mut checked = 0;
    for call in fake
        .rest_calls()
        .into_iter()
        .filter(|c| c.method == "POST" || c.method == "PATCH")
    {
        let mut body = call.body;
        let schema = if call.method == "PATCH" && call.path.contains("/messages/") {
            &edit
        } else if call.method == "PATCH" {
            continue;
        } else if call.path.ends_with("/messages") {
            // The fake's record of the files of a multipart message.
            if let Some(o) = body.as_object_mut() {
                o.remove("files");
            }
            &create
        } else if call.path.starts_with("/interactions/") && body["type"] == 4 {
            &message
        } else if call.path.starts_with("/interactions/") {
            &update
        } else {
            continue;
        };
        checked += 1;
        let errors: Vec<String> = schema
            .iter_errors(&body)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}\n{body:#}");
    }
    assert!(checked > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifies_with_the_three_intents_and_reads_ready() {
    let (fake, adapter, _rx) = adapter(Behaviour::default()).await;
    let identify = &fake.client_ops(2)[0].payload["d"];
    assert_eq!(identify["token"], TOKEN);
    assert_eq!(identify["intents"], (1 << 9) | (1 << 12) | (1 << 15));
    assert!(identify["properties"]["os"].is_string());
    assert_eq!(adapter.state(), DiscordState::Connected);
    assert_eq!(
        adapter.bot_user_id().as_deref(),
        Some(discord_support::BOT_ID)
    );
    assert_eq!(fake.connections(), ["/gw/?v=10&encoding=json"]);
    assert_eq!(adapter.platform(), "discord");
    assert_eq!(adapter.max_message_len(), 2000);
    adapter.disconnect().await;
    assert_eq!(adapter.state(), DiscordState::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dms_are_answered_in_the_dm_as_a_reply_with_typing() {
    hermes_tests::require!(Npm("discord-spec"));
    let b = bot(Behaviour::default(), |_| {}).await;
    let id = b.fake.dm(ALICE, "hello there");
    let posted = b.fake.wait_posted(1).await;
    assert_eq!(posted[0].content, "1 seen; reply to: hello there");
    assert_eq!(posted[0].channel, b.fake.dm_channel(ALICE));
    assert_eq!(posted[0].reply_to.as_deref(), Some(id.as_str()));
    // The runner starts the typing indicator beside the turn; its request
    // may reach the server just after the reply, so it is waited for
    // (bounded), not expected first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !b.fake.typing().contains(&b.fake.dm_channel(ALICE)) {
        assert!(
            std::time::Instant::now() < deadline,
            "typing shown while the turn ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Mentions in the model's text never ping anyone.
    assert_eq!(
        posted[0].body["allowed_mentions"]["parse"],
        serde_json::json!([])
    );
    assert_bodies_match_discord_schema(&b.fake);
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mention_rule_and_free_response_channels() {
    let b = bot(Behaviour::default(), |c| {
        c.free_response_channels.insert("602".to_owned());
    })
    .await;
    b.fake
        .guild_message(CHANNEL, ALICE, "talking to someone else", false);
    b.fake.bot_message(CHANNEL, "a bot mentioning ours");
    let id = b.fake.guild_message(CHANNEL, ALICE, "what is 2+2?", true);
    let posted = b.fake.wait_posted(1).await;
    assert_eq!(
        posted[0].content, "1 seen; reply to: what is 2+2?",
        "mention stripped"
    );
    assert_eq!(posted[0].channel, CHANNEL);
    assert_eq!(posted[0].reply_to.as_deref(), Some(id.as_str()));
    b.fake
        .guild_message("602", BOB, "no mention needed here", false);
    let posted = b.fake.wait_posted(2).await;
    assert_eq!(
        posted[1].content,
        "1 seen; reply to: no mention needed here"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.fake.posted().len(),
        2,
        "unmentioned and bot messages are not answered"
    );
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_in_one_channel_have_separate_sessions() {
    let b = bot(Behaviour::default(), |c| c.require_mention = false).await;
    b.fake.guild_message(CHANNEL, ALICE, "a1", false);
    b.fake.wait_posted(1).await;
    b.fake.guild_message(CHANNEL, BOB, "b1", false);
    b.fake.wait_posted(2).await;
    b.fake.guild_message(CHANNEL, ALICE, "a2", false);
    let texts: Vec<String> = b
        .fake
        .wait_posted(3)
        .await
        .into_iter()
        .map(|p| p.content)
        .collect();
    assert_eq!(
        texts,
        [
            "1 seen; reply to: a1",
            "1 seen; reply to: b1",
            "2 seen; reply to: a2"
        ]
    );
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10000_character_answer_is_split_and_nothing_is_rejected() {
    hermes_tests::require!(Npm("discord-spec"));
    let b = bot(Behaviour::default(), |_| {}).await;
    let answer = long_answer();
    assert!(answer.chars().count() >= 10_000);
    b.fake.dm(ALICE, "long");
    b.fake
        .wait_for("the whole answer", |f| {
            f.posted().iter().map(|p| p.content.len()).sum::<usize>() + 20 >= answer.len()
        })
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let posted = b.fake.posted();
    assert!(posted.len() >= 6, "{}", posted.len());
    assert!(posted.iter().all(|p| p.content.chars().count() <= 2000));
    assert!(posted[0].reply_to.is_some() && posted[1..].iter().all(|p| p.reply_to.is_none()));
    let joined: String = posted
        .iter()
        .map(|p| p.content.trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        joined,
        answer.trim_end(),
        "every line arrives once, in order"
    );
    let calls = b.fake.rest_calls();
    let refused: Vec<_> = calls.iter().filter(|c| c.status >= 400).collect();
    // The channel's bucket (5 per 400 ms) is respected from its headers:
    // not even a 429.
    assert!(refused.is_empty(), "{refused:#?}");
    assert_bodies_match_discord_schema(&b.fake);
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_waited_out_and_the_message_delivered_once() {
    let b = bot(Behaviour::default(), |_| {}).await;
    b.fake.rate_limit_next(1, 0.6, false);
    b.fake.dm(ALICE, "first");
    b.fake.wait_posted(1).await;
    b.fake.rate_limit_next(1, 0.3, true);
    b.fake.dm(ALICE, "second");
    b.fake.wait_posted(2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posted = b.fake.posted();
    assert_eq!(posted.len(), 2, "each answer exactly once");
    let sends: Vec<_> = b
        .fake
        .rest_calls()
        .into_iter()
        .filter(|c| c.path.ends_with("/messages"))
        .collect();
    assert_eq!(
        sends.iter().map(|c| c.status).collect::<Vec<_>>(),
        [429, 200, 429, 200]
    );
    assert!(
        sends[1].at - sends[0].at >= Duration::from_millis(600),
        "retry_after waited out"
    );
    assert!(
        sends[3].at - sends[2].at >= Duration::from_millis(300),
        "the global limit too"
    );
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_at_the_interval_with_the_last_sequence() {
    let (fake, adapter, mut rx) = adapter(Behaviour {
        heartbeat_ms: 200,
        ..Behaviour::default()
    })
    .await;
    fake.dm(ALICE, "hi");
    next_event(&mut rx).await;
    let seq = fake.last_seq();
    fake.wait_for("5 heartbeats", |f| f.client_ops(1).len() >= 5)
        .await;
    let beats = fake.client_ops(1);
    let hello_at = fake.client_ops(2)[0].at;
    assert!(
        beats[0].at - hello_at <= Duration::from_millis(300),
        "first beat within one interval"
    );
    for pair in beats[1..].windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(180) && gap <= Duration::from_millis(400),
            "{gap:?}"
        );
    }
    assert_eq!(
        beats.last().unwrap().payload["d"],
        seq,
        "the last sequence number"
    );
    assert_eq!(
        fake.connections().len(),
        1,
        "every beat was acknowledged: no reconnect"
    );
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_connection_is_dropped_and_resumed() {
    let (fake, adapter, _rx) = adapter(Behaviour {
        heartbeat_ms: 150,
        ..Behaviour::default()
    })
    .await;
    let session = fake.session_id().unwrap();
    fake.set_acks(false);
    fake.wait_for("a RESUME", |f| !f.client_ops(6).is_empty())
        .await;
    fake.set_acks(true);
    assert_eq!(
        fake.client_ops(6)[0].payload["d"]["session_id"],
        session.as_str()
    );
    assert!(
        fake.connections()[1].starts_with("/resume"),
        "{:?}",
        fake.connections()
    );
    fake.wait_for("resumed", FakeDiscord::is_live).await;
    assert_eq!(fake.client_ops(2).len(), 1, "resumed, not identified again");
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op7_reconnect_resumes_with_the_session_and_last_sequence() {
    let (fake, adapter, mut rx) = adapter(Behaviour::default()).await;
    fake.dm(ALICE, "before");
    next_event(&mut rx).await;
    let (session, seq) = (fake.session_id().unwrap(), fake.last_seq());
    fake.reconnect();
    fake.wait_for("a RESUME", |f| !f.client_ops(6).is_empty())
        .await;
    let resume = &fake.client_ops(6)[0].payload["d"];
    assert_eq!(resume["session_id"], session.as_str());
    assert_eq!(resume["seq"], seq);
    assert_eq!(resume["token"], TOKEN);
    fake.wait_for("resumed", FakeDiscord::is_live).await;
    fake.dm(ALICE, "after");
    assert_eq!(next_event(&mut rx).await.text, "after");
    assert_eq!(fake.client_ops(2).len(), 1);
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_connection_is_down_is_answered_exactly_once() {
    let b = bot(Behaviour::default(), |_| {}).await;
    b.fake.dm(ALICE, "one");
    b.fake.wait_posted(1).await;
    let seq = b.fake.last_seq();
    b.fake.drop_connection();
    // Sent while no connection is live: Discord keeps it for the resume.
    b.fake.dm(ALICE, "two");
    b.fake
        .wait_for("a RESUME", |f| !f.client_ops(6).is_empty())
        .await;
    let resume = &b.fake.client_ops(6)[0].payload["d"];
    assert_eq!(resume["seq"], seq, "resumed from the last sequence seen");
    let posted = b.fake.wait_posted(2).await;
    assert_eq!(posted[1].content, "2 seen; reply to: two");
    // Discord delivers at least once: the replayed message is not
    // answered again (the runner remembers its id).
    b.fake.replay_on_next_resume();
    b.fake.close(4000);
    b.fake
        .wait_for("a second RESUME", |f| f.client_ops(6).len() >= 2)
        .await;
    b.fake.wait_for("resumed", FakeDiscord::is_live).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.fake.posted().len(), 2, "{:#?}", b.fake.posted());
    assert_eq!(b.adapter.state(), DiscordState::Connected);
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op9_invalid_session_identifies_again() {
    let (fake, adapter, mut rx) = adapter(Behaviour::default()).await;
    let first = fake.session_id().unwrap();
    fake.invalid_session(false);
    fake.wait_for("a second IDENTIFY", |f| f.client_ops(2).len() >= 2)
        .await;
    fake.wait_for("ready", FakeDiscord::is_live).await;
    assert_ne!(fake.session_id().unwrap(), first);
    assert!(
        fake.client_ops(6).is_empty(),
        "no RESUME of the dead session"
    );
    assert!(
        fake.connections()[1].starts_with("/gw"),
        "{:?}",
        fake.connections()
    );
    fake.dm(ALICE, "still there?");
    assert_eq!(next_event(&mut rx).await.source.chat_type, ChatType::Dm);
    // A resumable close code resumes; 4009 (session timed out) starts anew.
    fake.close(4009);
    fake.wait_for("a third IDENTIFY", |f| f.client_ops(2).len() >= 3)
        .await;
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_stops_with_one_line_and_no_retries() {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let mut c = config(&fake);
    c.token = "OTAw.wrong.token".into();
    let adapter = DiscordAdapter::new(c);
    let (handler, _rx) = collector();
    let err = adapter.connect(handler).await.unwrap_err();
    assert!(matches!(err, AdapterError::Auth { .. }), "{err:?}");
    let line = err.to_string();
    assert!(
        line.contains("DISCORD_BOT_TOKEN") && !line.contains('\n'),
        "{line}"
    );
    assert!(!line.contains("wrong"), "the token is never shown: {line}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.rest_calls().len(), 1, "not retried");
    assert!(matches!(adapter.state(), DiscordState::Stopped(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_mid_session_stops_at_close_code_4004() {
    let (fake, adapter, _rx) = adapter(Behaviour::default()).await;
    fake.revoke_token();
    fake.close(4000);
    let why = tokio::time::timeout(Duration::from_secs(20), adapter.wait_stopped())
        .await
        .unwrap();
    assert!(
        why.contains("4004") && why.contains("DISCORD_BOT_TOKEN"),
        "{why}"
    );
    let connections = fake.connections().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.connections().len(), connections, "no reconnect storm");
    assert!(adapter.stop_error().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_message_content_intent_names_the_portal_switch() {
    let fake = FakeDiscord::start(Behaviour {
        message_content_enabled: false,
        ..Behaviour::default()
    })
    .await;
    let adapter = DiscordAdapter::new(config(&fake));
    let (handler, _rx) = collector();
    let err = adapter.connect(handler).await.unwrap_err().to_string();
    assert!(
        err.contains("4014") && err.contains("MESSAGE CONTENT INTENT"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.connections().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_longer_than_ten_messages_sends_the_rest_as_a_file() {
    hermes_tests::require!(Npm("discord-spec"));
    let b = bot(Behaviour::default(), |_| {}).await;
    let answer = lines(600);
    b.fake.dm(ALICE, "huge");
    let posted = b.fake.wait_posted(10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.fake.posted().len(), 10, "nine messages and the file");
    let file = &posted[9].body["files"][0];
    assert_eq!(file["filename"], "reply.md");
    assert_eq!(posted[9].body["attachments"][0]["filename"], "reply.md");
    let rest = file["content"].as_str().unwrap();
    assert!(
        answer.ends_with(rest.trim_start()),
        "the file holds the end"
    );
    let shown: String = posted[..9].iter().map(|p| p.content.as_str()).collect();
    for line in answer.lines() {
        assert!(
            shown.contains(line) || rest.contains(line),
            "{line} was lost"
        );
    }
    assert_bodies_match_discord_schema(&b.fake);
    b.runner.shutdown().await;
}

/// `gateway run --check` goes through `verify` for Discord as for the
/// other platforms: a working token names the bot, a refused token or the
/// MESSAGE CONTENT switch off is a sentence naming what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_bot_and_refuses_a_bad_token_or_missing_intent() {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let ok = DiscordAdapter::new(config(&fake)).verify().await.unwrap();
    let ok = ok.expect("the bot is named");
    assert!(
        ok.contains(discord_support::BOT_ID) && ok.contains("MESSAGE CONTENT intent enabled"),
        "{ok}"
    );
    let mut c = config(&fake);
    c.token = "OTAw.nope.x".into();
    let err = DiscordAdapter::new(c).verify().await.unwrap_err();
    assert!(
        err.contains("DISCORD_BOT_TOKEN") && !err.contains("nope"),
        "{err}"
    );
    let fake_off = FakeDiscord::start(Behaviour {
        message_content_enabled: false,
        ..Behaviour::default()
    })
    .await;
    let err = DiscordAdapter::new(config(&fake_off))
        .verify()
        .await
        .unwrap_err();
    assert!(err.contains("MESSAGE CONTENT INTENT"), "{err}");
    let mut c = config(&fake);
    c.api_url = "http://127.0.0.1:9".into();
    let err = DiscordAdapter::new(c).verify().await.unwrap_err();
    assert!(err.contains("cannot reach"), "{err}");
}

/// A token revoked while serving is for the operator to fix: `gave_up`
/// resolves with the reason, so the gateway exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gave_up_resolves_when_the_token_is_revoked_mid_session() {
    let (fake, adapter, _rx) = adapter(Behaviour::default()).await;
    let waiting = {
        let adapter = adapter.clone();
        tokio::spawn(async move { adapter.gave_up().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "a healthy connection never gives up"
    );
    fake.revoke_token();
    fake.close(4000);
    let why = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("gave_up resolved")
        .unwrap();
    assert!(why.contains("DISCORD_BOT_TOKEN"), "{why}");
}

/// The model calls made, around [`Counting`].
struct CountedCalls(Arc<std::sync::atomic::AtomicUsize>);

impl Model for CountedCalls {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Counting.complete(request, sink)
    }
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// DM pairing (SPEC Y4) on Discord: a stranger's DM gets a code and no
/// model call; the operator approves it through the store (what `hermes
/// pairing approve` does, from another connection, while the gateway
/// runs); the user is then answered; wrong and reused codes fail; revoking
/// shuts the door again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_dm_gets_a_pairing_code_and_is_served_once_approved() {
    hermes_tests::require!(Npm("discord-spec"));
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let adapter = DiscordAdapter::new(config(&fake));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let mut gw = GatewayConfig::default();
    gw.allow.everywhere.insert(BOB.to_owned());
    assert!(gw.pairing, "pairing is on by default");
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter.clone())],
        factory: TestAgentFactory::new(Arc::new(CountedCalls(Arc::clone(&calls)))),
        store: Arc::new(Mutex::new(Store::open(&db).unwrap())),
        clock: Arc::new(SystemClock),
        config: gw,
    });
    runner.start().await.unwrap();
    let model_calls = || calls.load(std::sync::atomic::Ordering::SeqCst);

    fake.dm(ALICE, "hello, who are you?");
    let posted = fake.wait_posted(1).await;
    assert_eq!(posted[0].channel, fake.dm_channel(ALICE));
    let text = &posted[0].content;
    let code: String = text
        .split("pairing code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {text:?}"))
        .chars()
        .take(hermes_gateway::pairing::CODE_LEN)
        .collect();
    assert!(
        code.bytes()
            .all(|b| hermes_gateway::pairing::CODE_ALPHABET.contains(&b)),
        "{code}"
    );
    assert!(
        text.contains(&format!("hermes pairing approve discord {code}")),
        "{text}"
    );
    assert_eq!(model_calls(), 0, "no model call for a stranger");

    {
        let mut store = Store::open(&db).unwrap();
        // A wrong code, and the right one on another platform, fail.
        assert!(
            hermes_gateway::pairing::approve(&mut store, "discord", "ABCDEFGH", now_ms()).is_err()
        );
        assert!(hermes_gateway::pairing::approve(&mut store, "telegram", &code, now_ms()).is_err());
        let user =
            hermes_gateway::pairing::approve(&mut store, "discord", &code, now_ms()).unwrap();
        assert_eq!(user.user_id, ALICE);
        assert!(
            hermes_gateway::pairing::approve(&mut store, "discord", &code, now_ms()).is_err(),
            "a used code"
        );
    }
    fake.dm(ALICE, "now?");
    let posted = fake.wait_posted(2).await;
    assert_eq!(posted[1].content, "1 seen; reply to: now?");
    assert_eq!(model_calls(), 1);

    {
        let mut store = Store::open(&db).unwrap();
        assert!(hermes_gateway::pairing::revoke(&mut store, "discord", ALICE).unwrap());
    }
    fake.dm(ALICE, "still there?");
    let posted = fake.wait_posted(3).await;
    assert!(posted[2].content.contains("pairing code is"), "{posted:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(model_calls(), 1, "revoked: no model call");
    assert_bodies_match_discord_schema(&fake);
    runner.shutdown().await;
}
