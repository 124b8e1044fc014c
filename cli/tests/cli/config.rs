//! Configuration: typos stop the run with a suggestion (exit 2), in
//! `doctor` too; toolset lists; `hermes config`; log lines for humans.

use std::process::Command;

use hermes_tests::{FakeProvider, Reply};

use super::support::*;

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

    env.write_home("config.toml", "[agent]\nmax_iterations = \"many\"\n");
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
fn config_typos_stop_the_run_and_doctor_with_suggestions() {
    let env = Env::new();
    env.write_home(
        "config.toml",
        "[provider]\nbase_ulr = \"http://x/v1\"\n[providr]\nmodel = \"m\"\n[agent]\nmax_iteration = 3\n",
    );
    let provider = FakeProvider::start(vec![]).unwrap();
    for args in [&["-z", "hi"][..], &["doctor"][..]] {
        let o = env.run(&provider.base_url(), args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        let text = stdout(&o) + &stderr(&o);
        for hint in [
            "did you mean 'base_url'",
            "did you mean 'provider'",
            "did you mean 'max_iterations'",
        ] {
            assert!(text.contains(hint), "{args:?} lacks {hint}: {text}");
        }
    }
    assert!(provider.requests().is_empty(), "nothing ran on a typo");
    let o = env.run(&provider.base_url(), &["doctor"]);
    assert!(stdout(&o).contains("✗ configuration"), "{}", stdout(&o));
}

#[test]
fn a_malformed_dotenv_line_is_an_error_naming_the_line() {
    let env = Env::new();
    env.write_home(".env", "HERMES_MODEL=ok\nthis is not an assignment\n");
    let o = env.run("http://127.0.0.1:9/v1", &["-z", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(".env:2"), "{}", stderr(&o));

    env.write_home(".env", "HERMES_MODLE=typo\n");
    let o = env.run("http://127.0.0.1:9/v1", &["doctor"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("did you mean HERMES_MODEL"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_unknown_toolset_in_the_environment_fails_doctor_with_a_suggestion() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_TOOLSETS", "fiel")
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("did you mean 'file'"), "{}", stdout(&o));
}

fn tool_names(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn toolsets_take_spaces_after_commas_and_none_disables_every_tool() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text("a"), Reply::text("b")]).unwrap();
    let o = env.run(
        &provider.base_url(),
        &["--toolsets", "file, todo", "-z", "hi"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = env.run(&provider.base_url(), &["--toolsets", "none", "-z", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let reqs = provider.requests();
    let mut first = tool_names(&reqs[0]);
    first.sort();
    assert_eq!(
        first,
        ["patch", "read_file", "search_files", "todo", "write_file"]
    );
    assert!(tool_names(&reqs[1]).is_empty(), "{:?}", reqs[1]["tools"]);
}

#[test]
fn config_alone_shows_the_configuration_masking_secrets() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    for args in [&["config"][..], &["config", "show"][..]] {
        let o = env
            .cmd(&provider.base_url())
            .env("HERMES_API_KEY", "sk-test-supersecret-9876")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(!out.contains("supersecret"), "{out}");
        assert!(out.contains("…9876"), "{out}");
        assert!(out.contains("environment $HERMES_BASE_URL"), "{out}");
        assert!(
            out.contains("hermes setup"),
            "says config.toml is not there yet: {out}"
        );
    }
    let o = env.run(&provider.base_url(), &["config", "path"]);
    assert_eq!(
        stdout(&o).trim(),
        env.home.path().join("config.toml").display().to_string()
    );
}

#[test]
fn doctor_reports_the_provider_and_the_fix_for_each_failure() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    provider.set_models(&["fake-model", "other-model"]);
    let o = env.run(&provider.base_url(), &["doctor"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("provider reachable at")
            && stdout(&o).contains("(2 models: fake-model, other-model)"),
        "{}",
        stdout(&o)
    );

    let o = env.run(&provider.base_url(), &["doctor", "-m", "nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("offers: fake-model, other-model"),
        "{}",
        stdout(&o)
    );

    let o = env.run("http://127.0.0.1:9/v1", &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("✗ provider reachable"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("start the server"), "{}", stdout(&o));

    // A refused key is not "start the server".
    provider.fail_models(401);
    let o = env.run(&provider.base_url(), &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("API key") && !out.contains("start the server"),
        "{out}"
    );
}

/// Subcommands' arguments are defined only when clap reaches them (issue
/// 39); what each help says is the same as when the whole tree was built:
/// the subcommand's own description (not its type's), every nested
/// subcommand, and `hermes help X Y` agreeing with `hermes X Y --help`.
#[test]
fn deferred_subcommands_keep_their_help() {
    let help = |args: &[&str]| stdout(&Command::new(HERMES).args(args).output().unwrap());
    let cron = help(&["cron", "--help"]);
    assert!(
        cron.starts_with("Scheduled jobs: the gateway runs them"),
        "{cron}"
    );
    for nested in [
        "create", "list", "pause", "resume", "remove", "run", "runs", "status",
    ] {
        assert!(
            cron.contains(&format!("\n  {nested} ")),
            "cron {nested}: {cron}"
        );
    }
    assert_eq!(help(&["help", "cron"]), cron);
    let create = help(&["cron", "create", "--help"]);
    assert!(
        create.contains("Usage: hermes cron create [OPTIONS] <SCHEDULE>"),
        "{create}"
    );
    assert_eq!(help(&["help", "cron", "create"]), create);
    let models = help(&["models", "--help"]);
    assert!(
        models.starts_with("List the models the provider offers"),
        "{models}"
    );
    assert!(models.contains("--base-url <URL>"), "{models}");
    let top = help(&["--help"]);
    assert!(
        top.contains("Scheduled jobs: the gateway runs them"),
        "{top}"
    );
}

#[test]
fn subcommand_help_does_not_repeat_the_chat_flags() {
    for sub in ["sessions", "completions", "setup"] {
        let o = Command::new(HERMES).args([sub, "--help"]).output().unwrap();
        let help = stdout(&o);
        assert!(!help.contains("--max-iterations"), "{sub}: {help}");
        assert!(!help.contains("--continue"), "{sub}: {help}");
    }
    // Chat options before another command are a mistake, said as such.
    let env = Env::new();
    let o = env
        .bare()
        .args(["-c", "sessions", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("go with chat"), "{}", stderr(&o));
    let o = Command::new(HERMES).arg("--help").output().unwrap();
    for flag in [
        "-c, --continue",
        "--resume",
        "-m, --model",
        "-z, --query",
        "--json",
    ] {
        assert!(
            stdout(&o).contains(flag),
            "top-level {flag}: {}",
            stdout(&o)
        );
    }
}

#[test]
fn log_lines_are_short_and_plain_without_a_terminal() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![
        Reply::Status(503, "overloaded".into()),
        Reply::text("fine now"),
    ])
    .unwrap();
    let o = env
        .cmd(&provider.base_url())
        .env("NO_COLOR", "1")
        .args(["-z", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let line = err
        .lines()
        .find(|l| l.contains("retrying"))
        .unwrap_or_else(|| panic!("a retry warning: {err}"));
    assert!(
        line.starts_with("hermes: warning: provider call failed"),
        "{line}"
    );
    assert!(line.contains("503"), "{line}");
    assert!(
        !line.contains('=') && !line.contains('\x1b'),
        "no key=value, no colour: {line}"
    );
}

#[test]
fn credentials_in_the_base_url_are_masked_in_config_show_doctor_and_logs() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![
        Reply::Status(500, "upstream hiccup".into()),
        Reply::text("hello through the proxy"),
    ])
    .unwrap();
    let url = provider
        .base_url()
        .replace("http://", "http://proxyuser:hunter2pass@");
    let masked = provider.base_url().replace("http://", "http://***@");
    let leaks = |text: &str| text.contains("hunter2pass") || text.contains("proxyuser");

    let o = env.run(&url, &["config", "show"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(!leaks(&stdout(&o)), "{}", stdout(&o));
    assert!(stdout(&o).contains(&masked), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("call_timeout     90s"),
        "{}",
        stdout(&o)
    );

    // A retried call logs a warning naming the URL: masked.
    let o = env
        .cmd(&url)
        .env("RUST_LOG", "warn")
        .args(["-z", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "hello through the proxy\n");
    assert!(stderr(&o).contains("retrying"), "{}", stderr(&o));
    assert!(!leaks(&stderr(&o)), "{}", stderr(&o));
    assert!(stderr(&o).contains(&masked), "{}", stderr(&o));

    let o = env.run(&url, &["doctor"]);
    assert!(!leaks(&stdout(&o)), "{}", stdout(&o));
    assert!(stdout(&o).contains(&masked), "{}", stdout(&o));

    // An unreachable provider's error, with the hint that names the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://proxyuser:hunter2pass@127.0.0.1:{port}/v1");
    let o = env.run(&dead, &["-z", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!leaks(&stderr(&o)), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("http://***@127.0.0.1:{port}")),
        "{}",
        stderr(&o)
    );
}
