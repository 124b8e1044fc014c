//! Issue 38 end to end: the real binary against a loopback provider that
//! behaves like the local servers people run — tool calls written as text
//! (no tool-call parser on the server), `tool_choice` ignored (Ollama's
//! OpenAI layer).

use std::sync::Arc;
use std::time::Duration;

use hermes_tests::{Advertise, FakeProvider, Overflow, Reply, Window};
use serde_json::Value;

use super::support::{Env, stderr, stdout};

const NOTES: &str = "the notes say: water the plants";

/// The last message of a request is a tool result.
fn after_tool(req: &Value) -> Option<String> {
    let last = req["messages"].as_array()?.last()?;
    (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or("").to_owned())
}

/// Writes `text` as the answer (streamed in small pieces) until a tool
/// result comes back, then answers with what the result said.
fn text_caller(text: &'static str) -> FakeProvider {
    let responder = Arc::new(move |req: &Value| match after_tool(req) {
        Some(result) if result.contains("water the plants") => {
            Reply::text("You need to water the plants.")
        }
        Some(other) => Reply::text(format!("The tool said: {other}")),
        None => Reply::SlowText {
            pieces: text
                .as_bytes()
                .chunks(7)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect(),
            delay: Duration::ZERO,
        },
    });
    FakeProvider::start_with(vec![], None, Some(responder)).unwrap()
}

#[test]
fn each_text_call_format_runs_the_tool_and_reaches_the_answer() {
    for text in [
        "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>",
        "<think>\nI should read the file.\n</think>\n\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>\n",
        "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"notes.txt\"}}<|eom_id|>",
        "[TOOL_CALLS] [{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}]",
        "  {\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n",
    ] {
        let env = Env::new();
        std::fs::write(env.work.path().join("notes.txt"), NOTES).unwrap();
        let provider = text_caller(text);
        let o = env.run(
            &provider.base_url(),
            &["-z", "what do my notes say?", "--toolsets", "file"],
        );
        assert_eq!(o.status.code(), Some(0), "{text}: {}", stderr(&o));
        // Only the answer is printed, never the call.
        assert_eq!(stdout(&o).trim(), "You need to water the plants.", "{text}");
        let requests = provider.requests();
        assert_eq!(requests.len(), 2, "{text}");
        // The second request carries the call as a native one, and its result.
        let messages = requests[1]["messages"].as_array().unwrap();
        let call = &messages[messages.len() - 2];
        assert_eq!(
            call["tool_calls"][0]["function"]["name"], "read_file",
            "{text}"
        );
        assert!(
            call.get("content").is_none_or(Value::is_null),
            "{text}: {call}"
        );
        assert!(
            provider.violations().is_empty(),
            "{text}: {:?}",
            provider.violations()
        );
    }
}

#[test]
fn a_json_example_in_an_answer_is_printed_and_not_run() {
    let answer = "To read a file, a model sends:\n\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n```";
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text(answer)]).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "how do tool calls look?"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\"name\": \"read_file\""),
        "{}",
        stdout(&o)
    );
    assert_eq!(provider.requests().len(), 1);
}

#[test]
fn a_text_call_to_an_unknown_tool_is_shown_as_written() {
    let text = "<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>";
    let env = Env::new();
    let provider = text_caller(text);
    let o = env.run(&provider.base_url(), &["-z", "go", "--toolsets", "file"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("launch_rockets"), "{}", stdout(&o));
    assert_eq!(provider.requests().len(), 1);
}

#[test]
fn text_tool_calls_can_be_turned_off_by_variable_or_setting() {
    let text = "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>";
    for (var, file) in [
        (Some("0"), None),
        (None, Some("[agent]\ntext_tool_calls = false\n")),
    ] {
        let env = Env::new();
        if let Some(f) = file {
            env.write_home("config.toml", f);
        }
        let provider = text_caller(text);
        let mut cmd = env.cmd(&provider.base_url());
        if let Some(v) = var {
            cmd.env("HERMES_TEXT_TOOL_CALLS", v);
        }
        let o = cmd
            .args(["-z", "go", "--toolsets", "file"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o).trim(), text);
        assert_eq!(provider.requests().len(), 1);
    }
}

/// Calls `todo` whenever tools are offered, whatever `tool_choice` says
/// (Ollama's OpenAI layer does not implement it); answers when they are
/// not.
fn ignores_tool_choice() -> FakeProvider {
    let responder = Arc::new(|req: &Value| {
        if req.get("tools").is_none() {
            return Reply::text("Here is what I have.");
        }
        let n = req["messages"].as_array().map_or(0, Vec::len);
        Reply::tool(&format!("call_{n}"), "todo", r#"{"action":"list"}"#)
    });
    FakeProvider::start_with(vec![], None, Some(responder)).unwrap()
}

#[test]
fn a_server_ignoring_tool_choice_answers_at_the_cap_and_is_remembered() {
    let env = Env::new();
    env.write_home("config.toml", "[agent]\nrepeat_guard = false\n");
    let provider = ignores_tool_choice();
    let args = [
        "-z",
        "plan my day",
        "--toolsets",
        "todo",
        "--max-iterations",
        "3",
    ];
    let o = env.run(&provider.base_url(), &args);
    // The answer is printed; the exit status says the cap was reached.
    assert_eq!(stdout(&o).trim(), "Here is what I have.", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("maximum iteration count"),
        "{}",
        stderr(&o)
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[2]["tool_choice"], "none");
    assert!(requests[3].get("tools").is_none());
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    // The next run, a new process on the same home, does not pay twice.
    let o = env.run(&provider.base_url(), &args);
    assert_eq!(stdout(&o).trim(), "Here is what I have.", "{}", stderr(&o));
    let requests = provider.requests();
    assert_eq!(requests.len(), 4 + 3);
    assert!(requests[6].get("tools").is_none());
}

#[test]
fn a_server_ignoring_tool_choice_answers_after_the_repeat_guard() {
    let env = Env::new();
    let provider = ignores_tool_choice();
    let o = env.run(
        &provider.base_url(),
        &["-z", "plan my day", "--toolsets", "todo"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "Here is what I have.");
    assert!(stderr(&o).contains("stopped a loop"), "{}", stderr(&o));
    let requests = provider.requests();
    assert_eq!(requests.len(), 7);
    assert_eq!(requests[5]["tool_choice"], "none");
    assert!(requests[6].get("tools").is_none());
}

/// A llama.cpp server started with `-c tokens`: it says so at `/props`
/// and refuses a longer request in its own words.
fn llama_server(tokens: u64, responder: hermes_tests::Responder) -> FakeProvider {
    let window = Window {
        tokens,
        overflow: Overflow::LlamaCpp,
        advertise: Advertise::Props,
    };
    FakeProvider::start_with(vec![], Some(window), Some(responder)).unwrap()
}

#[test]
fn with_the_default_configuration_small_windows_answer() {
    for (tokens, question) in [
        (4096, "hello there"),
        (2048, "What is the capital of France?"),
    ] {
        let env = Env::new();
        let provider = llama_server(tokens, Arc::new(|_: &Value| Reply::text("Hi! Paris.")));
        let o = env.run(&provider.base_url(), &["-z", question]);
        assert_eq!(o.status.code(), Some(0), "{tokens}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), "Hi! Paris.");
        // Never silently: one line names what was left out and the fixes.
        let err = stderr(&o);
        assert_eq!(err.matches("left out:").count(), 1, "{err}");
        assert!(
            err.contains("cronjob") && err.contains("--toolsets"),
            "{err}"
        );
        assert!(err.contains("num_ctx"), "{err}");
        // The lean set's fixed part, as README.md and BENCHMARKS.md state it.
        let now: u64 = err
            .split("now ~")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((900..=1200).contains(&now), "{err}");
        assert!(
            provider.refused().is_empty(),
            "{tokens}: refused {:?}",
            provider.refused()
        );
        let tools: Vec<String> = provider.requests()[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
        assert!(!tools.contains(&"cronjob".to_owned()), "{tools:?}");
    }
}

#[test]
fn a_4096_token_window_carries_a_three_step_task_with_the_request_intact() {
    const TASK: &str =
        "Write 'water the plants' to plan.txt, read it back, then find 'water' in it.";
    let env = Env::new();
    let responder = Arc::new(|req: &Value| {
        let messages = req["messages"].as_array().unwrap();
        // The user's request is still there, word for word, as the last
        // user message of every request.
        let last_user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
        if last_user["content"] != TASK {
            return Reply::text(format!("LOST THE REQUEST: {last_user}"));
        }
        match messages.iter().filter(|m| m["role"] == "tool").count() {
            0 => Reply::tool(
                "c1",
                "write_file",
                r#"{"path":"plan.txt","content":"water the plants\n"}"#,
            ),
            1 => Reply::tool("c2", "read_file", r#"{"path":"plan.txt"}"#),
            2 => Reply::tool("c3", "search_files", r#"{"pattern":"water"}"#),
            _ => Reply::text("Done: plan.txt says to water the plants."),
        }
    });
    let provider = llama_server(4096, responder);
    let o = env.run(&provider.base_url(), &["-z", TASK]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "Done: plan.txt says to water the plants."
    );
    assert_eq!(provider.requests().len(), 4);
    assert!(
        provider.refused().is_empty(),
        "refused {:?}",
        provider.refused()
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn tools_chosen_by_the_user_are_kept_and_only_shortened() {
    let env = Env::new();
    let provider = llama_server(4096, Arc::new(|_: &Value| Reply::text("ok")));
    let o = env.run(
        &provider.base_url(),
        &[
            "-z",
            "hi",
            "--toolsets",
            "file,terminal,todo,cronjob,skills",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let names: Vec<String> = provider.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"cronjob".to_owned()), "{names:?}");
    assert!(!stderr(&o).contains("left out"), "{}", stderr(&o));
}

#[test]
fn doctor_shows_the_servers_window_and_the_fixed_prompt_against_it() {
    let env = Env::new();
    let provider = llama_server(4096, Arc::new(|_: &Value| Reply::text("ok")));
    let o = env.run(&provider.base_url(), &["doctor"]);
    let out = stdout(&o);
    assert!(
        out.contains("context window 4096 tokens (from provider"),
        "{out}"
    );
    assert!(out.contains("/props"), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("fixed prompt ~"))
        .unwrap_or_else(|| panic!("{out}"));
    let tokens: u64 = line
        .split('~')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(tokens > 4096 * 40 / 100, "{line}");
    assert!(out.contains("tool descriptions are shortened"), "{out}");
    assert!(out.contains("--toolsets"), "{out}");
}

/// How the summariser of [`thirty_turns_in_a_6000_token_window`] behaves.
#[derive(Clone, Copy, Debug)]
enum Summariser {
    Working,
    Failing,
    Empty,
}

#[test]
fn thirty_turns_in_a_6000_token_window_each_answer_about_its_own_question() {
    for summariser in [Summariser::Working, Summariser::Failing, Summariser::Empty] {
        let env = Env::new();
        let responder = Arc::new(move |req: &Value| {
            let messages = req["messages"].as_array().unwrap();
            let system = messages[0]["content"].as_str().unwrap_or("");
            if system == hermes_core::context::summary::SUMMARIZER_PROMPT {
                return match summariser {
                    Summariser::Working => {
                        Reply::text("The user asked numbered questions; each was answered.")
                    }
                    Summariser::Failing => Reply::Status(503, "overloaded".into()),
                    Summariser::Empty => Reply::text(""),
                };
            }
            // Answer the question of the last user message, by its number.
            let last_user = messages
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            let at = last_user.rfind("question ").map_or(0, |i| i + 9);
            let n: String = last_user[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            Reply::text(format!("answer to question {n}: {}", "blah ".repeat(60)))
        });
        let provider = llama_server(6000, responder);
        for n in 1..=30 {
            let question = format!("question {n}: {}", "please tell me about it ".repeat(12));
            let args = if n == 1 {
                vec!["-z", question.as_str()]
            } else {
                vec!["chat", "--continue", "-q", question.as_str()]
            };
            let o = env.run(&provider.base_url(), &args);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{summariser:?} turn {n}: {}",
                stderr(&o)
            );
            assert!(
                stdout(&o).starts_with(&format!("answer to question {n}:")),
                "{summariser:?} turn {n}: {}",
                stdout(&o)
            );
        }
        assert!(
            provider.refused().is_empty(),
            "{summariser:?}: {:?}",
            provider.refused()
        );
        let summaries = provider
            .requests()
            .iter()
            .filter(|r| {
                r["messages"][0]["content"] == hermes_core::context::summary::SUMMARIZER_PROMPT
            })
            .count();
        assert!(
            summaries > 0 || !matches!(summariser, Summariser::Working),
            "no compaction"
        );
        assert!(
            provider.violations().is_empty(),
            "{summariser:?}: {:?}",
            provider.violations()
        );
    }
}
