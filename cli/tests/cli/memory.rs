//! `hermes memory` (issue 44) in the real binary: the owner lists whose
//! memories exist, shows one user's (and nobody else's), edits it with
//! $EDITOR and forgets it; a malformed or hostile id is refused clearly.

use super::support::{Env, stderr, stdout};

fn write(env: &Env, rel: &str, text: &str) {
    let path = env.home.path().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn list_show_edit_forget_one_users_memory() {
    let env = Env::new();
    env.write_home("config.toml", "[memory]\nowner = \"telegram:1\"\n");
    env.write_home("MEMORY.md", "Owner's old fact.\n");
    write(
        &env,
        "memories/users/telegram/11/MEMORY.md",
        "Alice takes insulin.\n",
    );
    write(
        &env,
        "memories/users/telegram/12/MEMORY.md",
        "Bob plays chess.\n",
    );
    write(&env, "memories/shared/MEMORY.md", "The dog is Rex.\n");
    let run = |args: &[&str]| env.run("http://127.0.0.1:9", args);

    let o = run(&["memory", "list"]);
    assert_eq!(
        stdout(&o),
        "telegram:1  (owner)\ntelegram:11\ntelegram:12\n",
        "{}",
        stderr(&o)
    );
    let o = run(&["memory", "show", "telegram:11"]);
    let shown = stdout(&o);
    assert!(
        shown.contains("Alice takes insulin.") && shown.contains("Rex"),
        "{shown}"
    );
    assert!(
        !shown.contains("chess") && !shown.contains("old fact"),
        "{shown}"
    );
    let o = run(&["memory", "show", "telegram:1"]);
    assert!(stdout(&o).contains("Owner's old fact."), "{}", stdout(&o));

    // $EDITOR is run on the user's file.
    let script = env.work.path().join("ed.sh");
    std::fs::write(&script, "#!/bin/sh\necho 'Bob moved to Oslo.' >> \"$1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = env
        .cmd("http://127.0.0.1:9")
        .env("EDITOR", &script)
        .args(["memory", "edit", "telegram:12"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let bob = env.home.path().join("memories/users/telegram/12/MEMORY.md");
    assert_eq!(
        std::fs::read_to_string(&bob).unwrap(),
        "Bob plays chess.\nBob moved to Oslo.\n"
    );

    let o = run(&["memory", "forget", "telegram:11"]);
    assert!(stdout(&o).contains("Forgot telegram:11"), "{}", stdout(&o));
    assert!(
        !env.home
            .path()
            .join("memories/users/telegram/11/MEMORY.md")
            .exists()
    );
    assert!(bob.exists());
    assert!(env.home.path().join("memories/shared/MEMORY.md").exists());

    for bad in ["alice", "telegram:", ":5"] {
        let o = run(&["memory", "forget", bad]);
        assert_ne!(o.status.code(), Some(0));
        assert!(
            stderr(&o).contains("is not PLATFORM:USER_ID"),
            "{}",
            stderr(&o)
        );
    }
    // A hostile id names an encoded folder inside $HERMES_HOME, never a path.
    let o = run(&["memory", "forget", "telegram:../../.."]);
    assert!(stdout(&o).contains("0 files removed"), "{}", stdout(&o));
    assert!(env.home.path().join("MEMORY.md").exists());
}

/// `hermes usage` (issue 44): every account the gateway keeps, the bot's
/// total last, with the configured caps; a bad cap is refused by name.
#[test]
fn usage_lists_everyones_accounts_and_the_caps() {
    let env = Env::new();
    env.write_home(
        "config.toml",
        "[limits]\nuser_day_tokens = 5000\ntimezone = \"UTC\"\n",
    );
    {
        let mut store =
            hermes_runtime::store::Store::open(&env.home.path().join("state.db")).unwrap();
        let limits = hermes_runtime::spending::SpendingLimits::default();
        let now = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        for (who, tokens) in [("telegram:11", 1200), ("telegram:12", 300)] {
            let charges = limits.charge(who, now, tokens, 2500);
            let writes: Vec<_> = charges.iter().map(|c| c.write()).collect();
            assert!(store.kv_commit(&writes).unwrap());
        }
    }
    let o = env.run("http://127.0.0.1:9", &["usage"]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("Usage on ") && lines[0].ends_with("(UTC):"),
        "{out}{}",
        stderr(&o)
    );
    assert!(
        lines[1].starts_with("telegram:11") && lines[1].contains(" 1200 tokens $   0.0025"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("telegram:12") && lines[2].contains(" 300 tokens"),
        "{out}"
    );
    assert!(
        lines[3].starts_with("everyone") && lines[3].contains(" 1500 tokens $   0.0050"),
        "{out}"
    );
    assert_eq!(lines[4], "Caps: user_day_tokens = 5000");

    env.write_home("config.toml", "[limits]\nuser_month_usd = -2\n");
    let o = env.run("http://127.0.0.1:9", &["usage"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("[limits] user_month_usd: -2 is not a cap"),
        "{}",
        stderr(&o)
    );
}
