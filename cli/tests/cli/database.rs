//! The PostgreSQL store from the command line (SPEC X8): `HERMES_DATABASE_URL`
//! selects it, sessions live there (not in `$HERMES_HOME/state.db`),
//! `config show` masks its password, and `doctor` checks it and shows who
//! holds which lease.

use std::time::Duration;

use hermes_runtime::store::{Store, StoreTarget};
use hermes_tests::{FakeProvider, Reply};

use super::support::{Env, stderr, stdout};

/// A fresh database of the test server, and the same URL with a password
/// (trust authentication ignores it) for the masking checks.
fn database() -> (String, String) {
    let url = hermes_tests::postgres::fresh_database();
    let server = hermes_tests::postgres::server();
    let name = url
        .strip_prefix("postgresql:///")
        .and_then(|r| r.split('?').next())
        .unwrap()
        .to_owned();
    let with_password = format!(
        "postgresql://{}:s3cret-pw@/{name}?host={}",
        server.user,
        server.socket_dir.display()
    );
    (url, with_password)
}

/// The store, opened on a plain thread (the test's own thread is fine too;
/// this mirrors how a caller outside the binary would look).
fn store(url: &str) -> Store {
    Store::open_target(&StoreTarget::Postgres(url.to_owned())).unwrap()
}

#[test]
fn sessions_go_to_the_database_the_url_names() {
    hermes_tests::require!(Postgres);
    let env = Env::new();
    let (url, with_password) = database();
    let provider = FakeProvider::start(vec![Reply::text("stored in postgres")]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", &with_password)
        .args(["-z", "remember this"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "stored in postgres");
    assert!(
        !env.home.path().join("state.db").exists(),
        "no SQLite file when a database URL is set"
    );
    let hits = store(&url).search("remember", 10).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");

    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", &with_password)
        .args(["config", "show"])
        .output()
        .unwrap();
    let shown = stdout(&o);
    assert!(shown.contains(":***@"), "{shown}");
    assert!(shown.contains("HERMES_DATABASE_URL"), "{shown}");
    assert!(!shown.contains("s3cret-pw"), "{shown}");

    // Not a PostgreSQL URL: a configuration error naming the setting.
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", "mysql://h/db")
        .args(["-z", "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("PostgreSQL URL"), "{}", stderr(&o));
}

#[test]
fn doctor_checks_the_database_and_shows_who_holds_which_lease() {
    hermes_tests::require!(Postgres);
    let env = Env::new();
    let (url, with_password) = database();
    let mut db = store(&url);
    db.lease_acquire(
        "bot:telegram:4242",
        "box-a:1234:beef",
        Duration::from_secs(600),
        None,
        false,
    )
    .unwrap();
    db.lease_acquire(
        "session:agent:main:telegram:dm:7",
        "box-a:1234:beef",
        Duration::from_secs(600),
        None,
        false,
    )
    .unwrap();
    let provider = FakeProvider::start(vec![]).unwrap();
    provider.set_models(&["fake-model"]);
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", &with_password)
        .arg("doctor")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("✓ database postgresql://"), "{out}");
    assert!(out.contains("(postgresql, 0 sessions)"), "{out}");
    assert!(
        out.contains("bot:telegram:4242 held by box-a:1234:beef (epoch 1"),
        "{out}"
    );
    assert!(
        out.contains("1 turn(s) running across the gateways"),
        "{out}"
    );
    assert!(!out.contains("s3cret-pw"), "{out}");

    // A database that cannot be reached is a problem with a fix.
    let server = hermes_tests::postgres::server();
    let o = env
        .cmd(&provider.base_url())
        .env(
            "HERMES_DATABASE_URL",
            format!(
                "postgresql://{}:pw@/no_such_database?host={}",
                server.user,
                server.socket_dir.display()
            ),
        )
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("✗ database postgresql://"), "{out}");
    assert!(out.contains("check HERMES_DATABASE_URL"), "{out}");
}

/// `[store] url` in `config.toml` selects the database too — here the
/// unix-socket spelling with the socket directory percent-encoded as the
/// host — and `HERMES_DATABASE_URL` wins over it.
#[test]
fn the_config_file_names_the_database_and_the_variable_wins() {
    hermes_tests::require!(Postgres);
    let env = Env::new();
    let (from_file, _) = database();
    let (from_env, _) = database();
    let server = hermes_tests::postgres::server();
    let name = from_file
        .strip_prefix("postgresql:///")
        .and_then(|r| r.split('?').next())
        .unwrap();
    let encoded = server.socket_dir.display().to_string().replace('/', "%2F");
    env.write_home(
        "config.toml",
        &format!(
            "[store]\nurl = \"postgresql://{}@{encoded}/{name}\"\n",
            server.user
        ),
    );
    let provider = FakeProvider::start(vec![Reply::text("one"), Reply::text("two")]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .args(["-z", "kept by the file's database"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!env.home.path().join("state.db").exists());
    assert_eq!(store(&from_file).list_sessions(10).unwrap().len(), 1);

    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", &from_env)
        .args(["-z", "kept by the variable's database"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(store(&from_file).list_sessions(10).unwrap().len(), 1);
    assert_eq!(store(&from_env).list_sessions(10).unwrap().len(), 1);
}
