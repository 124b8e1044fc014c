//! `KvWrite::AddBelow`, the test-and-add that spending reservations stand
//! on (issue 44): it adds only below its bound, abandons the batch
//! otherwise, and of many connections reserving at once no more succeed
//! than the bound allows.

use std::sync::{Arc, Barrier};

use hermes_runtime::store::KvWrite;

use crate::backends::{self, Db, both};

fn add_below(db: &Db, key: &str, amount: i64, below: i64) -> bool {
    db.open()
        .kv_commit(&[KvWrite::AddBelow { key, amount, below }])
        .unwrap()
}

fn value(db: &Db, key: &str) -> Option<String> {
    db.open().kv_get(key).unwrap()
}

fn add_below_adds_under_its_bound_and_abandons_the_batch_at_it(db: Db) {
    // Absent counts as 0.
    assert!(add_below(&db, "acct", 600, 1000));
    assert!(add_below(&db, "acct", 600, 1000), "600 < 1000: added");
    assert_eq!(value(&db, "acct").as_deref(), Some("1200"));
    // At or over the bound: the whole batch is abandoned.
    let mut store = db.open();
    let committed = store
        .kv_commit(&[
            KvWrite::Set {
                key: "other",
                value: "x",
            },
            KvWrite::AddBelow {
                key: "acct",
                amount: 1,
                below: 1200,
            },
        ])
        .unwrap();
    assert!(!committed);
    assert_eq!(value(&db, "acct").as_deref(), Some("1200"));
    assert_eq!(value(&db, "other"), None, "nothing of the batch written");
    // A bound of 0 or less admits nothing, not even an absent key.
    assert!(!add_below(&db, "fresh", 1, 0));
    assert_eq!(value(&db, "fresh"), None);
}

/// Twelve connections reserve 100 each at once below 550: exactly six
/// (0, 100, …, 500 are below 550) get through, whatever the interleaving.
fn concurrent_reservations_never_pass_the_bound(db: Db) {
    let db = Arc::new(db);
    let start = Arc::new(Barrier::new(12));
    let threads: Vec<_> = (0..12)
        .map(|_| {
            let (db, start) = (Arc::clone(&db), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut store = db.open();
                start.wait();
                store
                    .kv_commit(&[KvWrite::AddBelow {
                        key: "acct",
                        amount: 100,
                        below: 550,
                    }])
                    .unwrap()
            })
        })
        .collect();
    let won = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|ok| *ok)
        .count();
    assert_eq!(won, 6);
    assert_eq!(value(&db, "acct").as_deref(), Some("600"));
}

both!(
    add_below_adds_under_its_bound_and_abandons_the_batch_at_it,
    concurrent_reservations_never_pass_the_bound,
);
