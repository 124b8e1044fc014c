//! What only the PostgreSQL backend has: its schema table (newer schema
//! refused, concurrent migration, v1 migrated), connection errors that
//! mask the password, and TCP and Unix-socket URLs.

use hermes_runtime::store::{BackendKind, NewSession, Store, StoreError};

use super::support::{LATEST_PG_SCHEMA, assistant, user};
use crate::backends::Db;

#[test]
fn postgres_a_database_from_a_newer_hermes_is_refused_untouched() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    drop(db.open());
    db.psql("UPDATE hermes_schema SET version = 99");
    let err = Store::open_url(db.url.as_ref().unwrap()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: LATEST_PG_SCHEMA,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade hermes"), "{err}");
    assert_eq!(db.psql("SELECT version FROM hermes_schema"), "99");
}

#[test]
fn postgres_gateways_starting_together_migrate_once() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let target = db.target();
            std::thread::spawn(move || {
                let mut store = Store::open_target(&target).unwrap();
                store.create_session(&NewSession::default()).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        db.psql("SELECT version FROM hermes_schema"),
        LATEST_PG_SCHEMA.to_string()
    );
    assert_eq!(db.open().list_sessions(10).unwrap().len(), 6);
}

/// A database of the first PostgreSQL schema (no cache counts, models or
/// reasoning details per message) is migrated in place and keeps its data.
#[test]
fn postgres_a_version_1_database_is_migrated_and_keeps_its_data() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap();
    let old = [user("from version one", 1), assistant("still here", 2)];
    store.append_messages(&s.id, &old).unwrap();
    drop(store);
    db.psql(
        "ALTER TABLE messages DROP COLUMN cached_tokens, DROP COLUMN cache_write_tokens, \
         DROP COLUMN model, DROP COLUMN reasoning_details, DROP COLUMN attachments; \
         DROP TABLE cron_runs, cron_jobs; \
         UPDATE hermes_schema SET version = 1",
    );
    let mut store = db.open();
    assert_eq!(
        db.psql("SELECT version FROM hermes_schema"),
        LATEST_PG_SCHEMA.to_string()
    );
    assert_eq!(store.load_transcript(&s.id).unwrap(), old);
    let mut newer = assistant("with a model", 3);
    newer.meta.model = Some("claude".into());
    newer.meta.reasoning_details = Some("[]".into());
    store.append_messages(&s.id, &[newer.clone()]).unwrap();
    assert_eq!(store.load_transcript(&s.id).unwrap()[2], newer);
    assert_eq!(store.search("version", 10).unwrap().len(), 1);
}

#[test]
fn postgres_connection_errors_are_clear_and_mask_the_password() {
    hermes_tests::require!(Postgres);
    let server = hermes_tests::postgres::server();
    let url = format!(
        "postgresql://nobody:s3cret@/hermes_no_such_db?host={}",
        server.socket_dir.display()
    );
    let err = Store::open_url(&url).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    assert!(text.contains("nobody:***@"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    for bad in [
        "postgresql://h:notaport/db",
        "mysql://h/db",
        "/var/lib/state.db",
    ] {
        let err = Store::open_url(bad).unwrap_err();
        assert!(matches!(err, StoreError::BadUrl(_)), "{bad}: {err:?}");
    }
}

/// The URL boxes use to reach a database server elsewhere: user, password,
/// host and port over TCP. The test server listens on its unix socket only,
/// so a forwarder on 127.0.0.1 stands in for the network.
#[test]
fn postgres_a_tcp_url_with_user_password_host_and_port_reaches_the_server() {
    hermes_tests::require!(Postgres);
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;

    let db = Db::new(BackendKind::Postgres);
    let server = hermes_tests::postgres::server();
    let socket = server.socket_dir.join(".s.PGSQL.5432");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let unix = UnixStream::connect(&socket).unwrap();
            let (mut tcp_in, mut unix_out) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut tcp_in, &mut unix_out));
            let (mut unix_in, mut tcp_out) = (unix, tcp);
            std::thread::spawn(move || std::io::copy(&mut unix_in, &mut tcp_out));
        }
    });
    let name = db.psql("SELECT current_database()");
    let url = format!(
        "postgresql://{}:s3cret-pw@127.0.0.1:{port}/{name}",
        server.user
    );
    let mut store = Store::open_url(&url).unwrap();
    let s = store.create_session(&NewSession::default()).unwrap();
    store
        .append_messages(&s.id, &[user("over tcp", 1)])
        .unwrap();
    assert_eq!(db.open().load_transcript(&s.id).unwrap().len(), 1);
    assert!(!format!("{store:?}").contains("s3cret-pw"));
}

#[test]
fn postgres_unix_socket_urls_in_both_spellings_reach_the_server() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let server = hermes_tests::postgres::server();
    let name = db.psql("SELECT current_database()");
    let encoded: String = server.socket_dir.display().to_string().replace('/', "%2F");
    for url in [
        format!("postgresql://{encoded}/{name}?user={}", server.user),
        format!(
            "postgres:///{name}?host={}&user={}",
            server.socket_dir.display(),
            server.user
        ),
    ] {
        let mut store = Store::open_url(&url).unwrap();
        store.kv_set("reached", &url).unwrap();
    }
    assert_eq!(
        db.psql("SELECT count(*) FROM kv WHERE key = 'reached'"),
        "1"
    );
}
