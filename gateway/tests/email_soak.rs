//! The kill -9 soak for Email (SPEC E3, X5): real `hermes gateway run`
//! processes reading one mailbox of the tests' Dovecot, killed with SIGKILL
//! (now and then stopped with SIGTERM) at random moments, on one
//! `$HERMES_HOME`. Each round mails new questions to the bot first. A last
//! gateway then runs until every question has its answer (or, for a turn a
//! kill cut short, the restart notice). Checked: **0 lost**, **0 answered
//! twice**, every answer in the thread of its question.
//!
//! 12 rounds by default; `HERMES_SOAK_ROUNDS` and `HERMES_SOAK_SEED` as in
//! the Telegram soak.
#![cfg(feature = "email")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_gateway::app::run_gateway;
use hermes_gateway::runner::{RESTART_NOTICE, STOPPED_NOTICE};
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_tests::dovecot::{self, MailUser};
use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

const CHILD_ENV: &str = "HERMES_EMAIL_SOAK_CHILD";
const PER_ROUND: u64 = 2;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64: reproducible from the printed seed.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn respond(request: &Value) -> Reply {
    let asked = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let n: String = asked
        .rsplit('#')
        .next()
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Reply::text(format!("answer to #{n}"))
}

/// Kills the child if the test fails while it runs.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_gateway(
    home: &std::path::Path,
    bot: &MailUser,
    alice: &MailUser,
    provider: &str,
) -> Gateway {
    let server = dovecot::server();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_9_soak_on_email_loses_nothing_and_answers_nothing_twice",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("HERMES_HOME", home)
        .env("EMAIL_ADDRESS", &bot.address)
        .env("EMAIL_PASSWORD", &bot.password)
        .env("EMAIL_IMAP_HOST", "127.0.0.1")
        .env("EMAIL_IMAP_PORT", server.imap_port.to_string())
        .env("EMAIL_IMAP_SECURITY", "none")
        .env("EMAIL_SMTP_HOST", "127.0.0.1")
        .env("EMAIL_SMTP_PORT", server.smtp_port.to_string())
        .env("EMAIL_SMTP_SECURITY", "none")
        .env("EMAIL_ALLOWED_USERS", &alice.address)
        .env("HERMES_BASE_URL", provider)
        .env("HERMES_MODEL", "soak-model")
        .env("HERMES_TOOLSETS", "todo")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Gateway(child)
}

/// Alice's mail from the bot: (the question it answers, its text).
fn replies(alice: &MailUser) -> Vec<(String, String)> {
    alice
        .mails()
        .iter()
        .filter_map(|raw| {
            let m = mail_parser::MessageParser::default().parse(raw.as_bytes())?;
            let to = match m.in_reply_to() {
                mail_parser::HeaderValue::Text(t) => t.to_string(),
                mail_parser::HeaderValue::TextList(l) => l.first()?.to_string(),
                _ => String::new(),
            };
            Some((to, m.body_text(0)?.trim().to_owned()))
        })
        .collect()
}

fn stop(gateway: &mut Gateway) {
    let pid = gateway.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    gateway.0.wait().unwrap();
}

#[test]
fn kill_9_soak_on_email_loses_nothing_and_answers_nothing_twice() {
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
    let rounds: u64 = std::env::var("HERMES_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("HERMES_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("email soak: {rounds} rounds, HERMES_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let server = dovecot::server();
    let (bot, alice) = (server.user("bot"), server.user("alice"));
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    // A first start takes the mailbox as it is: only mail after it counts.
    let mut first = spawn_gateway(home, &bot, &alice, &provider.base_url());
    std::thread::sleep(Duration::from_secs(4));
    stop(&mut first);

    let mut next = 1;
    for round in 0..rounds {
        for _ in 0..PER_ROUND {
            let message = format!(
                "From: {a}\nTo: {b}\nSubject: q{next}\nMessage-ID: <q{next}@alice>\n\n\
                 question #{next}\n",
                a = alice.address,
                b = bot.address,
            );
            server.send(&alice.address, &bot.address, &message);
            next += 1;
        }
        let mut gateway = spawn_gateway(home, &bot, &alice, &provider.base_url());
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        if round % 5 == 4 {
            stop(&mut gateway);
        } else {
            gateway.0.kill().unwrap(); // SIGKILL
            gateway.0.wait().unwrap();
        }
    }
    let total = next - 1;
    // Per question: (answers, restart notices); anything else fails.
    let outcome = |n: u64, all: &[(String, String)]| -> (usize, usize) {
        let mine: Vec<&String> = all
            .iter()
            .filter(|(to, _)| *to == format!("q{n}@alice"))
            .map(|(_, text)| text)
            .collect();
        let answers = mine
            .iter()
            .filter(|t| **t == &format!("answer to #{n}") || t.ends_with(STOPPED_NOTICE))
            .count();
        let notices = mine.iter().filter(|t| t.contains(RESTART_NOTICE)).count();
        assert_eq!(answers + notices, mine.len(), "question {n} got: {mine:?}");
        (answers, notices)
    };
    let mut last = spawn_gateway(home, &bot, &alice, &provider.base_url());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let all = replies(&alice);
        let missing: Vec<u64> = (1..=total)
            .filter(|&n| outcome(n, &all) == (0, 0))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "questions {missing:?} were never answered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Time for a duplicate to show, then a clean stop.
    std::thread::sleep(Duration::from_secs(3));
    stop(&mut last);
    let all = replies(&alice);
    let mut answered = 0;
    for n in 1..=total {
        let (answers, notices) = outcome(n, &all);
        assert!(answers <= 1, "question {n} was answered {answers} times");
        assert!(answers + notices >= 1, "question {n} was lost");
        answered += answers;
    }
    eprintln!(
        "email soak: {total} questions, {answered} answered, {} told to ask again, {} mails",
        total as usize - answered,
        all.len()
    );
    assert!(all.len() >= total as usize, "{all:?}");
}
