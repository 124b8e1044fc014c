//! The real `hermes` binary against a scripted loopback provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use std::sync::Arc;

use hermes_core::context::summary::SUMMARIZER_PROMPT;
use hermes_tests::{Advertise, FakeProvider, Overflow, Reply, Responder, Window};
use serde_json::Value;

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");

/// A hermetic environment: its own HERMES_HOME and HOME, no inherited keys.
struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, base_url: &str) -> Command {
        let mut c = Command::new(HERMES);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERMES_HOME", self.home.path())
            .env("HERMES_BASE_URL", base_url)
            .env("HERMES_MODEL", "fake-model")
            .current_dir(self.work.path());
        c
    }

    fn run(&self, base_url: &str, args: &[&str]) -> Output {
        self.cmd(base_url).args(args).output().unwrap()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn roles(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn version_prints_and_exits_zero() {
    let o = Command::new(HERMES).arg("--version").output().unwrap();
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("hermes "), "{}", stdout(&o));
}

#[test]
fn oneshot_runs_tool_turns_and_prints_only_the_answer() {
    let env = Env::new();
    std::fs::write(
        env.work.path().join("notes.txt"),
        "the secret word is mango\n",
    )
    .unwrap();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "read_file", r#"{"path":"notes.txt"}"#),
        Reply::tool(
            "c2",
            "todo",
            r#"{"action":"add","items":["eat the mango"]}"#,
        ),
        Reply::text("The word is mango."),
    ])
    .unwrap();
    let o = env.run(
        &provider.base_url(),
        &["chat", "-q", "What does notes.txt say?"],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "The word is mango.\n");
    assert!(
        stderr(&o).contains("read_file"),
        "tool activity on stderr: {}",
        stderr(&o)
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        roles(&reqs[2]),
        ["system", "user", "assistant", "tool", "assistant", "tool"]
    );
    assert!(
        reqs[1]["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("mango")
    );

    // --quiet silences stderr; -z is the short form.
    let provider = FakeProvider::start(vec![Reply::text("quiet answer")]).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "hi", "--quiet"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "quiet answer\n");
    assert_eq!(stderr(&o), "");
}

#[test]
fn continue_and_resume_carry_history_and_the_stored_system_prompt() {
    let env = Env::new();
    std::fs::write(env.home.path().join("SOUL.md"), "You are a pirate.").unwrap();
    let provider = FakeProvider::start(vec![
        Reply::text("Arr, first."),
        Reply::text("Arr, second."),
        Reply::text("Arr, third."),
    ])
    .unwrap();
    let url = provider.base_url();
    let o = env.run(&url, &["chat", "-q", "first question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The persona changes on disk; a resumed session must keep its prompt.
    std::fs::write(env.home.path().join("SOUL.md"), "You are a librarian.").unwrap();
    let o = env.run(&url, &["chat", "--continue", "-q", "second question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Arr, second.\n");

    let list = env.run(&url, &["sessions", "list"]);
    assert_eq!(list.status.code(), Some(0));
    let id = stdout(&list).split_whitespace().next().unwrap().to_owned();
    let o = env.run(&url, &["chat", "--resume", &id, "-q", "third question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert!(system_prompt(&reqs[0]).contains("pirate"));
    assert_eq!(
        system_prompt(&reqs[1]),
        system_prompt(&reqs[0]),
        "byte-identical prompt on --continue"
    );
    assert_eq!(
        system_prompt(&reqs[2]),
        system_prompt(&reqs[0]),
        "byte-identical prompt on --resume"
    );
    assert_eq!(
        roles(&reqs[2]),
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(reqs[2]["messages"][1]["content"], "first question");
    assert_eq!(reqs[2]["messages"][4]["content"], "Arr, second.");

    // A new session assembles the new persona.
    let provider2 = FakeProvider::start(vec![Reply::text("Shh.")]).unwrap();
    let o = env.run(&provider2.base_url(), &["chat", "-q", "new"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(system_prompt(&provider2.requests()[0]).contains("librarian"));
}

#[test]
fn unreachable_provider_exits_1_naming_the_url() {
    let env = Env::new();
    // Bind and drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let o = env.run(&url, &["chat", "-q", "hello"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(
        err.contains("--base-url"),
        "says how to configure another: {err}"
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn provider_errors_exit_1_with_the_providers_message() {
    let env = Env::new();
    let provider =
        FakeProvider::start(vec![Reply::Status(401, "Invalid API key provided".into())]).unwrap();
    let o = env.run(&provider.base_url(), &["chat", "-q", "hello"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("Invalid API key provided"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
    assert_eq!(provider.requests().len(), 1, "401 is not retried");
}

#[test]
fn usage_and_configuration_errors_exit_2() {
    let env = Env::new();
    let o = env.run("http://127.0.0.1:9/v1", &["chat", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));

    let o = env.run("http://127.0.0.1:9/v1", &["chat", "-q", "  "]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    let o = env.run("not-a-url", &["chat", "-q", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("base_url"), "{}", stderr(&o));

    std::fs::write(
        env.home.path().join("config.toml"),
        "[agent]\nmax_iterations = \"many\"\n",
    )
    .unwrap();
    let o = env.run("http://127.0.0.1:9/v1", &["chat", "-q", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("max_iterations"), "{}", stderr(&o));
    std::fs::remove_file(env.home.path().join("config.toml")).unwrap();

    let o = env.run(
        "http://127.0.0.1:9/v1",
        &["chat", "--resume", "nope", "-q", "hi"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("sessions list"), "{}", stderr(&o));

    let o = env.run(
        "http://127.0.0.1:9/v1",
        &["chat", "--toolsets", "file,bogus", "-q", "hi"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bogus"), "{}", stderr(&o));
}

#[test]
fn budget_exhaustion_is_reported_with_exit_1() {
    let env = Env::new();
    let provider = FakeProvider::start(
        (0..5)
            .map(|i| Reply::tool(&format!("c{i}"), "todo", r#"{"action":"list"}"#))
            .collect(),
    )
    .unwrap();
    let o = env.run(
        &provider.base_url(),
        &["chat", "-q", "loop", "--max-iterations", "2"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("maximum iteration count (2"),
        "{}",
        stderr(&o)
    );
    assert_eq!(provider.requests().len(), 2);
}

#[test]
fn config_show_masks_secrets_and_doctor_reports() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_API_KEY", "sk-test-supersecret-9876")
        .args(["config", "show"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(!out.contains("supersecret"), "{out}");
    assert!(out.contains("…9876"), "{out}");
    assert!(out.contains("environment $HERMES_BASE_URL"), "{out}");

    let o = env.run(&provider.base_url(), &["doctor"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("provider reachable"), "{}", stdout(&o));

    let o = env.run("http://127.0.0.1:9/v1", &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("✗ provider reachable"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn database_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text("ok")]).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(Path::new(env.home.path()).join("state.db"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// The model of the context tests: a summary for the summariser, `answer N`
/// for `turn N`.
fn turn_responder() -> Responder {
    Arc::new(|request: &Value| {
        if system_prompt(request) == SUMMARIZER_PROMPT {
            return Reply::text("Goal: numbered turns, each answered so far.");
        }
        let last = request["messages"].as_array().unwrap().last().unwrap();
        let text = last["content"].as_str().unwrap_or("");
        // The last `turn N` (a summary may stand before it).
        let n: String = text
            .rfind("turn ")
            .map(|at| {
                text[at + 5..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect()
            })
            .unwrap_or_else(|| "?".into());
        Reply::text(format!("answer {n}: {}", "sure ".repeat(80)))
    })
}

fn turn(n: usize) -> String {
    format!(
        "turn {n}: marker{n}x {}",
        "please remember this ".repeat(40)
    )
}

/// A provider whose window holds the system prompt and about four turns.
const SMALL_WINDOW: u64 = 6_000;

fn small_window_provider() -> FakeProvider {
    FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: SMALL_WINDOW,
            overflow: Overflow::OpenAi,
            advertise: Advertise::ModelsContextLength,
        }),
        Some(turn_responder()),
    )
    .unwrap()
}

#[test]
fn continue_through_a_small_window_answers_every_turn_and_keeps_the_originals() {
    let env = Env::new();
    let provider = small_window_provider();
    let url = provider.base_url();
    for n in 1..=12 {
        let text = turn(n);
        let mut args = vec!["--toolsets", "todo"];
        if n == 1 {
            args.extend(["-z", text.as_str()]);
        } else {
            args.extend(["chat", "--continue", "-q", text.as_str()]);
        }
        let o = env.run(&url, &args);
        assert_eq!(o.status.code(), Some(0), "turn {n}: {}", stderr(&o));
        assert!(
            stdout(&o).starts_with(&format!("answer {n}:")),
            "turn {n}: {}",
            stdout(&o)
        );
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert!(provider.refused().is_empty(), "{:?}", provider.refused());
    let requests = provider.requests();
    let conversation: Vec<&Value> = requests
        .iter()
        .filter(|r| system_prompt(r) != SUMMARIZER_PROMPT)
        .collect();
    assert_eq!(conversation.len(), 12);
    let first = system_prompt(conversation[0]);
    assert!(
        conversation.iter().all(|r| system_prompt(r) == first),
        "the system prompt never changes"
    );
    assert!(
        conversation.len() < requests.len(),
        "compaction summaries were requested"
    );
    // The twelfth request is the compacted view: the head (turn 1), a
    // summary in place of the early turns, then recent turns.
    let last = conversation[11].to_string();
    assert!(
        last.contains("marker1x") && last.contains("[Context summary]"),
        "{last}"
    );
    assert!(!last.contains("marker2x"), "turn 2 was summarised: {last}");

    // Early turns stay findable and exportable.
    let o = env.run(&url, &["sessions", "search", "marker1x"]);
    assert_eq!(o.status.code(), Some(0));
    let hit = stdout(&o);
    assert!(hit.contains("#0 user"), "{hit}");
    let id = hit.split_whitespace().next().unwrap().to_owned();
    let o = env.run(&url, &["sessions", "export", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let users = lines
        .iter()
        .filter(|l| l["type"] == "message" && l["role"] == "user")
        .count();
    assert_eq!(users, 12, "every original user message is exported");
    assert!(lines.iter().any(|l| l["type"] == "compaction"));

    // doctor names the window and where it came from.
    let o = env.run(&url, &["doctor"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("context window {SMALL_WINDOW} tokens (from provider metadata: GET {url}/models context_length)")),
        "{out}"
    );
}

#[test]
fn a_message_bigger_than_the_window_is_refused_clearly_and_the_next_turn_works() {
    let env = Env::new();
    let provider = small_window_provider();
    let url = provider.base_url();
    let o = env.run(&url, &["--toolsets", "todo", "-z", &turn(1)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let huge = format!("turn 2: {}", "far too much text ".repeat(2_000));
    let o = env.run(
        &url,
        &["--toolsets", "todo", "chat", "--continue", "-q", &huge],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("does not fit in the model's context window (6000 tokens)"),
        "{err}"
    );
    let o = env.run(
        &url,
        &["--toolsets", "todo", "chat", "--continue", "-q", &turn(3)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("answer 3:"), "{}", stdout(&o));
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

mod interactive {
    use super::*;
    use rexpect::session::spawn_command;

    fn spawn(env: &Env, url: &str) -> rexpect::session::PtySession {
        let mut cmd = env.cmd(url);
        cmd.env("TERM", "dumb").arg("chat");
        spawn_command(cmd, Some(30_000)).unwrap()
    }

    #[test]
    fn repl_streams_answers_runs_commands_and_ctrl_c_interrupts() {
        let env = Env::new();
        let provider = FakeProvider::start(vec![
            Reply::text("Hello from the fake provider."),
            Reply::SlowText {
                pieces: (0..40).map(|i| format!("chunk{i} ")).collect(),
                delay: Duration::from_millis(150),
            },
            Reply::text("After the interrupt."),
        ])
        .unwrap();
        let mut p = spawn(&env, &provider.base_url());
        p.exp_string("/help lists commands").unwrap();
        p.send_line("hello").unwrap();
        p.exp_string("Hello from the fake provider.").unwrap();

        p.send_line("tell me a long story").unwrap();
        p.exp_string("chunk2 ").unwrap();
        p.send_control('c').unwrap();
        p.exp_string("interrupting").unwrap();
        p.send_line("/status").unwrap();
        p.exp_string("session: 2").unwrap();
        p.send_line("and now?").unwrap();
        p.exp_string("After the interrupt.").unwrap();
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();

        let reqs = provider.requests();
        assert_eq!(reqs.len(), 3);
        // The interrupted partial answer is in the history the next turn sends.
        let third = &reqs[2]["messages"];
        let partial = third[4]["content"].as_str().unwrap();
        assert_eq!(third[4]["role"], "assistant");
        assert!(partial.starts_with("chunk0 chunk1 chunk2"), "{partial}");
        assert!(
            !partial.contains("chunk39"),
            "the stream was cut: {partial}"
        );
        assert_eq!(third[5]["content"], "and now?");
    }

    #[test]
    fn repl_undo_retry_and_new() {
        let env = Env::new();
        let provider = FakeProvider::start(vec![
            Reply::text("one"),
            Reply::text("two"),
            Reply::text("two again"),
            Reply::text("fresh"),
        ])
        .unwrap();
        let mut p = spawn(&env, &provider.base_url());
        p.exp_string("/help").unwrap();
        p.send_line("first").unwrap();
        p.exp_string("one").unwrap();
        p.send_line("second").unwrap();
        p.exp_string("two").unwrap();
        p.send_line("/retry").unwrap();
        p.exp_string("two again").unwrap();
        p.send_line("/new").unwrap();
        p.exp_string("new session").unwrap();
        p.send_line("third").unwrap();
        p.exp_string("fresh").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();

        let reqs = provider.requests();
        assert_eq!(
            roles(&reqs[2]),
            ["system", "user", "assistant", "user"],
            "retry replaced the turn"
        );
        assert_eq!(reqs[2]["messages"][3]["content"], "second");
        assert_eq!(roles(&reqs[3]), ["system", "user"], "/new starts empty");
    }

    #[test]
    fn compress_and_status_in_the_repl() {
        let env = Env::new();
        let provider = small_window_provider();
        let url = provider.base_url();
        for n in 1..=3 {
            let text = turn(n);
            let args: Vec<&str> = if n == 1 {
                vec!["--toolsets", "todo", "-z", &text]
            } else {
                vec!["--toolsets", "todo", "chat", "--continue", "-q", &text]
            };
            assert_eq!(env.run(&url, &args).status.code(), Some(0));
        }
        let mut cmd = env.cmd(&url);
        cmd.env("TERM", "dumb")
            .args(["--toolsets", "todo", "chat", "--continue"]);
        let mut p = spawn_command(cmd, Some(30_000)).unwrap();
        p.exp_string("Resumed session").unwrap();
        p.send_line("/status").unwrap();
        let (_, status) = p
            .exp_regex(r"context: \d+ / 6000 tokens \(\d+ %\)")
            .unwrap();
        assert!(status.contains("6000"), "{status}");
        p.exp_string("window from: provider metadata").unwrap();
        p.send_line("/compress the marker words").unwrap();
        p.exp_regex(r"Compressed: \d+ older messages became one summary, \d+ kept as they were; context ~\d+ ")
            .unwrap();
        p.exp_string("tokens of 6000").unwrap();
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();
        let summary = provider
            .requests()
            .into_iter()
            .rev()
            .find(|r| system_prompt(r) == SUMMARIZER_PROMPT)
            .unwrap();
        assert!(
            summary["messages"][1]["content"]
                .as_str()
                .unwrap()
                .contains("focus on: the marker words")
        );
        // The next turn starts from the compacted view.
        let o = env.run(
            &url,
            &["--toolsets", "todo", "chat", "--continue", "-q", &turn(4)],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let last = provider.requests().pop().unwrap();
        assert!(
            last["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("[Context summary]"))),
            "{last}"
        );
    }

    #[test]
    fn a_resumed_session_keeps_the_model_it_switched_to() {
        let env = Env::new();
        let provider =
            FakeProvider::start(vec![Reply::text("as other"), Reply::text("still other")]).unwrap();
        let mut p = spawn(&env, &provider.base_url());
        p.exp_string("/help").unwrap();
        p.send_line("/model other-model").unwrap();
        p.exp_string("Model set to other-model").unwrap();
        p.send_line("hello").unwrap();
        p.exp_string("as other").unwrap();
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();

        let o = env
            .cmd(&provider.base_url())
            .env_remove("HERMES_MODEL")
            .args(["chat", "--continue", "-q", "again"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let reqs = provider.requests();
        assert_eq!(reqs[0]["model"], "other-model");
        assert_eq!(
            reqs[1]["model"], "other-model",
            "resumed on the session's model"
        );
    }
}
