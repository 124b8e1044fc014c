//! `hermes cron`: create, list (text and JSON), runs, remove, status, and
//! bad input refused with one clear line (SPEC Y1). The store is the real
//! SQLite file in the test's `$HERMES_HOME`.

use serde_json::Value;

use super::support::*;

fn ok(o: &std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
}

#[test]
fn create_list_runs_and_remove_a_job() {
    let env = Env::new();
    let url = dead_url();
    let id = ok(&env.run(
        &url,
        &[
            "cron",
            "create",
            "every 2h",
            "check",
            "the",
            "disk",
            "--name",
            "disk",
            "--deliver",
            "telegram",
        ],
    ))
    .trim()
    .to_owned();
    assert!(id.starts_with('j') && id.len() == 11, "{id:?}");
    let list = ok(&env.run(&url, &["cron", "list"]));
    assert!(
        list.contains(&id) && list.contains("disk") && list.contains("every 2h"),
        "{list}"
    );
    assert!(
        list.contains("[active]") && list.contains("deliver: telegram"),
        "{list}"
    );
    let json: Value =
        serde_json::from_str(ok(&env.run(&url, &["cron", "list", "--json"])).trim()).unwrap();
    assert_eq!(json["id"], id.as_str());
    assert_eq!(json["prompt"], "check the disk");
    assert_eq!(json["state"], "active");
    // A unique prefix names it.
    let prefix = &id[..6];
    let paused = ok(&env.run(&url, &["cron", "pause", prefix]));
    assert!(paused.contains("Paused"), "{paused}");
    let runs = ok(&env.run(&url, &["cron", "runs", prefix]));
    assert!(runs.contains("has not run yet"), "{runs}");
    let status = ok(&env.run(&url, &["cron", "status"]));
    assert!(
        status.contains("no gateway has run it yet") && status.contains("Jobs: 1"),
        "{status}"
    );
    let removed = ok(&env.run(&url, &["cron", "remove", prefix]));
    assert!(removed.contains("will not run again"), "{removed}");
    let list = ok(&env.run(&url, &["cron", "list"]));
    assert!(list.contains("No scheduled jobs"), "{list}");
}

#[test]
fn bad_input_gets_one_clear_line_and_nothing_is_created() {
    let env = Env::new();
    let url = dead_url();
    for (args, says) in [
        (vec!["cron", "create", "whenever", "x"], "every 30m"),
        (vec!["cron", "create", "61 * * * *", "x"], "every 30m"),
        (
            vec!["cron", "create", "30m", "x", "--deliver", "tele gram"],
            "platform:chat_id",
        ),
        (
            vec!["cron", "create", "2020-01-01T00:00Z", "x"],
            "already passed",
        ),
        (vec!["cron", "remove", "jnothere"], "no scheduled job"),
    ] {
        let o = env.run(&url, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    assert!(ok(&env.run(&url, &["cron", "list", "--all"])).contains("No scheduled jobs"));
}

#[test]
fn a_script_job_is_created_from_the_scripts_folder_only_and_listed_in_the_configured_zone() {
    let env = Env::new();
    let url = dead_url();
    std::fs::write(
        env.home.path().join("config.toml"),
        "[gateway]\ntimezone = \"Asia/Tokyo\"\n",
    )
    .unwrap();
    let scripts = env.home.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::write(scripts.join("disk.sh"), "#!/bin/sh\ndf -h /\n").unwrap();
    std::fs::write(env.home.path().join("outside.sh"), "#!/bin/sh\n").unwrap();
    for (args, says) in [
        (
            vec!["cron", "create", "30m", "x", "--script", "../outside.sh"],
            "no `..`",
        ),
        (
            vec!["cron", "create", "30m", "x", "--script", "missing.sh"],
            "no script",
        ),
    ] {
        let o = env.run(&url, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // --no-agent without --script is refused by the argument parser.
    let o = env.run(&url, &["cron", "create", "30m", "--no-agent"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(ok(&env.run(&url, &["cron", "list", "--all"])).contains("No scheduled jobs"));
    // With --no-agent no prompt is needed.
    let id = ok(&env.run(
        &url,
        &[
            "cron",
            "create",
            "every 1h",
            "--script",
            "disk.sh",
            "--no-agent",
        ],
    ))
    .trim()
    .to_owned();
    let list = ok(&env.run(&url, &["cron", "list"]));
    assert!(list.contains("Times in Asia/Tokyo."), "{list}");
    assert!(list.contains(" JST"), "next run in Tokyo time: {list}");
    assert!(list.contains("script: disk.sh (no agent)"), "{list}");
    let json: Value =
        serde_json::from_str(ok(&env.run(&url, &["cron", "list", "--json"])).trim()).unwrap();
    assert_eq!(json["id"], id.as_str());
    assert_eq!(json["script"], "disk.sh");
    assert_eq!(json["no_agent"], true);
}

#[test]
fn webhook_add_writes_a_route_with_a_secret_shown_once_and_refuses_bad_input() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let url = dead_url();
    let out = ok(&env.run(
        &url,
        &[
            "webhook",
            "add",
            "ci",
            "--deliver",
            "telegram",
            "--prompt",
            "CI {payload.workflow_run.conclusion}",
        ],
    ));
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("Secret (shown only now): "))
        .unwrap()
        .to_owned();
    assert_eq!(secret.len(), 64, "{out}");
    let path = env.home.path().join("config.toml");
    let file: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let route = &file["webhooks"]["ci"];
    assert_eq!(route["secret"].as_str(), Some(secret.as_str()));
    assert_eq!(route["deliver"].as_str(), Some("telegram"));
    assert_eq!(
        route["prompt"].as_str(),
        Some("CI {payload.workflow_run.conclusion}")
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the file holds the secret");
    // The same name again, a made-up target: refused, the file unchanged.
    let before = std::fs::read_to_string(&path).unwrap();
    for args in [
        &["webhook", "add", "ci", "--deliver", "telegram"][..],
        &["webhook", "add", "cd", "--deliver", "origin"][..],
        &["webhook", "add", "a/b", "--deliver", "telegram"][..],
    ] {
        let o = env.run(&url, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stdout(&o).contains("Secret"), "{args:?}");
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn silent_unless_changed_marks_the_job_and_remove_clears_the_mark() {
    let env = Env::new();
    let url = dead_url();
    let id = ok(&env.run(
        &url,
        &[
            "cron",
            "create",
            "every 30m",
            "check",
            "the",
            "disk",
            "--silent-unless-changed",
        ],
    ))
    .trim()
    .to_owned();
    let marks = || {
        hermes_runtime::store::Store::open(&env.home.path().join("state.db"))
            .unwrap()
            .kv_scan(hermes_runtime::cron::UNLESS_CHANGED_PREFIX)
            .unwrap()
    };
    assert_eq!(
        marks(),
        [(
            format!("{}{id}", hermes_runtime::cron::UNLESS_CHANGED_PREFIX),
            String::new()
        )]
    );
    ok(&env.run(&url, &["cron", "remove", &id]));
    assert!(marks().is_empty());
}
