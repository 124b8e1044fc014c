//! One-shot runs (`hermes -z`): the answer on stdout, progress on stderr,
//! piped stdin, `--json`, exit codes and the hints that come with failures.

use std::path::Path;
use std::process::Command;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::support::*;

#[test]
fn version_prints_and_exits_zero() {
    let o = Command::new(HERMES).arg("--version").output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        stdout(&o),
        format!("hermes {}\n", env!("CARGO_PKG_VERSION"))
    );
    // `-V` is the same answer (both are answered before clap runs).
    let short = Command::new(HERMES).arg("-V").output().unwrap();
    assert_eq!(stdout(&short), stdout(&o));
}

#[test]
fn a_whole_conversation_uses_one_connection_to_the_provider() {
    // Issue 18: the client keeps its connection alive across loop
    // iterations (and the context-window probes share it too).
    let env = Env::new();
    // Eight different calls: the same call eight times would be stopped by
    // the repeat guard (SPEC Y6).
    let mut script: Vec<Reply> = (0..8)
        .map(|i| {
            let args = format!(r#"{{"action":"add","items":["task {i}"]}}"#);
            Reply::tool(&format!("c{i}"), "todo", &args)
        })
        .collect();
    script.push(Reply::text("done"));
    let provider = FakeProvider::start(script).unwrap();
    // Only `todo`: the default toolsets' specs would push nine requests
    // past the default 8k window's compaction threshold.
    let o = env.run(
        &provider.base_url(),
        &["-z", "add 8 todos", "--toolsets", "todo"],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "done\n");
    assert_eq!(provider.requests().len(), 9);
    assert_eq!(
        provider.connections(),
        1,
        "one connection for nine model calls"
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
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
        Reply::tool("c2", "read_file", r#"{"path":"missing.txt"}"#),
        Reply::text("The word is **mango**."),
    ])
    .unwrap();
    let o = env.run(
        &provider.base_url(),
        &["chat", "-q", "What does notes.txt say?"],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    // Not a terminal: the markdown as written, nothing added.
    assert_eq!(stdout(&o), "The word is **mango**.\n");
    // Tool activity: ✓/✗, the telling argument, a duration, a short result.
    let err = stderr(&o);
    let ok_line = err
        .lines()
        .find(|l| l.contains("✓ read_file"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        ok_line.contains("notes.txt") && ok_line.contains(" ms"),
        "{ok_line}"
    );
    let bad_line = err
        .lines()
        .find(|l| l.contains("✗ read_file"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(bad_line.contains("missing.txt"), "{bad_line}");
    assert!(
        !err.contains('\x1b'),
        "no colour when stderr is not a terminal: {err:?}"
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
fn piped_stdin_follows_the_prompt_and_dash_reads_the_prompt_from_stdin() {
    let env = Env::new();
    let provider =
        FakeProvider::start(vec![Reply::text("summary"), Reply::text("answer")]).unwrap();
    let url = provider.base_url();
    let o = env.run_with_stdin(&url, &["-z", "summarise"], "line one\nline two\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = env.run_with_stdin(&url, &["-z", "-"], "the whole question\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let reqs = provider.requests();
    assert_eq!(
        reqs[0]["messages"][1]["content"],
        "summarise\n\nline one\nline two\n"
    );
    assert_eq!(reqs[1]["messages"][1]["content"], "the whole question\n");

    // `-z -` with nothing piped is a usage error, not a prompt of "-".
    let o = env.run(&url, &["-z", "-"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("stdin"), "{}", stderr(&o));
    assert_eq!(provider.requests().len(), 2);
}

#[test]
fn json_output_has_answer_usage_session_and_stop_reason() {
    let env = Env::new();
    let provider =
        FakeProvider::start(vec![Reply::text("forty-two"), Reply::text("again")]).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "the answer?", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["answer"], "forty-two");
    assert_eq!(doc["stop_reason"], "completed");
    assert_eq!(doc["model"], "fake-model");
    // The fake counts the request's tokens and answers with 7.
    let prompt = doc["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0, "{doc}");
    assert_eq!(doc["usage"]["completion_tokens"], 7);
    assert_eq!(doc["usage"]["total_tokens"], prompt + 7);
    let id = doc["session_id"].as_str().unwrap();
    assert_eq!(env.session_ids(), [id]);

    // No usage reported: null, not zeros.
    provider.set_usage(false);
    let o = env.run(&provider.base_url(), &["-z", "again?", "--json"]);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(doc["usage"].is_null(), "{doc}");

    // A failure is still one JSON object, with exit 1.
    let failing = FakeProvider::start(vec![Reply::Status(500, "boom".into()); 5]).unwrap();
    let o = env.run(&failing.base_url(), &["-z", "x", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["stop_reason"], "model_error");
    assert!(doc["error"].as_str().unwrap().contains("500"), "{doc}");
}

#[test]
fn unreachable_provider_exits_1_naming_the_url() {
    let env = Env::new();
    let url = dead_url();
    let o = env.run(&url, &["chat", "-q", "hello"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(url.trim_end_matches("/v1")), "{err}");
    assert!(
        err.contains("--base-url"),
        "says how to configure another: {err}"
    );
    assert!(
        !err.contains("config.toml"),
        "no pointer to a config.toml that does not exist: {err}"
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn first_run_without_a_reachable_provider_points_to_setup() {
    let env = Env::new();
    // Nothing configured: the default local address, where nothing listens here.
    let o = env.bare().args(["-z", "hello"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("hermes setup"), "{err}");
    assert!(!err.contains("config.toml"), "{err}");
    assert!(
        env.session_ids().is_empty(),
        "a failed first run leaves no empty session"
    );
}

#[test]
fn a_401_without_a_key_says_no_key_is_set() {
    let env = Env::new();
    let provider =
        FakeProvider::start(vec![Reply::Status(401, "Invalid API key provided".into())]).unwrap();
    let o = env.run(&provider.base_url(), &["chat", "-q", "hello"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("Invalid API key provided") && err.contains("401"),
        "{err}"
    );
    assert!(
        err.contains("none is set") && err.contains("HERMES_API_KEY"),
        "{err}"
    );
    assert!(
        !err.contains("check the API key"),
        "there is none to check: {err}"
    );
    assert_eq!(provider.requests().len(), 1, "401 is not retried");

    // With a key, the hint says where the refused key came from.
    let provider =
        FakeProvider::start(vec![Reply::Status(401, "Invalid API key provided".into())]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_API_KEY", "sk-wrong-123456789")
        .args(["-z", "hello"])
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("HERMES_API_KEY was refused"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn https_against_a_plain_http_server_says_so_without_retrying() {
    let env = Env::new();
    // A plain HTTP server answers a TLS hello with an HTTP error, as any does.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/v1", server.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in server.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let o = env.run(&url, &["-z", "hello"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("http://"), "suggests plain http: {err}");
    assert!(!err.contains("InvalidContentType"), "{err}");
    assert!(
        !err.contains("retrying") && !err.contains("attempts"),
        "not retried: {err}"
    );
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
    // The scripted provider calls a tool even on the last call, made with
    // `tool_choice: "none"`: it is asked once more without the tools list
    // (issue 38).
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1]["tool_choice"], "none");
    assert!(requests[2].get("tools").is_none());
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

#[test]
fn chat_reads_piped_lines_as_messages_and_commands() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text("first"), Reply::text("second")]).unwrap();
    let o = env.run_with_stdin(&provider.base_url(), &["chat"], "one\ntwo\n/status\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("first\n") && out.contains("second\n"), "{out}");
    assert!(out.contains("messages: 4"), "{out}");
    assert!(
        stderr(&o).contains("Resume it with hermes -c"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn malformed_tool_arguments_never_reach_the_provider() {
    let env = Env::new();
    // Arguments cut mid-string, as a truncated stream leaves them.
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "read_file", r#"{"path": "notes"#),
        Reply::text("I could not read it."),
    ])
    .unwrap();
    let o = env.run(&provider.base_url(), &["chat", "-q", "read notes"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    let second = &reqs[1]["messages"];
    assert_eq!(second[2]["tool_calls"][0]["function"]["arguments"], "{}");
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{second}"
    );
}

/// A background process started by a one-shot run ends with it, and the
/// user is told so on stderr (the answer on stdout stays clean).
#[test]
fn a_oneshot_run_ends_its_background_processes_and_says_so() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![
        Reply::tool(
            "c1",
            "terminal",
            r#"{"command":"sleep 3; touch survived.txt","background":true}"#,
        ),
        Reply::text("started"),
    ])
    .unwrap();
    let o = env.run(
        &provider.base_url(),
        &["-z", "build it", "--toolsets", "terminal"],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "started\n");
    assert!(
        stderr(&o).contains("ended with this one-shot run"),
        "{}",
        stderr(&o)
    );
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!env.work.path().join("survived.txt").exists());
}
