//! Nothing lost across a restart on Discord: a new process IDENTIFYs a new
//! session, to which Discord replays nothing, so the adapter catches up
//! with `GET /channels/{id}/messages?after=` in the channels it served,
//! from the marks it keeps in the store. Runner + adapter level, on one
//! SQLite file reopened by the second gateway, against the loopback fake
//! Discord (which keeps every channel's history and serves it newest
//! first, as Discord does).
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::discord_support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use discord_support::{Behaviour, FakeDiscord, TOKEN};
use hermes_core::{ChatRequest, Completion, FinishReason, Message, Model, ModelError, StreamSink};
use hermes_discord::{DiscordAdapter, DiscordConfig, MARK_KV_PREFIX};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::TestAgentFactory;
use hermes_runtime::store::{Store, SystemClock};

const ALICE: &str = "111";
const BOB: &str = "222";
const CHANNEL: &str = "601";

/// Says how many user messages the conversation holds and echoes the last.
struct Counting;

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
        Ok(Completion {
            content: Some(format!("{} seen; reply to: {last}", users.len())),
            finish_reason: Some(FinishReason::Stop),
            ..Completion::default()
        })
    }
}

/// A gateway (runner + adapter) on the store file `db`.
async fn gateway(fake: &FakeDiscord, db: &Path) -> GatewayRunner {
    let mut c = DiscordConfig::new(TOKEN);
    c.api_url = fake.api_url();
    c.connect_timeout = Duration::from_secs(5);
    let store = Arc::new(Mutex::new(Store::open(db).unwrap()));
    let adapter = DiscordAdapter::with_store(c, Some(Arc::clone(&store)));
    let mut gw = GatewayConfig::default();
    gw.allow.allow_all = true;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter)],
        factory: TestAgentFactory::new(Arc::new(Counting)),
        store,
        clock: Arc::new(SystemClock),
        config: gw,
    });
    runner.start().await.unwrap();
    runner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_no_gateway_ran_are_answered_once_after_a_restart() {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");

    let first = gateway(&fake, &db).await;
    let one = fake.dm(ALICE, "one");
    fake.guild_message(CHANNEL, BOB, "hello", true);
    fake.wait_posted(2).await;
    first.shutdown().await;
    drop(first);

    // A kill between accepting "one" and saving its mark: the DM channel's
    // mark is moved back before it, so the catch-up reads "one" again.
    {
        let mut store = Store::open(&db).unwrap();
        let marks = store.kv_scan(MARK_KV_PREFIX).unwrap();
        let dm = fake.dm_channel(ALICE);
        let key = marks
            .iter()
            .map(|(k, _)| k.clone())
            .find(|k| k.ends_with(&format!(".{dm}")))
            .expect("the DM channel has a mark");
        let before_one = one.parse::<u64>().unwrap() - 1;
        store.kv_set(&key, &before_one.to_string()).unwrap();
        assert!(
            marks
                .iter()
                .any(|(k, _)| k.ends_with(&format!(".{CHANNEL}")))
        );
    }

    // While no gateway runs: a DM, more chatter in the channel than one
    // page holds, and a mention after it.
    fake.dm(ALICE, "two");
    for i in 0..130 {
        fake.guild_message(CHANNEL, ALICE, &format!("chatter {i}"), false);
    }
    let three = fake.guild_message(CHANNEL, BOB, "three", true);

    let second = gateway(&fake, &db).await;
    let posted = fake.wait_posted(4).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let posted_now = fake.posted();
    assert_eq!(posted_now.len(), 4, "{posted_now:#?}");
    let contents: Vec<&str> = posted.iter().map(|p| p.content.as_str()).collect();
    // "one" was fetched again but not answered or transcribed again.
    assert!(contents.contains(&"2 seen; reply to: two"), "{contents:?}");
    assert!(
        contents.contains(&"2 seen; reply to: three"),
        "{contents:?}"
    );
    assert!(
        posted
            .iter()
            .any(|p| p.reply_to.as_deref() == Some(three.as_str()))
    );
    // The catch-up read pages, each `after` the newest of the last.
    let reads: Vec<String> = fake
        .rest_calls()
        .into_iter()
        .filter(|c| c.method == "GET" && c.path == format!("/channels/{CHANNEL}/messages"))
        .map(|c| c.path)
        .collect();
    assert!(reads.len() >= 2, "the 132 missed messages take two pages");
    second.shutdown().await;
}
