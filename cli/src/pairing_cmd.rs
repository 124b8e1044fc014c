//! `hermes pairing`: let strangers in (SPEC Y4). A stranger's DM got a code;
//! the operator approves it here, while the gateway runs (it reads the
//! approved users from the store at every message: no restart).

use hermes_core::Clock;
use hermes_gateway::pairing::{self, PairingError};
use hermes_runtime::config::Settings;
use hermes_runtime::store::{BackendKind, SystemClock};

use crate::app::{CliError, open_store};
use crate::args::PairingCommand;
use crate::sessions::ago;

fn failed(e: PairingError) -> CliError {
    CliError::Runtime(e.to_string())
}

/// Runs one `hermes pairing` subcommand. A wrong, expired or used code, an
/// unknown user to revoke, or a lockout: exit 1.
pub fn run(settings: &Settings, command: PairingCommand) -> Result<i32, CliError> {
    let mut store = open_store(settings)?;
    let now = SystemClock.now_ms();
    match command {
        PairingCommand::List => {
            let waiting = pairing::pending(&store, now).map_err(failed)?;
            let approved = pairing::approved(&store).map_err(failed)?;
            if waiting.is_empty() {
                println!("No pairing codes are waiting.");
            } else {
                println!("Waiting for approval:");
                for p in &waiting {
                    println!(
                        "  {}  {} {}{}  (issued {})",
                        p.code,
                        p.platform,
                        p.user_id,
                        p.name
                            .as_deref()
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default(),
                        ago(p.issued_ms)
                    );
                }
            }
            print_approved(&approved);
            Ok(0)
        }
        PairingCommand::Approve { platform, code } => {
            let user = pairing::approve(&mut store, &platform, &code, now).map_err(failed)?;
            println!(
                "Approved {} user {}{}: they can talk to the bot now.",
                user.platform,
                user.user_id,
                user.name.map(|n| format!(" ({n})")).unwrap_or_default()
            );
            Ok(0)
        }
        PairingCommand::Revoke { platform, user_id } => {
            if pairing::revoke(&mut store, &platform, &user_id).map_err(failed)? {
                println!("Revoked {platform} user {user_id}.");
                Ok(0)
            } else {
                Err(CliError::Runtime(format!(
                    "{platform} user {user_id} was not approved by pairing (users on a configured allow-list are removed there)"
                )))
            }
        }
        PairingCommand::ClearPending => {
            let n = pairing::clear_pending(&mut store).map_err(failed)?;
            println!("Dropped {n} pending pairing code(s).");
            Ok(0)
        }
    }
}

/// Prints the users approved by pairing (also for `gateway run --check`).
pub fn print_approved(approved: &[pairing::ApprovedUser]) {
    if approved.is_empty() {
        println!("No users approved by pairing.");
        return;
    }
    println!("Approved by pairing (merged with the allow-lists):");
    for u in approved {
        println!(
            "  {} {}{}  (approved {})",
            u.platform,
            u.user_id,
            u.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            ago(u.approved_ms)
        );
    }
}

/// `gateway run --check`: the approved users, when the store can be read.
pub fn check_summary(settings: &Settings) {
    // --check creates nothing: no database yet means nobody approved.
    let target = settings.store_target();
    if target.kind() == BackendKind::Sqlite && !settings.state_db().exists() {
        print_approved(&[]);
        return;
    }
    match open_store(settings).map(|s| pairing::approved(&s)) {
        Ok(Ok(approved)) => print_approved(&approved),
        Ok(Err(e)) => println!("  warning: cannot read the approved users: {e}"),
        Err(e) => println!("  warning: cannot read the approved users: {}", e.message()),
    }
}
