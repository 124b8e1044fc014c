//! The kill -9 soak (SPEC E3, G11, X5), the conformance kit's hardest
//! promise: real `hermes gateway run` processes killed with SIGKILL — now
//! and then stopped with SIGTERM — at random moments, against a platform
//! peer and a scripted provider that both outlive them, on one
//! `$HERMES_HOME`.
//!
//! [`Plan`] (the harness's [`Harness::soak_plan`]) says when messages are
//! written (while no gateway runs, once one is up) and how kills are timed.
//! A last gateway runs until everything is answered and stops gracefully.
//! Checked at the end, the same for every platform:
//! - **0 lost**: every message got its answer, or — when its turn was killed
//!   midway, which is never resumed — the restart notice, or — when a
//!   graceful stop cut its turn short — the partial answer and the stop
//!   notice;
//! - **0 duplicated**: no message got two answers;
//! - every reply went to the chat of the message it replies to, and an
//!   answer to the message it answers;
//! - **0 transcribed twice**: every message is a user message of exactly
//!   one transcript, once; `PRAGMA integrity_check` is `ok`; the inbox and
//!   the running-turn marks are empty;
//! - **every tool call answered**: each stored tool call is followed by its
//!   result, and the provider, which checks every request, saw no
//!   violation.
//!
//! `HERMES_SOAK_ROUNDS` overrides a soak's round count, `HERMES_SOAK_SEED`
//! replays the kill timings of a run (each run prints its seed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_core::Message;
use hermes_gateway::inbox::{INBOX_KV_PREFIX, TURN_KV_PREFIX};
use hermes_gateway::runner::{QUEUE_NOTICE, RESTART_NOTICE, STOPPED_NOTICE};
use hermes_runtime::store::Store;
use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::gateway::{Gateway, env_number, serve_if_child};
use super::{Harness, Place, Posted, Said, Sender};

/// When messages are written and how gateways die.
pub struct Plan {
    /// Rounds unless `HERMES_SOAK_ROUNDS` says otherwise.
    pub rounds: usize,
    /// How many users write, in turn.
    pub users: usize,
    /// Messages written each round before its gateway starts.
    pub while_down: usize,
    /// Whether the first round also writes before its gateway starts (not
    /// where a platform never delivers what came before the bot's first
    /// connection).
    pub down_in_first_round: bool,
    /// Messages written each round once its gateway is up (the driver then
    /// waits for it to be up).
    pub while_up: usize,
    /// Extra messages and extra life for the first gateway.
    pub first_round_extra: (usize, Duration),
    /// A gateway is killed within this long of being up (or started).
    pub kill_within: Duration,
    /// Every n-th round ends in SIGTERM instead of SIGKILL.
    pub graceful_every: usize,
    /// Messages written before the last gateway starts.
    pub before_last: usize,
    /// How long the last gateway keeps running once everything is answered
    /// (late duplicates would show up in it).
    pub settle: Duration,
}

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
pub fn question(n: u64) -> String {
    format!("soak message {n}")
}

fn answer(n: u64) -> String {
    format!("answer to #{n}")
}

/// The number of the soak message in `text` (a platform may put more
/// around it, as Email does the subject).
fn number_in(text: &str) -> Option<u64> {
    let rest = text.split_once("soak message ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The number in the last user message of a request.
fn asked(request: &Value) -> Option<u64> {
    number_in(
        request["messages"]
            .as_array()?
            .iter()
            .rev()
            .find(|m| m["role"] == "user")?["content"]
            .as_str()?,
    )
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

/// Runs the kill -9 soak on `H` (the test `test`, by its full name), then
/// checks the outcome.
pub fn run<H: Harness>(test: &str) {
    // The child serves first: it runs with a cleared environment, where
    // the components' variables are not set (`gateway.rs`).
    serve_if_child();
    if !hermes_tests::tier::require(H::needs()) {
        return;
    }
    let plan = H::soak_plan();
    let name = H::NAME;
    let rounds = env_number("HERMES_SOAK_ROUNDS").map_or(plan.rounds, |r| r as usize);
    let seed = env_number("HERMES_SOAK_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1
    });
    eprintln!("{name} soak: {rounds} rounds, HERMES_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut platform = H::start(&rt);
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let env = platform.env();
    let spawn = || Gateway::spawn(test, &env, home, home, &provider.base_url());

    // Message number → where it landed.
    let mut posted: HashMap<u64, Posted> = HashMap::new();
    let mut next: u64 = 1;
    let mut write = |platform: &mut H, count: usize| {
        for _ in 0..count {
            let user = next as usize % plan.users;
            posted.insert(
                next,
                platform.send(Sender::User(user), Place::Dm, &question(next)),
            );
            next += 1;
        }
    };
    let (mut kills, mut graceful) = (0, 0);
    for round in 0..rounds {
        if round > 0 || plan.down_in_first_round {
            write(&mut platform, plan.while_down);
        }
        let mark = platform.mark();
        let mut gateway = spawn();
        let mut life = Duration::ZERO;
        if plan.while_up > 0 || round == 0 && plan.first_round_extra.0 > 0 {
            platform.wait_up(mark);
            write(&mut platform, plan.while_up);
        }
        if round == 0 {
            write(&mut platform, plan.first_round_extra.0);
            life = plan.first_round_extra.1;
        }
        let within = u64::try_from(plan.kill_within.as_millis()).unwrap_or(u64::MAX);
        std::thread::sleep(life + Duration::from_millis(rng.below(within)));
        if round % plan.graceful_every == plan.graceful_every - 1 {
            // Waiting messages must survive a graceful stop too (they are
            // answered at the next start).
            gateway.terminate();
            graceful += 1;
        } else {
            gateway.kill();
            kills += 1;
        }
    }
    write(&mut platform, plan.before_last);
    let total = next - 1;

    let mark = platform.mark();
    let mut gateway = spawn();
    platform.wait_up(mark);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let said = platform.said();
        let missing: Vec<u64> = (1..=total)
            .filter(|&n| outcome(&said, &posted[&n].id, n) == (0, 0))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "messages {missing:?} were never answered; the bot said {:#?}",
            said.iter().rev().take(8).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(plan.settle);
    let status = gateway.terminate();
    assert!(
        status.success(),
        "the last gateway did not stop cleanly: {status:?}"
    );

    // 0 lost, 0 duplicated, everything where it belongs.
    let said = platform.said();
    let (mut answered, mut told, mut both) = (0, 0, 0);
    for n in 1..=total {
        let (answers, notices) = outcome(&said, &posted[&n].id, n);
        assert!(answers <= 1, "message {n} was answered {answers} times");
        assert!(answers + notices >= 1, "message {n} was lost");
        answered += answers;
        told += usize::from(answers == 0);
        // A kill after the answer went out but before its turn was marked
        // done: the user also hears the turn may be incomplete.
        both += usize::from(answers == 1 && notices > 0);
    }
    let cut = said
        .iter()
        .filter(|s| s.text.ends_with(STOPPED_NOTICE))
        .count();
    check_addressed(&said, &posted);
    let tool_calls = check_store(&home.join("state.db"), total);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    eprintln!(
        "{} soak: {total} messages over {rounds} rounds ({kills} SIGKILL, {graceful} SIGTERM): \
         {answered} answered ({cut} of them cut short by a graceful stop), {told} told their \
         turn was cut by a restart ({both} more answered and also told), {tool_calls} tool calls \
         stored and answered; {:.1} s",
        name,
        started.elapsed().as_secs_f64()
    );
    drop(rt);
}

/// Per message `n` (platform id `id`): (answers — whole, or cut short by a
/// graceful stop and saying so —, restart notices). Anything else replying
/// to it fails.
fn outcome(said: &[Said], id: &str, n: u64) -> (usize, usize) {
    let replies: Vec<&str> = said
        .iter()
        .filter(|s| s.reply_to.as_deref() == Some(id) && s.text != QUEUE_NOTICE)
        .map(|s| s.text.as_str())
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
}

/// Everything the bot said replies to a soak message, in that message's
/// chat, and an answer answers that very message.
fn check_addressed(said: &[Said], posted: &HashMap<u64, Posted>) {
    let number_of: HashMap<&str, u64> = posted.iter().map(|(n, p)| (p.id.as_str(), *n)).collect();
    for s in said {
        let to = s.reply_to.as_deref();
        let n = to
            .and_then(|id| number_of.get(id))
            .unwrap_or_else(|| panic!("{:?} replies to no soak message ({to:?})", s.text));
        assert_eq!(
            s.chat, posted[n].chat,
            "{:?} went to chat {}",
            s.text, s.chat
        );
        // Whole, or cut short by a graceful stop: the number is the same.
        if let Some(rest) = s.text.strip_prefix("answer to #") {
            let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(number, n.to_string(), "{:?} replied to message {n}", s.text);
        }
    }
}

/// 0 transcribed twice, every tool call answered, nothing left in the
/// inbox, and the store is sound. Returns the number of tool calls.
fn check_store(db: &Path, total: u64) -> usize {
    {
        let conn = rusqlite::Connection::open(db).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
    let store = Store::open(db).unwrap();
    // Message number → how many times a transcript holds it.
    let mut transcribed: HashMap<u64, usize> = HashMap::new();
    let mut tool_calls = 0;
    for session in store.list_sessions(usize::MAX).unwrap() {
        let transcript = store.load_transcript(&session.id).unwrap();
        for (i, entry) in transcript.iter().enumerate() {
            match &entry.message {
                Message::User { content, .. } => {
                    *transcribed
                        .entry(number_in(content).unwrap_or_else(|| {
                            panic!(
                                "session {}: a user message that is no soak message: {content:?}",
                                session.id
                            )
                        }))
                        .or_default() += 1
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
            transcribed.get(&n),
            Some(&1),
            "message {n} must be in exactly one transcript, once"
        );
    }
    assert_eq!(transcribed.len() as u64, total, "{transcribed:?}");
    assert!(store.kv_scan(INBOX_KV_PREFIX).unwrap().is_empty());
    assert!(store.kv_scan(TURN_KV_PREFIX).unwrap().is_empty());
    tool_calls
}
