//! `hermes import hermes-agent PATH` (issue 45, item 1) against a home made
//! by the real hermes-agent package (`tests/python/hermes_agent_home.py`):
//! its sessions become ours and searchable, its memory reaches the next
//! prompt, a second import adds nothing, a dry run and a refused import
//! change nothing, and the source stays byte for byte as it was.

use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::foreign_home::{files, hermes_agent_python, make_hermes_agent_home};
use super::support::{Env, stderr, stdout, system_prompt};

fn import(env: &Env, source: &std::path::Path, extra: &[&str]) -> std::process::Output {
    env.bare()
        .args(["import", "hermes-agent"])
        .arg(source)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_real_hermes_agent_home_is_imported_searchable_with_its_memory_once() {
    let Some(python) = hermes_agent_python() else {
        return;
    };
    let made = tempfile::tempdir().unwrap();
    let source = made.path().join("agent-home");
    // Its config.yaml (endpoint, a fallback, toolsets, a turn budget, a
    // Discord setting, keys with no equivalent) and its .env (a key) are
    // written by its own config code.
    make_hermes_agent_home(&python, &source);
    let source_before = files(&source);
    let env = Env::new();

    // A dry run says what it would bring and changes nothing.
    let dest_before = files(env.home.path());
    let o = import(&env, &source, &["--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("state.db schema 22"), "{out}");
    assert!(out.contains("would import up to 2 (10 messages"), "{out}");
    assert!(out.contains("would import 1 new entries"), "{out}");
    assert!(out.contains("persona (SOUL.md): would copy"), "{out}");
    assert!(
        out.contains("OPENROUTER_API_KEY; values not shown"),
        "{out}"
    );
    // One of hermes-agent's own HERMES_ variables would make this
    // hermes refuse its .env: left out, named.
    assert!(
        out.contains(
            "not copied, hermes-agent's own or not readable here: HERMES_SPOTIFY_CLIENT_ID"
        ),
        "{out}"
    );
    assert_eq!(
        files(env.home.path()),
        dest_before,
        "the dry run changed nothing"
    );

    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("imported 2 of 2"), "{out}");
    // Each mapped key named with where it went; each unmapped one named.
    for line in [
        "model.default → [provider] model",
        "model.base_url → [provider] base_url",
        "fallback_providers[0] → [[provider.fallback]]",
        "toolsets → [agent] toolsets",
        "agent.max_turns → [agent] max_iterations",
        "discord.require_mention → [discord] require_mention",
    ] {
        assert!(out.contains(line), "{line} missing: {out}");
    }
    assert!(
        out.contains(
            "not mapped (no equivalent here): display.skin, toolsets: browser, tts.provider"
        ),
        "{out}"
    );
    let config = std::fs::read_to_string(env.home.path().join("config.toml")).unwrap();
    let config: toml::Table = config.parse().unwrap();
    assert_eq!(config["provider"]["model"].as_str(), Some("scripted-model"));
    assert_eq!(
        config["provider"]["base_url"].as_str(),
        Some("http://127.0.0.1:9/v1")
    );
    assert_eq!(
        config["provider"]["fallback"][0]["base_url"].as_str(),
        Some("https://openrouter.ai/api/v1")
    );
    assert_eq!(
        config["provider"]["fallback"][0]["model"].as_str(),
        Some("openai/gpt-4o-mini")
    );
    assert_eq!(
        config["agent"]["toolsets"],
        toml::Value::try_from(["file", "terminal", "memory", "session_search", "delegate"])
            .unwrap()
    );
    assert_eq!(config["agent"]["max_iterations"].as_integer(), Some(40));
    assert_eq!(config["discord"]["require_mention"].as_bool(), Some(false));
    // The secret came over (mode 0600) and was never printed.
    let dotenv = env.home.path().join(".env");
    assert!(
        std::fs::read_to_string(&dotenv)
            .unwrap()
            .contains("sk-or-imported-0123456789")
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&dotenv).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let config_mode = std::fs::metadata(env.home.path().join("config.toml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(config_mode & 0o777, 0o600, "it holds an api_key");
    for secret in ["sk-or-imported", "sk-custom-endpoint-key"] {
        assert!(
            !out.contains(secret) && !stderr(&o).contains(secret),
            "{out}"
        );
    }
    assert_eq!(
        config["provider"]["api_key"].as_str(),
        Some("sk-custom-endpoint-key-42")
    );
    // Its persona came along.
    assert_eq!(
        std::fs::read(env.home.path().join("SOUL.md")).unwrap(),
        source_before["SOUL.md"]
    );
    // The translated configuration is one this hermes accepts.
    let doctor = env.bare().args(["config", "show"]).output().unwrap();
    assert_eq!(
        doctor.status.code(),
        Some(0),
        "{}{}",
        stdout(&doctor),
        stderr(&doctor)
    );
    let dest_after_first = files(env.home.path());
    assert!(
        stdout(&o).contains("skill tyre-pressure: installed"),
        "{}",
        stdout(&o)
    );
    // A second import adds nothing twice.
    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("imported 0 of 2 (2 already"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("skill tyre-pressure: already here"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("added 0 settings"), "{}", stdout(&o));
    for file in ["config.toml", ".env", "SOUL.md", "MEMORY.md", "USER.md"] {
        assert_eq!(
            std::fs::read(env.home.path().join(file)).ok(),
            dest_after_first.get(file).cloned(),
            "{file} is as the first import left it"
        );
    }
    assert_eq!(env.session_ids().len(), 2);
    // The tool calls its agent made and their results came along.
    let exported: String = env
        .session_ids()
        .iter()
        .map(|id| {
            let o = env
                .bare()
                .args(["sessions", "export", "--format", "json", id])
                .output()
                .unwrap();
            stdout(&o)
        })
        .collect();
    assert!(exported.contains("call_skill1"), "{exported}");
    assert!(exported.contains("skill_manage"), "{exported}");
    assert!(exported.contains("tyre-pressure"), "{exported}");
    let skills = stdout(&env.bare().args(["skills", "list"]).output().unwrap());
    assert!(skills.contains("tyre-pressure"), "{skills}");
    let memory = std::fs::read_to_string(env.home.path().join("MEMORY.md")).unwrap();
    assert_eq!(memory.matches("11 gears").count(), 1, "{memory}");

    let list = stdout(&env.bare().args(["sessions", "list"]).output().unwrap());
    assert!(
        list.contains("Bicycle gears"),
        "the title came along: {list}"
    );
    assert!(
        list.contains("(telegram)"),
        "the platform came along: {list}"
    );
    let hits = stdout(
        &env.bare()
            .args(["sessions", "search", "derailleur"])
            .output()
            .unwrap(),
    );
    assert!(hits.contains("[derailleur]"), "{hits}");

    // The model's session_search finds the imported tool result, and the
    // imported memory is in the next system prompt.
    let responder = Arc::new(|req: &Value| {
        let last = &req["messages"].as_array().unwrap().last().unwrap().clone();
        if last["role"] == "tool" {
            Reply::text(format!("FOUND: {}", last["content"].as_str().unwrap_or("")))
        } else {
            Reply::tool("c1", "session_search", r#"{"query": "chainring"}"#)
        }
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let o = env.run(
        &provider.base_url(),
        &["-z", "what did we say about gears?"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("FOUND: 1 earlier session mentions"), "{out}");
    assert!(out.contains("the smallest [chainring] with"), "{out}");
    let first = &provider.requests()[0];
    assert!(
        system_prompt(first).contains("11 gears"),
        "{}",
        system_prompt(first)
    );
    assert!(system_prompt(first).contains("Prefers short answers"));

    assert_eq!(
        files(&source),
        source_before,
        "the source home is byte for byte as it was"
    );
}

#[test]
fn a_corrupt_state_db_is_refused_and_nothing_is_imported() {
    let Some(python) = hermes_agent_python() else {
        return;
    };
    let made = tempfile::tempdir().unwrap();
    let source = made.path().join("agent-home");
    make_hermes_agent_home(&python, &source);
    let mut db = std::fs::read(source.join("state.db")).unwrap();
    db.truncate(db.len() / 3);
    db[..16].copy_from_slice(b"not a database!\0");
    std::fs::write(source.join("state.db"), &db).unwrap();
    let source_before = files(&source);
    let env = Env::new();
    let dest_before = files(env.home.path());
    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was imported"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        files(env.home.path()),
        dest_before,
        "the destination is as it was"
    );
    assert_eq!(files(&source), source_before);
}

#[test]
fn another_versions_tables_and_columns_are_named_and_skipped() {
    let Some(python) = hermes_agent_python() else {
        return;
    };
    let made = tempfile::tempdir().unwrap();
    let source = made.path().join("agent-home");
    make_hermes_agent_home(&python, &source);
    // What a later hermes-agent might add: a table and a column.
    let o = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             c.execute('CREATE TABLE session_moods (session_id TEXT, mood TEXT)'); \
             c.execute('ALTER TABLE sessions ADD COLUMN mood TEXT'); c.commit()",
        )
        .arg(source.join("state.db"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let env = Env::new();
    // A model chosen here already: kept.
    std::fs::write(
        env.home.path().join("config.toml"),
        "[provider]\nmodel = \"my-model\"\n",
    )
    .unwrap();
    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "known: hermes-agent 0.19 (state.db schema 22)), skipped: session_moods, sessions.mood"
        ),
        "{out}"
    );
    assert!(out.contains("imported 2 of 2"), "{out}");
    assert!(
        out.contains("already set here, kept: [provider] model"),
        "{out}"
    );
    let config = std::fs::read_to_string(env.home.path().join("config.toml")).unwrap();
    let config: toml::Table = config.parse().unwrap();
    assert_eq!(config["provider"]["model"].as_str(), Some("my-model"));
    assert_eq!(
        config["provider"]["base_url"].as_str(),
        Some("http://127.0.0.1:9/v1")
    );
}

#[test]
fn a_config_yaml_that_is_not_yaml_is_refused_and_nothing_is_imported() {
    let Some(python) = hermes_agent_python() else {
        return;
    };
    let made = tempfile::tempdir().unwrap();
    let source = made.path().join("agent-home");
    make_hermes_agent_home(&python, &source);
    std::fs::write(
        source.join("config.yaml"),
        "model: [unclosed\n  provider: : :\n",
    )
    .unwrap();
    let env = Env::new();
    let dest_before = files(env.home.path());
    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is not valid YAML"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was imported"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        files(env.home.path()),
        dest_before,
        "the destination is as it was"
    );

    // YAML whose translation this hermes would refuse: refused before
    // anything is written.
    std::fs::write(
        source.join("config.yaml"),
        // Not http(s), and with credentials in it, which no error shows.
        "model:\n  default: m\n  base_url: ftp://user:sekrit-pass@host/v1\n",
    )
    .unwrap();
    let o = import(&env, &source, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("would not be valid here"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("sekrit-pass"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was imported"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        files(env.home.path()),
        dest_before,
        "the destination is as it was"
    );
}
