//! SPEC E3: "a message counts as stored only after its transaction commits".
//!
//! The test re-executes its own binary as a child process (selected by an
//! environment variable) that appends batches to a real database file and
//! prints one `ACK` line after each commit. The parent kills the child with
//! SIGKILL at a random moment, then checks that the database opens cleanly,
//! passes `PRAGMA integrity_check` and the FTS5 integrity check, holds every
//! acknowledged batch, and holds no partial batch. Twenty rounds accumulate
//! in the same file, so every round also re-checks what earlier rounds
//! acknowledged. The child also searches now and then, so some kills land
//! in the middle of the full-text index catching up; after each round the
//! index, once caught up, must match the messages exactly.
//!
//! The child's code is `examples/store_append_child.rs`. With
//! `HERMES_STORE_DURABILITY_CHILD="qemu-aarch64-static -L /usr/aarch64-linux-gnu
//! target/aarch64-unknown-linux-gnu/release/examples/store_append_child"` the
//! appends run cross-built under qemu-user while this process checks the file
//! with the host's SQLite (`.ci/cross` does this for each board target, and
//! natively for the x86_64 static build's child).
//!
//! A process kill leaves the kernel's page cache intact, so this proves
//! transactional atomicity and commit-before-acknowledge ordering, not
//! survival of a power cut (that is what `synchronous = FULL` is for).
//!
//! The same rounds run against PostgreSQL (a child killed in the middle of
//! a transaction leaves nothing of it: the server rolls it back), checked
//! through the store and the index consistency check of `backends/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use backends::Db;
use hermes_runtime::store::{BackendKind, StoreTarget};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hermes_runtime::store::NewSession;
use rand::RngExt;

#[path = "../examples/store_append_child.rs"]
mod append_child;

use append_child::{CHILD_DB, CHILD_ROUND, CHILD_SESSION};

/// A command line that runs the child instead of this executable.
const CHILD_COMMAND: &str = "HERMES_STORE_DURABILITY_CHILD";
const ROUNDS: u32 = 20;

#[test]
fn acknowledged_appends_survive_sigkill() {
    if !child_mode() {
        kill_rounds(
            Db::new(BackendKind::Sqlite),
            "store_durability::acknowledged_appends_survive_sigkill",
        );
    }
}

#[test]
fn acknowledged_appends_survive_sigkill_postgres() {
    hermes_tests::require!(Postgres);
    if !child_mode() {
        kill_rounds(
            Db::new(BackendKind::Postgres),
            "store_durability::acknowledged_appends_survive_sigkill_postgres",
        );
    }
}

/// In a child (see the module docs): append until killed. The database is
/// the parent's, so no test database is created here.
fn child_mode() -> bool {
    if std::env::var_os(CHILD_DB).is_none() {
        return false;
    }
    append_child::main();
    true
}

fn kill_rounds(db: Db, test_name: &str) {
    let dir = &db.dir;
    let target = db.target();
    let target_arg = match &target {
        StoreTarget::Sqlite(path) => path.display().to_string(),
        StoreTarget::Postgres(url) => url.clone(),
    };
    let session = db.open().create_session(&NewSession::default()).unwrap().id;
    // By default this test binary is its own child (libtest runs just this
    // test, which sees the child's environment and appends).
    let child_command: Vec<String> = match std::env::var(CHILD_COMMAND) {
        Ok(line) => line.split_whitespace().map(str::to_owned).collect(),
        Err(_) => [std::env::current_exe().unwrap().display().to_string()]
            .into_iter()
            .chain([test_name, "--exact", "--nocapture", "--test-threads=1"].map(String::from))
            .collect(),
    };
    let (program, program_args) = child_command
        .split_first()
        .unwrap_or_else(|| panic!("{CHILD_COMMAND} is empty"));
    let mut rng = rand::rng();
    // (round, batch) -> batch size, for every acknowledged batch so far.
    let mut acked: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let mut kv_acked: Option<(u32, u32)> = None;

    for round in 0..ROUNDS {
        let stderr_path = dir.path().join(format!("child-{round}.stderr"));
        let mut child = Command::new(program)
            .args(program_args)
            .env(CHILD_DB, &target_arg)
            .env(CHILD_SESSION, &session)
            .env(CHILD_ROUND, round.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest prints "test <name> ... " without a newline
                // before running the test, so the first line is prefixed.
                let start = line.find("ACK ").or_else(|| line.find("KV "));
                if let Some(start) = start
                    && tx.send(line[start..].to_owned()).is_err()
                {
                    break;
                }
            }
        });

        let mut lines = Vec::new();
        // One round in four is killed blind (possibly during start-up or
        // the first commit); the others after the first acknowledgement,
        // so most kills land in the middle of a stream of commits.
        if round % 4 != 0 {
            let first = rx.recv_timeout(Duration::from_secs(120));
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            lines.push(first.unwrap_or_else(|e| {
                panic!("round {round}: no ACK ({e}); child stderr:\n{stderr}")
            }));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..80)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        if db.kind == BackendKind::Postgres {
            // The server may still commit the dead child's last batch.
            db.wait_for_other_sessions_to_end();
        }
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        assert!(
            status.code().is_none(),
            "round {round}: child exited by itself ({status}); stderr:\n{stderr}"
        );

        for line in &lines {
            let mut words = line.split_whitespace();
            let tag = words.next().unwrap();
            let r: u32 = words.next().unwrap().parse().unwrap();
            let b: u32 = words.next().unwrap().parse().unwrap();
            assert_eq!(r, round, "{line}");
            match tag {
                "ACK" => {
                    let n: u32 = words.next().unwrap().parse().unwrap();
                    acked.insert((r, b), n);
                }
                "KV" => kv_acked = Some((r, b)),
                _ => unreachable!("{line}"),
            }
        }

        verify(&db, &session, &acked, kv_acked, round);
    }
    assert!(
        acked.len() >= (ROUNDS as usize) * 3 / 4,
        "too few acknowledged batches to prove anything: {}",
        acked.len()
    );
}

fn verify(
    db: &Db,
    session: &str,
    acked: &BTreeMap<(u32, u32), u32>,
    kv_acked: Option<(u32, u32)>,
    round: u32,
) {
    // A plain SQLite connection first: the file must be a sound database
    // after WAL recovery, independent of our code.
    if db.kind == BackendKind::Sqlite {
        let conn = rusqlite::Connection::open(db.path()).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
        conn.execute(
            "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')",
            [],
        )
        .unwrap_or_else(|e| panic!("round {round}: FTS index inconsistent: {e}"));
    }

    let store = db.open();
    let transcript = store.load_transcript(session).unwrap();
    // Catching up after the crash makes the index match the messages
    // exactly: nothing lost, nothing indexed twice.
    store.catch_up_search_index().unwrap();
    db.assert_index_consistent();
    assert_eq!(
        store.search("durable", usize::MAX).unwrap().len(),
        transcript.len(),
        "round {round}: every stored message is found"
    );
    // (round, batch) -> (size, entries seen), in stored order.
    let mut stored: BTreeMap<(u32, u32), (u32, u32)> = BTreeMap::new();
    let mut last_key = None;
    for entry in &transcript {
        let text = entry.message.content().unwrap();
        let mut words = text.split_whitespace();
        let r: u32 = words.next().unwrap()[1..].parse().unwrap();
        let b: u32 = words.next().unwrap()[1..].parse().unwrap();
        let (k, n) = words.next().unwrap().split_once('/').unwrap();
        let (k, n): (u32, u32) = (k.parse().unwrap(), n.parse().unwrap());
        let key = (r, b);
        assert!(
            last_key <= Some(key),
            "round {round}: out of order at {text}"
        );
        last_key = Some(key);
        let slot = stored.entry(key).or_insert((n, 0));
        slot.1 += 1;
        assert_eq!(
            slot.1, k,
            "round {round}: batch {key:?} entries out of order"
        );
    }
    for (key, (n, seen)) in &stored {
        assert_eq!(n, seen, "round {round}: partial batch {key:?} stored");
    }
    for (key, n) in acked {
        assert_eq!(
            stored.get(key).map(|s| s.0),
            Some(*n),
            "round {round}: acknowledged batch {key:?} is missing"
        );
    }
    // At most the one batch that committed but was not yet acknowledged
    // when the kill came, per round.
    let unacked = stored.keys().filter(|k| !acked.contains_key(k)).count();
    assert!(
        unacked <= (round as usize) + 1,
        "round {round}: {unacked} batches stored without acknowledgement"
    );

    if let Some((r, b)) = kv_acked {
        let value = store.kv_get("durability.last").unwrap().unwrap();
        let (vr, vb) = value.split_once(' ').unwrap();
        let (vr, vb): (u32, u32) = (vr.parse().unwrap(), vb.parse().unwrap());
        assert!(
            (vr, vb) >= (r, b),
            "round {round}: kv went back from {r} {b} to {value}"
        );
    }
}
