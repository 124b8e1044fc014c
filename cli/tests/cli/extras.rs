//! Completions, the man page, `hermes models`, `hermes setup` and the
//! gateway's `--check`.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use hermes_tests::{FakeProvider, Reply};

use super::support::*;

#[test]
fn completions_and_the_man_page_come_from_the_command_definition() {
    for (shell, marker) in [
        ("bash", "complete"),
        ("zsh", "#compdef hermes"),
        ("fish", "complete -c hermes"),
    ] {
        let o = Command::new(HERMES)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = stdout(&o);
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..script.len().min(300)]
        );
        assert!(script.contains("sessions"), "{shell} knows the subcommands");
    }
    let o = Command::new(HERMES).arg("man").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let page = stdout(&o);
    assert!(
        page.contains(".TH hermes"),
        "{}",
        &page[..page.len().min(300)]
    );
    assert!(
        page.contains("\\-\\-continue"),
        "the options are documented"
    );
}

#[test]
fn models_lists_what_the_provider_offers_marking_the_current_one() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    provider.set_models(&["alpha", "fake-model", "zeta"]);
    let o = env.run(&provider.base_url(), &["models"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "  alpha\n* fake-model\n  zeta\n");
    let o = env.run(&dead_url(), &["models"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn setup_tests_the_connection_lists_models_and_writes_config_and_a_private_env() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text("configured!")]).unwrap();
    provider.set_models(&["small-model", "big-model"]);
    let url = provider.base_url();
    // Another server → its URL → a key → model 2.
    let answers = format!("6\n{url}\nsk-setup-key-123456\n2\n");
    let mut child = env
        .bare()
        .arg("setup")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answers.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("connected (2 models)"), "{err}");
    assert!(err.contains("big-model"), "{err}");
    // The chat-platform step is offered; no answer (end of input) is "no".
    assert!(err.contains("Connect a chat platform"), "{err}");
    assert!(err.contains("hermes gateway setup"), "{err}");
    assert_eq!(
        provider.auth_headers()[0].as_deref(),
        Some("Bearer sk-setup-key-123456"),
        "the connection test used the key"
    );

    let config = std::fs::read_to_string(env.home.path().join("config.toml")).unwrap();
    assert!(
        config.contains(&format!("base_url = \"{url}\"")),
        "{config}"
    );
    assert!(config.contains("model = \"big-model\""), "{config}");
    assert!(
        !config.contains("sk-setup"),
        "no secret in config.toml: {config}"
    );
    let dotenv_path = env.home.path().join(".env");
    let dotenv = std::fs::read_to_string(&dotenv_path).unwrap();
    assert_eq!(dotenv, "HERMES_API_KEY=sk-setup-key-123456\n");
    let mode = std::fs::metadata(&dotenv_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The next run needs nothing else.
    let o = env.bare().args(["-z", "hi"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "configured!\n");
    assert_eq!(provider.requests()[0]["model"], "big-model");
    let o = env.bare().arg("doctor").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn setup_offers_a_retry_when_the_connection_fails_and_saves_nothing_on_quit() {
    let env = Env::new();
    let answers = format!("6\n{}\n\nq\n", dead_url());
    let mut child = env
        .bare()
        .arg("setup")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answers.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("[r]etry"), "{}", stderr(&o));
    assert!(!env.home.path().join("config.toml").exists());
}
