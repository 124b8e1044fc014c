//! The kill -9 soak on Discord (SPEC E3, X5): real `hermes gateway run`
//! processes against the loopback fake Discord and a scripted provider that
//! both outlive them, on one `$HERMES_HOME`, killed with SIGKILL (now and
//! then stopped with SIGTERM) at random moments — mid-turn, while sending,
//! while catching up.
//!
//! Each round some users write while no gateway runs (a new process
//! IDENTIFYs a new session, to which Discord replays nothing: only the
//! adapter's catch-up from its stored marks finds these), then a gateway
//! starts, more users write once it is READY, and it is killed. A last
//! gateway runs until everything is answered. Checked: **0 lost** (every
//! message answered, or told its turn was cut by a restart), **0
//! duplicated** (no message answered twice), **0 transcribed twice**.
//!
//! 8 rounds by default; `HERMES_SOAK_ROUNDS`, `HERMES_SOAK_SEED` as for the
//! Telegram soak.
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod discord_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use discord_support::{FakeDiscord, TOKEN};
use hermes_core::Message;
use hermes_gateway::app::run_gateway;
use hermes_gateway::runner::{QUEUE_NOTICE, RESTART_NOTICE, STOPPED_NOTICE};
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::store::Store;
use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

const CHILD_ENV: &str = "HERMES_GATEWAY_DISCORD_SOAK_CHILD";
const USERS: [&str; 3] = ["101", "102", "103"];

/// xorshift64*, for replayable kill timings.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

fn question(n: u64) -> String {
    format!("soak message {n}")
}

fn answer(n: u64) -> String {
    format!("answer to #{n}")
}

fn asked(request: &Value) -> Option<u64> {
    request["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?["content"]
        .as_str()?
        .strip_prefix("soak message ")?
        .parse()
        .ok()
}

/// A tool call, then the answer streamed slowly: kills land mid-turn.
fn respond(request: &Value) -> Reply {
    let Some(n) = asked(request) else {
        return Reply::text("(no question)");
    };
    let last_is_tool = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    if last_is_tool {
        Reply::SlowText {
            pieces: vec!["answer ".into(), "to ".into(), format!("#{n}")],
            delay: Duration::from_millis(25),
        }
    } else {
        let id = format!(
            "call_{n}_{}",
            request["messages"].as_array().map_or(0, Vec::len)
        );
        Reply::tool(&id, "todo", r#"{"action":"list"}"#)
    }
}

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_gateway(home: &Path, api: &str, provider: &str) -> Gateway {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "discord_kill_9_soak_loses_nothing_and_duplicates_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("HERMES_HOME", home)
        .env("DISCORD_BOT_TOKEN", TOKEN)
        .env("DISCORD_API_URL", api)
        .env("DISCORD_ALLOWED_USERS", USERS.join(","))
        .env("HERMES_BASE_URL", provider)
        .env("HERMES_MODEL", "soak-model")
        .env("HERMES_TOOLSETS", "todo")
        .env("GATEWAY_BUSY_MODE", "queue")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Gateway(child)
}

/// Waits until a gateway newer than the `identified` IDENTIFYs so far is
/// READY on the fake.
fn wait_ready(fake: &FakeDiscord, identified: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(fake.client_ops(2).len() > identified && fake.is_live()) {
        assert!(Instant::now() < deadline, "the gateway never became READY");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn discord_kill_9_soak_loses_nothing_and_duplicates_nothing() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
        let code = match run_gateway(&settings, false) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gateway error: {e}");
                e.exit_code()
            }
        };
        std::process::exit(code);
    }
    let rounds: usize = std::env::var("HERMES_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let seed: u64 = std::env::var("HERMES_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("discord soak: {rounds} rounds, HERMES_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(FakeDiscord::start(discord_support::Behaviour {
        bucket_limit: 1000,
        ..Default::default()
    }));
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let api = fake.api_url();

    // Message number → its Discord id.
    let mut ids: HashMap<u64, String> = HashMap::new();
    let mut next: u64 = 1;
    let mut send = |fake: &FakeDiscord, ids: &mut HashMap<u64, String>| {
        let user = USERS[(next as usize) % USERS.len()];
        ids.insert(next, fake.dm(user, &question(next)));
        next += 1;
    };
    let (mut kills, mut graceful) = (0, 0);
    for round in 0..rounds {
        // Written while no gateway runs (from the second round on: before
        // the first gateway the bot has served no channel yet, and Discord
        // itself would not deliver those).
        if round > 0 {
            send(&fake, &mut ids);
            send(&fake, &mut ids);
        }
        let identified = fake.client_ops(2).len();
        let mut gateway = spawn_gateway(home, &api, &provider.base_url());
        wait_ready(&fake, identified);
        send(&fake, &mut ids);
        send(&fake, &mut ids);
        // The first gateway lives long enough to see every user once; a
        // DM channel the bot never saw a message in is not caught up in.
        let first = if round == 0 {
            send(&fake, &mut ids);
            300
        } else {
            0
        };
        std::thread::sleep(Duration::from_millis(first + rng.below(700)));
        if round % 5 == 4 {
            let pid = gateway.0.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status().unwrap();
            graceful += 1;
        } else {
            gateway.0.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        gateway.0.wait().unwrap();
    }
    // And some more while down, for the last gateway's catch-up.
    send(&fake, &mut ids);
    send(&fake, &mut ids);
    let total = next - 1;

    // (answers, restart notices) replying to message `n`.
    let outcome = |n: u64| -> (usize, usize) {
        let id = ids[&n].as_str();
        let replies: Vec<String> = fake
            .posted()
            .into_iter()
            .filter(|p| p.reply_to.as_deref() == Some(id) && p.content != QUEUE_NOTICE)
            .map(|p| p.content)
            .collect();
        let answers = replies
            .iter()
            .filter(|t| **t == answer(n) || t.ends_with(STOPPED_NOTICE))
            .count();
        let notices = replies.iter().filter(|t| **t == RESTART_NOTICE).count();
        assert_eq!(answers + notices, replies.len(), "message {n}: {replies:?}");
        (answers, notices)
    };
    let identified = fake.client_ops(2).len();
    let mut gateway = spawn_gateway(home, &api, &provider.base_url());
    wait_ready(&fake, identified);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(1..=total).all(|n| outcome(n) != (0, 0)) {
        if Instant::now() >= deadline {
            let missing: Vec<u64> = (1..=total).filter(|&n| outcome(n) == (0, 0)).collect();
            panic!("messages {missing:?} were never answered");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Late duplicates would show up now.
    std::thread::sleep(Duration::from_millis(500));
    let pid = gateway.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = gateway.0.wait().unwrap();
    assert!(status.success(), "the last gateway did not stop cleanly");

    let mut told = 0;
    for n in 1..=total {
        let (answers, notices) = outcome(n);
        assert!(answers <= 1, "message {n} was answered {answers} times");
        assert!(answers + notices >= 1, "message {n} was lost");
        told += usize::from(answers == 0);
    }
    let store = Store::open(&home.join("state.db")).unwrap();
    let mut transcribed: HashMap<String, usize> = HashMap::new();
    for session in store.list_sessions(usize::MAX).unwrap() {
        for entry in store.load_transcript(&session.id).unwrap() {
            if let Message::User { content, .. } = &entry.message {
                *transcribed.entry(content.clone()).or_default() += 1;
            }
        }
    }
    for n in 1..=total {
        assert_eq!(
            transcribed.get(&question(n)),
            Some(&1),
            "message {n} must be in exactly one transcript, once"
        );
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    eprintln!(
        "discord soak: {total} messages over {rounds} rounds ({kills} SIGKILL, {graceful} SIGTERM); \
         {told} told their turn was cut by a restart, the rest answered once"
    );
    drop(rt);
}
