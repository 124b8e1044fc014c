//! The appending child of `tests/store_durability.rs` (SPEC E3), as a
//! program of its own so that it can be cross-built and run under qemu-user
//! while the test checks the database on the host (`.ci/cross`). The test
//! also runs this code in-process as its default child.
//!
//! It appends batches of 1–3 messages to the session in
//! `HERMES_STORE_DURABILITY_SESSION` of the database at
//! `HERMES_STORE_DURABILITY_DB`, printing `ACK <round> <batch> <size>` only
//! after each batch's transaction committed (`KV <round> <batch>` after a
//! key-value write), until it is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::Store;

pub const CHILD_DB: &str = "HERMES_STORE_DURABILITY_DB";
pub const CHILD_SESSION: &str = "HERMES_STORE_DURABILITY_SESSION";
pub const CHILD_ROUND: &str = "HERMES_STORE_DURABILITY_ROUND";
/// The child stops by itself after this many batches if nobody kills it.
const CHILD_MAX_BATCHES: u32 = 20_000;

pub fn main() {
    let db = std::env::var(CHILD_DB).unwrap_or_else(|_| panic!("{CHILD_DB} is not set"));
    child(Path::new(&db));
}

/// Child mode: append batches forever (until killed), acknowledging each
/// one on stdout only after its transaction committed.
fn child(db: &Path) {
    let session = std::env::var(CHILD_SESSION).unwrap();
    let round: u32 = std::env::var(CHILD_ROUND).unwrap().parse().unwrap();
    let mut store = Store::open(db).unwrap();
    let mut out = std::io::stdout().lock();
    for batch in 0..CHILD_MAX_BATCHES {
        let n = 1 + batch % 3;
        let entries: Vec<LedgerEntry> = (1..=n)
            .map(|k| {
                let text = format!("r{round} b{batch} {k}/{n} durable");
                let message = if k == 1 {
                    Message::user(text)
                } else {
                    Message::assistant(text)
                };
                LedgerEntry::at(message, u64::from(batch))
            })
            .collect();
        store.append_messages(&session, &entries).unwrap();
        writeln!(out, "ACK {round} {batch} {n}").unwrap();
        out.flush().unwrap();
        // Searches index what was appended since the last one (a write
        // transaction of its own), so some kills land in the middle of that.
        if batch % 7 == 3 {
            assert!(!store.search("durable", 1).unwrap().is_empty());
        }
        if batch % 5 == 4 {
            store
                .kv_set("durability.last", &format!("{round} {batch}"))
                .unwrap();
            writeln!(out, "KV {round} {batch}").unwrap();
            out.flush().unwrap();
        }
    }
}
