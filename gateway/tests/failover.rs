//! Failover between gateways sharing one PostgreSQL database (SPEC X8),
//! with real processes: `hermes gateway run` children on their own homes
//! ("two boxes"), one database (a private server), one fake Telegram bot
//! with Telegram's 409 rule (a newer `getUpdates` ends a held one) reached
//! through a port per gateway, and a slow scripted model (≈ 0.45 s a turn)
//! behind a provider per gateway, so each model call is known to come from
//! one gateway.
//!
//! 200 messages over 20 chats, some delivered again. Gateway A serves
//! first, B stands by. A is SIGKILLed in the middle of a turn: B takes the
//! bot over within seconds. A fresh A′ stands by; B is SIGSTOPped in the
//! middle of a turn: A′ takes over, and finds B's turn killed midway. B is
//! then SIGCONTed. Checked:
//! - every message id is exactly once a user message of one transcript;
//! - no two turns of a session overlap (model calls per chat, across all
//!   gateways);
//! - the stopped gateway's late writes were refused: its answer to the turn
//!   A′ took over is in no transcript and never sent, and it sends nothing
//!   after waking;
//! - the gateways never poll at once: no two overlapping polls from two
//!   gateways both got updates, and B polls nothing after SIGCONT (it found
//!   its lease gone before anything else);
//! - every message is answered at most once and told at most once that
//!   the gateway restarted, at least one of the two — the turns cut by the
//!   kill and the stop are told, not answered; told *and* answered only when
//!   the answer went out just before its gateway died (the turn could not be
//!   marked done) — and every message sent after the last takeover is
//!   answered exactly once.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::Message;
use hermes_gateway::app::run_gateway;
use hermes_gateway::runner::{QUEUE_NOTICE, RESTART_NOTICE};
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::store::Store;
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};
use telegram_support::{Fake, TOKEN};

const CHILD_ENV: &str = "HERMES_GATEWAY_FAILOVER_CHILD";
const TEST_NAME: &str = "failover::two_gateways_fail_over_without_loss_duplicates_or_overlap";
const CHATS: i64 = 20;
const MESSAGES: i64 = 200;
const LEASE_TTL_MS: u64 = 1500;
/// One model call streams three pieces this far apart.
const PIECE: Duration = Duration::from_millis(150);
const TURN: Duration = Duration::from_millis(450);
const WAIT: Duration = Duration::from_secs(120);

fn user_of(n: i64) -> i64 {
    1000 + n % CHATS
}

fn question(n: i64) -> String {
    format!("failover message {n}")
}

fn answer(n: i64) -> String {
    format!("answer to #{n}")
}

fn update(n: i64) -> Value {
    let user = user_of(n);
    json!({"update_id": n, "message": {
        "message_id": n, "date": 0, "text": question(n),
        "from": {"id": user, "is_bot": false, "first_name": "F"},
        "chat": {"id": user, "type": "private"}}})
}

/// One model call: which message, when, through which gateway's provider.
#[derive(Clone, Debug)]
struct Call {
    n: i64,
    at: Instant,
    gateway: &'static str,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// A provider for one gateway: answers "answer to #n", slowly, and logs.
fn provider(gateway: &'static str, calls: &Calls) -> FakeProvider {
    let calls = Arc::clone(calls);
    FakeProvider::start_with(
        Vec::new(),
        None,
        Some(Arc::new(move |request: &Value| {
            let n = request["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                .and_then(|m| m["content"].as_str())
                .and_then(|t| t.strip_prefix("failover message "))
                .and_then(|t| t.parse::<i64>().ok());
            let Some(n) = n else {
                return Reply::text("(no question)");
            };
            calls.lock().unwrap().push(Call {
                n,
                at: Instant::now(),
                gateway,
            });
            Reply::SlowText {
                pieces: vec!["answer ".into(), "to ".into(), format!("#{n}")],
                delay: PIECE,
            }
        })),
    )
    .unwrap()
}

/// Kills the child if the test fails while it runs.
struct Gateway {
    child: Child,
    name: &'static str,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {}", self.name);
    }
}

fn spawn_gateway(
    name: &'static str,
    home: &Path,
    db: &str,
    telegram: &str,
    provider: &FakeProvider,
) -> Gateway {
    std::fs::create_dir_all(home).unwrap();
    let users: Vec<String> = (0..CHATS).map(|i| (1000 + i).to_string()).collect();
    let log = std::fs::File::create(home.join("gateway.log")).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD_ENV, name)
        .env("HERMES_HOME", home)
        .env("HERMES_DATABASE_URL", db)
        .env("GATEWAY_LEASE_TTL_MS", LEASE_TTL_MS.to_string())
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_URL", telegram)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", users.join(","))
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_MODEL", "failover-model")
        .env("HERMES_TOOLSETS", "todo")
        // One answer per message, so each can be counted.
        .env("GATEWAY_BUSY_MODE", "queue")
        // Whole replies: a streamed preview of a turn cut by a kill would
        // be a partial message, not an answer (streaming: progress.rs).
        .env("GATEWAY_STREAM_REPLIES", "false")
        .env(
            "RUST_LOG",
            "hermes_gateway=info,hermes_runner=info,hermes_runtime=warn",
        )
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Gateway { child, name }
}

/// `(door, replied-to message, text, when)` of every `sendMessage`.
fn sent(fake: &Fake) -> Vec<(usize, i64, String, Instant)> {
    fake.requests("sendMessage")
        .into_iter()
        .map(|r| {
            (
                r.door,
                r.body["reply_parameters"]["message_id"]
                    .as_i64()
                    .unwrap_or(-1),
                r.body["text"].as_str().unwrap_or("").to_owned(),
                r.at,
            )
        })
        .collect()
}

/// (answers, restart notices) each message got.
fn outcomes(fake: &Fake) -> HashMap<i64, (usize, usize)> {
    let mut out: HashMap<i64, (usize, usize)> = HashMap::new();
    for (_, to, text, _) in sent(fake) {
        if text == QUEUE_NOTICE {
            continue;
        }
        let slot = out.entry(to).or_default();
        if text == answer(to) {
            slot.0 += 1;
        } else if text == RESTART_NOTICE {
            slot.1 += 1;
        } else {
            panic!("message {to} got {text:?}");
        }
    }
    out
}

/// Where the gateways' homes are, for their logs in failure messages.
static BOXES: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);
/// The database, for its leases in failure messages.
static DB: Mutex<Option<String>> = Mutex::new(None);

/// The gateways' logs (their last lines), for a failure message.
fn logs() -> String {
    let Some(dir) = BOXES.lock().unwrap().clone() else {
        return String::new();
    };
    let mut out = String::new();
    if let Some(db) = DB.lock().unwrap().clone() {
        let leases = std::thread::spawn(move || Store::open_url(&db).and_then(|s| s.leases("")))
            .join()
            .unwrap();
        out.push_str(&format!("\n--- leases ---\n{leases:#?}"));
    }
    for name in ["a", "b", "a2"] {
        if let Ok(log) = std::fs::read_to_string(dir.join(name).join("gateway.log")) {
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!("\n--- gateway {name} ---\n{}", tail.join("\n")));
        }
    }
    out
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The message whose model call, through `gateway`'s provider, is
/// streaming now (started within the last part of a turn).
fn mid_turn(calls: &Calls, gateway: &str) -> Option<i64> {
    let calls = calls.lock().unwrap();
    let last = calls.iter().rev().find(|c| c.gateway == gateway)?;
    let age = last.at.elapsed();
    (age > PIECE / 2 && age < TURN - PIECE / 2).then_some(last.n)
}

fn push(fake: &Fake, range: std::ops::RangeInclusive<i64>) {
    for n in range {
        fake.push_update(update(n));
        if n % 10 == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn two_gateways_fail_over_without_loss_duplicates_or_overlap() {
    if let Some(name) = std::env::var_os(CHILD_ENV) {
        // A child: exactly what `hermes gateway run` does.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
        tracing::info!(gateway = ?name, "starting");
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
    // After the child branch: a child runs with a cleared environment.
    hermes_tests::require!(Postgres);
    let started = Instant::now();
    let db = hermes_tests::postgres::fresh_database();
    *DB.lock().unwrap() = Some(db.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(Fake::start(true));
    let door_b = rt.block_on(fake.open_door());
    let door_a2 = rt.block_on(fake.open_door());
    let calls: Calls = Arc::default();
    let (pa, pb, pa2) = (
        provider("A", &calls),
        provider("B", &calls),
        provider("A2", &calls),
    );
    let boxes = tempfile::tempdir().unwrap();
    *BOXES.lock().unwrap() = Some(boxes.path().to_owned());
    let polls_from = |door: usize| fake.polls().into_iter().filter(|p| p.door == door).count();

    // A serves; B stands by.
    let a = spawn_gateway("A", &boxes.path().join("a"), &db, &fake.base, &pa);
    wait_until("A to poll", || polls_from(0) > 0);
    let b = spawn_gateway("B", &boxes.path().join("b"), &db, &door_b, &pb);
    std::thread::sleep(Duration::from_millis(2 * LEASE_TTL_MS));
    assert_eq!(polls_from(1), 0, "B polled while A held the bot");

    // Messages 1–70; A is killed in the middle of a turn.
    push(&fake, 1..=70);
    wait_until("A to answer 30 messages", || outcomes(&fake).len() >= 30);
    let mut killed_mid_turn = None;
    wait_until("A to be in the middle of a turn", || {
        killed_mid_turn = mid_turn(&calls, "A");
        killed_mid_turn.is_some()
    });
    a.signal("-KILL");
    let killed_at = Instant::now();
    let m_a = killed_mid_turn.unwrap();
    wait_until("B to take over", || polls_from(1) > 0);
    let takeover = fake
        .polls()
        .into_iter()
        .find(|p| p.door == 1)
        .unwrap()
        .at
        .duration_since(killed_at);
    assert!(
        takeover < Duration::from_millis(LEASE_TTL_MS) + Duration::from_secs(5),
        "B took over {takeover:?} after the kill"
    );
    drop(a);

    // Messages 71–140, some of 1–70 delivered again; a fresh A′ stands by.
    push(&fake, 71..=140);
    fake.redeliver((1..=70).step_by(7).map(update).collect());
    let a2 = spawn_gateway("A2", &boxes.path().join("a2"), &db, &door_a2, &pa2);
    wait_until("B to answer 100 messages", || outcomes(&fake).len() >= 100);

    // B is stopped in the middle of a turn; A′ takes over.
    let mut stopped_mid_turn = None;
    wait_until("B to be in the middle of a turn", || {
        stopped_mid_turn = mid_turn(&calls, "B");
        stopped_mid_turn.is_some()
    });
    b.signal("-STOP");
    let stopped_at = Instant::now();
    let m_b = stopped_mid_turn.unwrap();
    wait_until("A′ to take over", || polls_from(2) > 0);
    push(&fake, 141..=MESSAGES);
    fake.redeliver((71..=140).step_by(9).map(update).collect());
    // A′ finds B's turn killed midway (its session lease lapsed) and tells
    // the user; only then does B wake up.
    wait_until("A′ to notice B's interrupted turn", || {
        outcomes(&fake).get(&m_b).is_some_and(|o| o.1 > 0)
    });
    b.signal("-CONT");
    let woke_at = Instant::now();

    // Everything answered (or told), then a quiet moment for strays.
    wait_until("every message to be answered or told", || {
        let o = outcomes(&fake);
        (1..=MESSAGES).all(|n| o.get(&n).is_some_and(|(a, t)| a + t > 0))
    });
    std::thread::sleep(Duration::from_millis(3 * LEASE_TTL_MS));
    a2.signal("-TERM");
    b.signal("-TERM");
    let (mut a2, mut b) = (a2, b);
    assert!(
        a2.child.wait().unwrap().success(),
        "A′ did not stop cleanly"
    );
    assert!(b.child.wait().unwrap().success(), "B did not stop cleanly");

    // Answered once, or told once; after the last takeover, answered once.
    let outcomes = outcomes(&fake);
    let mut answered_and_told = 0;
    for n in 1..=MESSAGES {
        let (answers, notices) = outcomes.get(&n).copied().unwrap_or_default();
        let at = |t: Instant| -> String {
            let ms = |a: Instant, b: Instant| {
                if a >= b {
                    (a - b).as_millis() as i128
                } else {
                    -((b - a).as_millis() as i128)
                }
            };
            format!(
                "{} ms after the kill, {} ms after the stop, {} ms after the wake",
                ms(t, killed_at),
                ms(t, stopped_at),
                ms(t, woke_at)
            )
        };
        let detail: Vec<String> = sent(&fake)
            .into_iter()
            .filter(|(_, to, _, _)| *to == n)
            .map(|(door, _, text, t)| format!("door {door}: {text:?} {}", at(t)))
            .collect();
        let context = || {
            format!(
                "message {n}: {answers} answers, {notices} restart notices (killed during #{m_a}, \
                 stopped during #{m_b}): {detail:#?}{}",
                logs()
            )
        };
        assert!(answers <= 1, "{}", context());
        assert!(answers + notices >= 1, "{}", context());
        if answers == 1 && notices == 1 {
            // The answer went out just before its gateway died, before the
            // turn could be marked done: the next holder cannot know, and
            // says the answer may be incomplete. Only ever for a turn that
            // straddled a failover.
            let (door, _, _, at) = sent(&fake)
                .into_iter()
                .find(|(_, to, text, _)| *to == n && *text == answer(n))
                .unwrap();
            let cut = if door == 0 { killed_at } else { stopped_at };
            assert!(door != 2 && at <= cut, "{}", context());
            answered_and_told += 1;
        }
        assert!(notices <= 1, "{}", context());
    }
    for n in [m_a, m_b] {
        assert_eq!(
            outcomes.get(&n),
            Some(&(0, 1)),
            "the turn of message {n} was cut by the failover: one notice, no answer"
        );
    }
    for n in 141..=MESSAGES {
        assert_eq!(outcomes.get(&n), Some(&(1, 0)), "message {n}");
    }

    // Each message once in one transcript; B's late answer refused.
    let store = Store::open_url(&db).unwrap();
    let mut transcribed: HashMap<String, usize> = HashMap::new();
    let mut assistant_texts: Vec<String> = Vec::new();
    for session in store.list_sessions(usize::MAX).unwrap() {
        for entry in store.load_transcript(&session.id).unwrap() {
            match &entry.message {
                Message::User { content, .. } => {
                    *transcribed.entry(content.clone()).or_default() += 1
                }
                Message::Assistant {
                    content: Some(text),
                    ..
                } => assistant_texts.push(text.clone()),
                _ => {}
            }
        }
    }
    for n in 1..=MESSAGES {
        assert_eq!(
            transcribed.get(&question(n)),
            Some(&1),
            "message {n} must be in exactly one transcript, once"
        );
    }
    assert_eq!(transcribed.len(), MESSAGES as usize);
    assert!(
        !assistant_texts.contains(&answer(m_b)),
        "the stopped gateway's late answer to #{m_b} was stored"
    );
    let after_wake: Vec<_> = sent(&fake)
        .into_iter()
        .filter(|(door, _, _, at)| *door == 1 && *at > woke_at)
        .collect();
    assert!(after_wake.is_empty(), "B sent after waking: {after_wake:?}");

    // Never two pollers: no poll from B after it woke, and no two polls of
    // two gateways that overlapped both got updates.
    let polls = fake.polls();
    assert!(
        polls.iter().all(|p| p.door != 1 || p.at < woke_at),
        "B polled after waking up"
    );
    for (i, p) in polls.iter().enumerate() {
        for q in &polls[i + 1..] {
            let overlap = q.at < p.answered && p.at < q.answered;
            if p.door != q.door && overlap {
                assert!(
                    p.updates.is_empty() || q.updates.is_empty(),
                    "gateways {} and {} both got updates at once: {p:?} {q:?}",
                    p.door,
                    q.door
                );
            }
        }
    }

    // No overlapping turns of one chat, across gateways: each model call of
    // a chat starts after the previous one ended (a call of the killed
    // gateway ended when it died).
    let calls = calls.lock().unwrap().clone();
    let mut by_chat: HashMap<i64, Vec<&Call>> = HashMap::new();
    for c in &calls {
        by_chat.entry(user_of(c.n)).or_default().push(c);
    }
    for (chat, list) in &mut by_chat {
        list.sort_by_key(|c| c.at);
        for pair in list.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            let mut end = first.at + TURN;
            if first.gateway == "A" {
                end = end.min(killed_at);
            }
            assert!(
                next.at + Duration::from_millis(20) >= end,
                "chat {chat}: the turn of #{} ({}) began before the turn of #{} ({}) ended",
                next.n,
                next.gateway,
                first.n,
                first.gateway
            );
        }
    }
    for p in [&pa, &pb, &pa2] {
        assert!(p.violations().is_empty(), "{:?}", p.violations());
    }
    eprintln!(
        "failover: {MESSAGES} messages over {CHATS} chats; SIGKILL of A during #{m_a}, B took over \
         after {takeover:?}; SIGSTOP of B during #{m_b}, A′ took over; {} model calls; \
         {answered_and_told} answered just before a failover and also told; {:.1} s",
        calls.len(),
        started.elapsed().as_secs_f64()
    );
    drop(rt);
}
