//! Background processes of chat sessions (issue 43 §4), through real
//! `hermes gateway run` children, the Telegram fake and a scripted
//! provider whose model starts and kills processes with the real tools:
//! the completion notice reaches the chat once, after the turn; a gateway
//! killed with SIGKILL announces the lost process once after its restart;
//! flooding output is capped on disk; a never-ending command is killed at
//! the wall-clock limit; another session's process cannot be killed;
//! `[agent] background_max` bounds the processes one session runs at once.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hermes_runtime::tools::{SandboxMode, SandboxStatus};
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};

mod send_files;

use super::telegram_support::{Fake, TOKEN};
use super::{CHILD_ENV, Gateway, TEST_ENV, child_gateway, log_of};

const ALICE: i64 = 1000;
const BOB: i64 = 1001;

/// The model: `BG: cmd` starts `cmd` in the background with a notice,
/// `KILL: id` kills a process; a tool result is echoed back as the answer.
fn provider() -> FakeProvider {
    FakeProvider::start_with(
        Vec::new(),
        None,
        Some(std::sync::Arc::new(|request: &Value| {
            let messages = request["messages"].as_array().cloned().unwrap_or_default();
            let Some(last) = messages.last() else {
                return Reply::text("ok");
            };
            if last["role"] == "tool" {
                let content = last["content"].as_str().unwrap_or_default();
                return Reply::text(format!("tool said: {content}"));
            }
            let user = last["content"].as_str().unwrap_or_default();
            let after = |marker: &str| {
                user.find(marker).map(|i| {
                    user[i + marker.len()..]
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_owned()
                })
            };
            if let Some(cmd) = after("BG: ") {
                let args = json!({"command": cmd, "background": true, "notify_on_complete": true});
                return Reply::tool("call_bg", "terminal", &args.to_string());
            }
            if let Some(rest) = after("SEND: ") {
                let (target, message) = rest.split_once(" | ").unwrap_or((&rest, ""));
                let args = json!({"action": "send", "target": target, "message": message});
                return Reply::tool("call_send", "send_message", &args.to_string());
            }
            if let Some(id) = after("KILL: ") {
                let args = json!({"action": "kill", "session_id": id});
                return Reply::tool("call_kill", "process", &args.to_string());
            }
            Reply::text("ok")
        })),
    )
    .unwrap()
}

fn spawn(test: &str, home: &Path, telegram: &str, provider: &FakeProvider, agent: &str) -> Gateway {
    std::fs::create_dir_all(home).unwrap();
    let sandbox = if SandboxStatus::probe(SandboxMode::On).refuses_commands() {
        "sandbox = \"off\"\n"
    } else {
        ""
    };
    std::fs::write(
        home.join("config.toml"),
        format!("[agent]\n{sandbox}approvals = \"off\"\n{agent}"),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("gateway.log"))
        .unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    // Test names are relative to this test binary's former root, now the
    // `cron_process` module of the one gateway test binary.
    let exact = format!("cron_process::{test}");
    cmd.args(["--exact", &exact, "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env(TEST_ENV, test)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HERMES_HOME", home)
        .env("GATEWAY_LEASE_TTL_MS", "1500")
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_URL", telegram)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", format!("{ALICE},{BOB}"))
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_MODEL", "bg-model")
        .env("HERMES_TOOLSETS", "terminal,send_message")
        .env("GATEWAY_STREAM_REPLIES", "false")
        .env(
            "RUST_LOG",
            "hermes_gateway=info,hermes_runner=info,hermes_runtime=warn",
        )
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(log);
    Gateway {
        child: cmd.spawn().unwrap(),
    }
}

fn say(fake: &Fake, n: i64, user: i64, text: &str) {
    fake.push_update(json!({"update_id": n, "message": {
        "message_id": n, "date": 0, "text": text,
        "from": {"id": user, "is_bot": false, "first_name": "U"},
        "chat": {"id": user, "type": "private"}}}));
}

/// Texts sent to `chat`, in order.
fn sent_to(fake: &Fake, chat: i64) -> Vec<String> {
    fake.requests("sendMessage")
        .into_iter()
        .filter(|r| r.body["chat_id"].to_string().trim_matches('"') == chat.to_string())
        .map(|r| r.body["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn wait_for(what: &str, home: &Path, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            log_of(home)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The process id in a text (`bg` and 12 hex digits).
fn process_id(text: &str) -> String {
    let i = text.find("process bg").expect("a process id") + "process ".len();
    text[i..i + 14].to_owned()
}

/// Whether a file named `name` is anywhere under `dir`.
fn found(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let path = e.path();
            path.file_name().is_some_and(|n| n == name) || (path.is_dir() && found(&path, name))
        })
}

fn count(texts: &[String], needle: &str) -> usize {
    texts.iter().filter(|t| t.contains(needle)).count()
}

/// Asks Alice's next turn something; checks that the provider's request
/// for it holds the note `needle` once — when `fresh`, as a system note
/// just before the question and after the last turn's answer — and that
/// every tool call is followed by its result.
fn next_turn_knows(
    fake: &Fake,
    provider: &FakeProvider,
    home: &Path,
    n: i64,
    needle: &str,
    fresh: bool,
) {
    let before = sent_to(fake, ALICE).len();
    let question = format!("question {n}");
    say(fake, n, ALICE, &question);
    wait_for("the next answer", home, 30, || {
        sent_to(fake, ALICE).len() > before
    });
    let request = provider
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.to_string().contains(&question))
        .expect("a request for the question");
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let text = |m: &Value| m["content"].as_str().unwrap_or_default().to_owned();
    let notes: Vec<usize> = (0..messages.len())
        .filter(|&i| text(&messages[i]).contains(needle))
        .collect();
    assert_eq!(notes.len(), 1, "the note once: {messages:#?}");
    let at = notes[0];
    assert_eq!(messages[at]["role"], "user", "{messages:#?}");
    if !fresh {
        assert_eq!(
            text(&messages[messages.len() - 1]),
            question,
            "{messages:#?}"
        );
    }
    assert!(
        text(&messages[at]).starts_with("[System note, not from the user: "),
        "{messages:#?}"
    );
    if fresh {
        assert_eq!(
            text(&messages[at + 1]),
            question,
            "just before the question: {messages:#?}"
        );
        assert_eq!(
            messages[at - 1]["role"],
            "assistant",
            "after the last turn's answer: {messages:#?}"
        );
    }
    for (i, m) in messages.iter().enumerate() {
        if let Some(calls) = m["tool_calls"].as_array() {
            for (k, call) in calls.iter().enumerate() {
                let result = &messages[i + 1 + k];
                assert!(
                    result["role"] == "tool" && result["tool_call_id"] == call["id"],
                    "a tool call followed by its result: {messages:#?}"
                );
            }
        }
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_background_command_is_announced_once_after_the_turn_and_only_its_session_kills_it() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let rt = runtime();
    let fake = rt.block_on(Fake::start(false));
    let provider = provider();
    let test = "background::a_background_command_is_announced_once_after_the_turn_and_only_its_session_kills_it";
    let _gateway = spawn(test, &home, &fake.base, &provider, "");
    say(&fake, 1, ALICE, "BG: sleep 2; touch ran.txt; echo done");
    wait_for("the turn's answer", &home, 60, || {
        count(&sent_to(&fake, ALICE), "Started background process") == 1
    });
    let answer = sent_to(&fake, ALICE);
    assert_eq!(
        answer.len(),
        1,
        "the turn ended with its answer: {answer:#?}"
    );
    let id = process_id(&answer[0]);
    // Bob's model tries to kill Alice's process: refused, it runs on.
    say(&fake, 2, BOB, &format!("KILL: {id}"));
    wait_for("Bob's answer", &home, 30, || {
        !sent_to(&fake, BOB).is_empty()
    });
    let bob = sent_to(&fake, BOB);
    assert!(
        bob[0].contains("belongs to another session"),
        "refused with a clear message: {bob:#?}"
    );
    wait_for("the completion notice", &home, 30, || {
        count(&sent_to(&fake, ALICE), "finished") >= 1
    });
    // Time for a second notice, if there were to be one.
    std::thread::sleep(Duration::from_secs(3));
    let alice = sent_to(&fake, ALICE);
    assert_eq!(alice.len(), 2, "the answer, then one notice: {alice:#?}");
    assert!(
        alice[1].contains(&format!("Background process {id}"))
            && alice[1].contains("finished: exit code 0")
            && alice[1].ends_with("done"),
        "status and last output, not killed by Bob: {alice:#?}"
    );
    assert_eq!(
        sent_to(&fake, BOB).len(),
        1,
        "nothing of Alice's reaches Bob"
    );
    // The agent knows it too: the next turn's request holds the notice
    // once, and the turn after that still once (it is in the transcript,
    // not added again).
    next_turn_knows(&fake, &provider, &home, 3, "finished: exit code 0", true);
    next_turn_knows(&fake, &provider, &home, 4, "finished: exit code 0", false);
}

#[test]
fn a_process_lost_to_a_sigkill_of_the_gateway_is_announced_once_after_restart() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let rt = runtime();
    let fake = rt.block_on(Fake::start(false));
    let provider = provider();
    let test =
        "background::a_process_lost_to_a_sigkill_of_the_gateway_is_announced_once_after_restart";
    let mut gateway = spawn(test, &home, &fake.base, &provider, "");
    say(&fake, 1, ALICE, "BG: sleep 4; echo alive > survived.txt");
    wait_for("the turn's answer", &home, 60, || {
        count(&sent_to(&fake, ALICE), "Started background process") == 1
    });
    let id = process_id(&sent_to(&fake, ALICE)[0]);
    // The turn is recorded as answered (the inbox) just after the send.
    std::thread::sleep(Duration::from_millis(1500));
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    let killed_at = Instant::now();
    let _again = spawn(test, &home, &fake.base, &provider, "");
    wait_for("the lost notice", &home, 60, || {
        count(&sent_to(&fake, ALICE), "was lost") >= 1
    });
    // Past the command's own end, and time for a second notice.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(killed_at.elapsed()));
    std::thread::sleep(Duration::from_secs(2));
    let alice = sent_to(&fake, ALICE);
    assert_eq!(alice.len(), 2, "the answer, then one notice: {alice:#?}");
    assert!(
        alice[1].contains(&format!("Background process {id}")) && alice[1].contains("was lost"),
        "{alice:#?}"
    );
    assert!(
        !found(dir.path(), "survived.txt"),
        "the process ended with the gateway"
    );
    next_turn_knows(&fake, &provider, &home, 2, "was lost", true);
    next_turn_knows(&fake, &provider, &home, 3, "was lost", false);
}

#[test]
fn flooding_output_is_capped_on_disk_and_a_never_ending_command_is_killed_at_the_limit() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let rt = runtime();
    let fake = rt.block_on(Fake::start(false));
    let provider = provider();
    let test = "background::flooding_output_is_capped_on_disk_and_a_never_ending_command_is_killed_at_the_limit";
    let limits = "background_output_cap = 10000\nbackground_timeout = 3\n";
    let _gateway = spawn(test, &home, &fake.base, &provider, limits);
    say(&fake, 1, ALICE, "BG: yes flood | head -c 5000000; echo end");
    wait_for("the flood's notice", &home, 60, || {
        count(&sent_to(&fake, ALICE), "finished") >= 1
    });
    let alice = sent_to(&fake, ALICE);
    let id = process_id(&alice[0]);
    let notice = alice.iter().find(|t| t.contains("finished")).unwrap();
    assert!(
        notice.contains("exit code 0") && notice.ends_with("end"),
        "the last lines come from past the cap: {notice}"
    );
    let log = std::fs::read_to_string(home.join("background").join(format!("{id}.log"))).unwrap();
    assert!(log.len() < 10_200, "capped on disk: {} bytes", log.len());
    assert!(
        log.contains("output capped at 10000 bytes on disk: 4990004 more bytes were dropped"),
        "{}",
        &log[log.len().saturating_sub(200)..]
    );

    say(&fake, 2, BOB, "BG: sleep 1000");
    wait_for("the limit's notice", &home, 30, || {
        count(&sent_to(&fake, BOB), "finished") >= 1
    });
    let bob = sent_to(&fake, BOB);
    assert!(
        bob[1].contains("killed at the wall-clock limit of 3 s"),
        "{bob:#?}"
    );
}

/// `[agent] background_max` in the gateway's config.toml bounds the
/// processes one session runs at once; another session has its own count.
#[test]
fn the_per_session_process_limit_comes_from_the_gateway_config() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let rt = runtime();
    let fake = rt.block_on(Fake::start(false));
    let provider = provider();
    let test = "background::the_per_session_process_limit_comes_from_the_gateway_config";
    let limits = "background_max = 1\nbackground_timeout = 30\n";
    let _gateway = spawn(test, &home, &fake.base, &provider, limits);
    say(&fake, 1, ALICE, "BG: sleep 1000");
    wait_for("the first start", &home, 30, || {
        count(&sent_to(&fake, ALICE), "Started background process") >= 1
    });
    say(&fake, 2, ALICE, "BG: sleep 999");
    wait_for("the refusal", &home, 30, || {
        sent_to(&fake, ALICE).len() >= 2
    });
    let alice = sent_to(&fake, ALICE);
    assert!(
        alice[1].contains("already runs 1 background processes (the limit is 1)"),
        "{alice:#?}"
    );
    // Bob's session is not Alice's: his first process starts.
    say(&fake, 3, BOB, "BG: sleep 998");
    wait_for("bob's start", &home, 30, || !sent_to(&fake, BOB).is_empty());
    let bob = sent_to(&fake, BOB);
    assert!(bob[0].contains("Started background process"), "{bob:#?}");
    // Killing Alice's process frees her slot.
    say(&fake, 4, ALICE, &format!("KILL: {}", process_id(&alice[0])));
    wait_for("the kill", &home, 30, || sent_to(&fake, ALICE).len() >= 3);
    say(&fake, 5, ALICE, "BG: sleep 997");
    wait_for("the next start", &home, 30, || {
        count(&sent_to(&fake, ALICE), "Started background process") >= 2
    });
    let alice = sent_to(&fake, ALICE);
    assert_eq!(count(&alice, "already runs"), 1, "{alice:#?}");
}
