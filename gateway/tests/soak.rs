//! The kill -9 soak test (SPEC E3, G11, X5): real `hermes gateway run`
//! processes, killed with SIGKILL (and now and then stopped with SIGTERM) at
//! random moments, against the loopback Telegram fake and a scripted
//! provider that both outlive them, on one `$HERMES_HOME`.
//!
//! Each round queues new user messages at the fake, starts a gateway, and
//! kills it after a random delay — before it polled, between accepting a
//! message and saving the offset, in the middle of a turn (between its tool
//! call and its answer), while it sends. A last gateway then runs until
//! everything is answered and stops gracefully. Checked at the end:
//! - **0 lost**: every message got its answer, or — when its turn was killed
//!   midway, which is never resumed — the restart notice, or — when a
//!   graceful stop cut its turn short — the partial answer and the stop
//!   notice;
//! - **0 duplicated**: no message got two answers;
//! - **0 transcribed twice**: every message is a user message of exactly
//!   one transcript, once;
//! - `PRAGMA integrity_check` is `ok`;
//! - **every tool call answered**: each stored tool call is followed by its
//!   result, and the provider, which checks every request, saw no
//!   violation.
//!
//! 30 rounds by default (what CI runs); `HERMES_SOAK_ROUNDS=300` for a
//! longer soak, `HERMES_SOAK_SEED=…` to replay the kill timings of a run
//! (each run prints its seed).
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod telegram_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_core::Message;
use hermes_gateway::app::run_gateway;
use hermes_gateway::inbox::{INBOX_KV_PREFIX, TURN_KV_PREFIX};
use hermes_gateway::runner::{QUEUE_NOTICE, RESTART_NOTICE, STOPPED_NOTICE};
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::store::Store;
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};
use telegram_support::{Fake, TOKEN};

const CHILD_ENV: &str = "HERMES_GATEWAY_SOAK_CHILD";
const USERS: [i64; 3] = [101, 102, 103];
const MESSAGES_PER_ROUND: usize = 2;

/// A small deterministic generator for the kill timings (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// The text of message `n`, and the answer the provider gives to it.
fn question(n: u64) -> String {
    format!("soak message {n}")
}

fn answer(n: u64) -> String {
    format!("answer to #{n}")
}

/// The number in the last user message of a request.
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

/// A turn of two model calls: a tool call (`todo list`), then the answer,
/// streamed slowly enough that kills land in the middle of turns.
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

/// Kills the child if the test fails while it runs.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_gateway(home: &Path, telegram: &str, provider: &str) -> Gateway {
    let users: Vec<String> = USERS.iter().map(i64::to_string).collect();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_9_soak_loses_nothing_and_duplicates_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("HERMES_HOME", home)
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_URL", telegram)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", users.join(","))
        .env("HERMES_BASE_URL", provider)
        .env("HERMES_MODEL", "soak-model")
        .env("HERMES_TOOLSETS", "todo")
        // One answer per message, so each can be counted.
        .env("GATEWAY_BUSY_MODE", "queue")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Gateway(child)
}

/// What the fake received through `sendMessage`: (chat, replied-to message
/// id, text).
fn sent(fake: &Fake) -> Vec<(i64, Option<i64>, String)> {
    fake.requests("sendMessage")
        .into_iter()
        .map(|r| {
            (
                r.body["chat_id"].as_i64().unwrap_or(0),
                r.body["reply_parameters"]["message_id"].as_i64(),
                r.body["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn dm(update_id: i64, message_id: i64, user: i64, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": message_id, "date": 0, "text": text,
        "from": {"id": user, "is_bot": false, "first_name": "Soak"},
        "chat": {"id": user, "type": "private"}}})
}

#[test]
fn kill_9_soak_loses_nothing_and_duplicates_nothing() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: exactly what `hermes gateway run` does.
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
        .unwrap_or(30);
    let seed: u64 = std::env::var("HERMES_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("soak: {rounds} rounds, HERMES_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(Fake::start(true));
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();

    let mut next: u64 = 1;
    let mut kills = 0;
    let mut graceful = 0;
    for round in 0..rounds {
        for _ in 0..MESSAGES_PER_ROUND {
            let user = USERS[(next as usize) % USERS.len()];
            let id = i64::try_from(next).unwrap();
            fake.push_update(dm(id, id, user, &question(next)));
            next += 1;
        }
        let mut gateway = spawn_gateway(home, &fake.base, &provider.base_url());
        std::thread::sleep(Duration::from_millis(rng.below(900)));
        if round % 7 == 6 {
            // Now and then a graceful stop: waiting messages must survive
            // that too (they are answered at the next start).
            let pid = gateway.0.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status().unwrap();
            graceful += 1;
        } else {
            gateway.0.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        gateway.0.wait().unwrap();
    }

    // The last gateway runs until every message has its answer or notice.
    let total = next - 1;
    // Per message: (answers — whole, or cut short by a graceful stop and
    // saying so —, restart notices). Anything else replying to it fails.
    let outcome = |n: u64| -> (usize, usize) {
        let id = i64::try_from(n).unwrap();
        let replies: Vec<String> = sent(&fake)
            .into_iter()
            .filter(|(_, to, t)| *to == Some(id) && t != QUEUE_NOTICE)
            .map(|(_, _, text)| text)
            .collect();
        let answers = replies
            .iter()
            .filter(|t| **t == answer(n) || t.ends_with(STOPPED_NOTICE))
            .count();
        let notices = replies.iter().filter(|t| **t == RESTART_NOTICE).count();
        assert_eq!(
            answers + notices,
            replies.len(),
            "message {n} got something else: {replies:?}"
        );
        (answers, notices)
    };
    let polls = fake.requests("getUpdates").len();
    let mut gateway = spawn_gateway(home, &fake.base, &provider.base_url());
    let deadline = Instant::now() + Duration::from_secs(120);
    // Up (and so listening for SIGTERM) once it polls.
    while fake.requests("getUpdates").len() == polls {
        assert!(Instant::now() < deadline, "the last gateway never polled");
        std::thread::sleep(Duration::from_millis(20));
    }
    while !(1..=total).all(|n| {
        let (a, no) = outcome(n);
        a + no > 0
    }) {
        if Instant::now() >= deadline {
            let missing: Vec<u64> = (1..=total).filter(|&n| outcome(n) == (0, 0)).collect();
            panic!("messages {missing:?} were never answered");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = gateway.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = gateway.0.wait().unwrap();
    assert!(
        status.success(),
        "the last gateway did not stop cleanly: {status:?}"
    );

    // 0 lost, 0 duplicated.
    let mut answered = 0;
    let mut told = 0;
    let mut both = 0;
    for n in 1..=total {
        let (answers, notices) = outcome(n);
        assert!(answers <= 1, "message {n} was answered {answers} times");
        assert!(answers + notices >= 1, "message {n} was lost");
        answered += answers;
        told += usize::from(answers == 0);
        // A kill after the answer went out but before its turn was marked
        // done: the user also hears the turn may be incomplete.
        both += usize::from(answers == 1 && notices > 0);
    }
    let cut = sent(&fake)
        .iter()
        .filter(|(_, _, t)| t.ends_with(STOPPED_NOTICE))
        .count();
    // Everything went to the chat of the message it replies to.
    for (chat, to, text) in sent(&fake) {
        let to = to.unwrap_or_else(|| panic!("{text:?} replies to nothing"));
        let user = USERS[usize::try_from(to).unwrap() % USERS.len()];
        assert_eq!(chat, user, "{text:?} went to chat {chat}");
        if let Some(rest) = text.strip_prefix("answer to #") {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(n.parse::<i64>().ok(), Some(to), "{text} replied to {to}");
        }
    }

    // 0 transcribed twice, and the store is sound.
    let db = home.join("state.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
    let store = Store::open(&db).unwrap();
    let mut transcribed: HashMap<String, usize> = HashMap::new();
    let mut tool_calls = 0;
    for session in store.list_sessions(usize::MAX).unwrap() {
        let transcript = store.load_transcript(&session.id).unwrap();
        for (i, entry) in transcript.iter().enumerate() {
            match &entry.message {
                Message::User { content, .. } => {
                    *transcribed.entry(content.clone()).or_default() += 1
                }
                Message::Assistant {
                    tool_calls: calls, ..
                } => {
                    // Every tool call is answered, in order, right after it.
                    for (k, call) in calls.iter().enumerate() {
                        tool_calls += 1;
                        match transcript.get(i + 1 + k).map(|e| &e.message) {
                            Some(Message::Tool { tool_call_id, .. }) => {
                                assert_eq!(tool_call_id, &call.id, "session {}", session.id)
                            }
                            other => panic!(
                                "session {}: tool call {} unanswered ({other:?})",
                                session.id, call.id
                            ),
                        }
                    }
                }
                Message::Tool { .. } => {}
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
    assert_eq!(transcribed.len() as u64, total, "{transcribed:?}");
    assert!(store.kv_scan(INBOX_KV_PREFIX).unwrap().is_empty());
    assert!(store.kv_scan(TURN_KV_PREFIX).unwrap().is_empty());
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    eprintln!(
        "soak: {total} messages over {rounds} rounds ({kills} SIGKILL, {graceful} SIGTERM): \
         {answered} answered ({cut} of them cut short by a graceful stop), {told} told their \
         turn was cut by a restart ({both} more answered and also told), {tool_calls} tool calls \
         stored and answered; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(rt);
}
