//! `hermes doctor`'s database section: can the store be opened and read,
//! which backend, and — for gateways sharing it — who holds which lease.

use hermes_runtime::config::Settings;
use hermes_runtime::store::{BackendKind, LeaseRecord, Store};

use crate::app::{open_store, runtime};

/// Prints the section; returns the number of problems found.
pub fn report(settings: &Settings) -> usize {
    let target = settings.store_target();
    let store = match open_store(settings) {
        Ok(store) => store,
        Err(e) => {
            println!("✗ database {}: {}", target.shown(), e.message());
            println!("    → {}", fix(target.kind()));
            return 1;
        }
    };
    match store.list_sessions(1_000_000).map_err(runtime) {
        Ok(list) => println!(
            "✓ database {} ({}, {} sessions)",
            target.shown(),
            target.kind().as_str(),
            list.len()
        ),
        Err(e) => {
            println!("✗ database {}: {}", target.shown(), e.message());
            println!("    → {}", fix(target.kind()));
            return 1;
        }
    }
    match store.leases("") {
        Ok(leases) => print_leases(&store, &leases),
        Err(e) => {
            println!("✗ leases unreadable: {e}");
            println!("    → {}", fix(target.kind()));
            return 1;
        }
    }
    0
}

fn fix(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Sqlite => {
            "check that HERMES_HOME is writable; move a damaged state.db aside to start fresh"
        }
        BackendKind::Postgres => {
            "check HERMES_DATABASE_URL / [store] url (user, password, host, database), that the \
             server runs and accepts connections from this machine, and that the user may create \
             tables in the database"
        }
    }
}

/// One line per bot lease (who polls which bot) and per running turn.
fn print_leases(store: &Store, leases: &[LeaseRecord]) {
    let bots: Vec<&LeaseRecord> = leases
        .iter()
        .filter(|l| l.name.starts_with("bot:"))
        .collect();
    let turns: Vec<&LeaseRecord> = leases
        .iter()
        .filter(|l| l.name.starts_with("session:") && l.is_live())
        .collect();
    if bots.is_empty() {
        println!("· no gateway has served a bot from this database yet");
    }
    for lease in bots {
        println!("· {}", describe(lease));
    }
    if !turns.is_empty() {
        println!(
            "· {} turn(s) running{}",
            turns.len(),
            if store.kind() == BackendKind::Postgres {
                " across the gateways"
            } else {
                ""
            }
        );
        for lease in turns.iter().take(20) {
            println!("    {}", describe(lease));
        }
    }
}

/// `bot:telegram:123 held by box-a:4242:1f2e (epoch 7, renewed 1.2 s ago, lapses in 8.8 s)`.
pub fn describe(lease: &LeaseRecord) -> String {
    let secs = |ms: i128| format!("{:.1} s", ms as f64 / 1000.0);
    let now = i128::from(lease.now_ms);
    match &lease.owner {
        Some(owner) if lease.is_live() => format!(
            "{} held by {owner} (epoch {}, renewed {} ago, lapses in {})",
            lease.name,
            lease.epoch,
            secs(now - i128::from(lease.renewed_at_ms)),
            secs(i128::from(lease.expires_at_ms) - now)
        ),
        Some(owner) => format!(
            "{} lapsed: {owner} stopped renewing it {} ago (epoch {}); the next gateway takes it over",
            lease.name,
            secs(now - i128::from(lease.renewed_at_ms)),
            lease.epoch
        ),
        None => format!("{} free (released, epoch {})", lease.name, lease.epoch),
    }
}
