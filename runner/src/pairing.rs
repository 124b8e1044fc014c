//! DM pairing (SPEC Y4): how a stranger gets in without a restart.
//!
//! A DM from a user who is on no allow-list gets one reply with a pairing
//! code and no model call; the operator approves it with
//! `hermes pairing approve PLATFORM CODE`. Approved users live in the store
//! and are merged with the configured allow-lists at every check, so an
//! approval made by another process (the CLI) counts at the next message.
//!
//! Everything lives in the store's key-value table, which both backends
//! (SQLite, PostgreSQL) provide behind one trait:
//! - `pairing:pending:{platform}:{user}` — the user's code (at most one at a
//!   time), when it was issued, and when the user was last answered;
//! - `pairing:approved:{platform}:{user}` — who was let in, and when;
//! - `pairing:failed:{platform}` — the times of failed approvals (lockout).
//!
//! Approval consumes the pending row in the same transaction that writes the
//! approved one, so a code is used at most once even when two approvals
//! race. Codes are compared in constant time and logged only as their first
//! two characters.

use std::time::Duration;

use hermes_runtime::store::{KvWrite, Store, StoreError};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// The characters of a code: uppercase letters and digits without the
/// look-alikes 0/O and 1/I (32 symbols, so 8 of them carry 40 bits).
pub const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// How long a code is.
pub const CODE_LEN: usize = 8;
/// How long a code stays valid.
pub const CODE_TTL: Duration = Duration::from_secs(3600);
/// A stranger is answered at most this often per [`ANSWER_WINDOW`].
pub const ANSWERS_PER_WINDOW: usize = 2;
/// The window of [`ANSWERS_PER_WINDOW`].
pub const ANSWER_WINDOW: Duration = Duration::from_secs(3600);
/// After this many failed approvals within [`LOCKOUT`] on one platform,
/// approvals on it are refused until the oldest failure ages out.
pub const MAX_FAILED_APPROVALS: usize = 5;
/// See [`MAX_FAILED_APPROVALS`].
pub const LOCKOUT: Duration = Duration::from_secs(3600);
/// At most this many codes wait per platform (a flood of strangers cannot
/// fill the store); further strangers get no code until some expire.
pub const MAX_PENDING: usize = 200;

const PENDING: &str = "pairing:pending:";
const APPROVED: &str = "pairing:approved:";
const FAILED: &str = "pairing:failed:";

/// Why a pairing operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    /// The store could not be read or written.
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    /// A stored pairing row is not what this version writes.
    #[error("a stored pairing entry ({0}) is unreadable: {1}")]
    Corrupt(String, serde_json::Error),
    /// No pending code matches (wrong, or already used).
    #[error("no pending pairing code {0} on {1} (wrong, or already used)")]
    NoSuchCode(String, String),
    /// The code matched, but more than an hour after it was issued.
    #[error("pairing code {0} on {1} has expired; the user gets a new one by writing to the bot")]
    Expired(String, String),
    /// Too many failed approvals lately.
    #[error(
        "too many failed approvals on {platform}; try again in {minutes} min (or `hermes pairing clear-pending`)"
    )]
    LockedOut {
        /// The platform.
        platform: String,
        /// Minutes until the oldest counted failure ages out.
        minutes: u64,
    },
}

/// A stranger's code as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PendingRow {
    code: String,
    #[serde(default)]
    name: Option<String>,
    issued_ms: u64,
    /// When the user was answered (within the last window).
    answered_ms: Vec<u64>,
}

/// An approved user as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ApprovedRow {
    #[serde(default)]
    name: Option<String>,
    approved_ms: u64,
}

/// A code waiting for approval, for `hermes pairing list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCode {
    /// The platform.
    pub platform: String,
    /// The stranger's user id.
    pub user_id: String,
    /// Their display name, if the platform gave one.
    pub name: Option<String>,
    /// The code (shown to the operator, who approves it).
    pub code: String,
    /// When it was issued (ms since the epoch).
    pub issued_ms: u64,
}

/// A user let in by pairing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovedUser {
    /// The platform.
    pub platform: String,
    /// The user id.
    pub user_id: String,
    /// Their display name at pairing time, if known.
    pub name: Option<String>,
    /// When they were approved (ms since the epoch).
    pub approved_ms: u64,
}

/// What a stranger's DM earns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Reply with this code (new, or the user's still valid one).
    Code(String),
    /// Stay silent: answered often enough this hour, or too many codes wait.
    Silent,
}

/// A new random code.
pub fn new_code() -> String {
    let mut rng = rand::rng();
    (0..CODE_LEN)
        .map(|_| char::from(CODE_ALPHABET[rng.random_range(0..CODE_ALPHABET.len())]))
        .collect()
}

/// A code as it may appear in a log line: its first two characters.
pub fn redacted(code: &str) -> String {
    let head: String = code.chars().take(2).collect();
    format!("{head}******")
}

/// The reply a stranger gets with their code.
pub fn code_text(platform: &str, user_id: &str, code: &str) -> String {
    format!(
        "Hi! I don't know you yet, so I can't answer. Your pairing code is {code} (valid for one hour; your user id is {user_id}). Ask the bot's operator to run:\nhermes pairing approve {platform} {code}"
    )
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn decode<T: for<'de> Deserialize<'de>>(key: &str, value: &str) -> Result<T, PairingError> {
    serde_json::from_str(value).map_err(|e| PairingError::Corrupt(key.to_owned(), e))
}

fn encode<T: Serialize>(row: &T) -> String {
    // Plain structs of strings and numbers always serialise.
    serde_json::to_string(row).unwrap_or_default()
}

fn pending_key(platform: &str, user_id: &str) -> String {
    format!("{PENDING}{platform}:{user_id}")
}

fn approved_key(platform: &str, user_id: &str) -> String {
    format!("{APPROVED}{platform}:{user_id}")
}

/// Whether `user_id` on `platform` was approved (and not revoked).
pub fn is_approved(store: &Store, platform: &str, user_id: &str) -> Result<bool, StoreError> {
    Ok(store.kv_get(&approved_key(platform, user_id))?.is_some())
}

/// Decides what a stranger's DM gets, recording it: the user's valid code
/// again, or a new one (at most one code per user at a time), or silence
/// once [`ANSWERS_PER_WINDOW`] answers went out within the window.
pub fn answer_stranger(
    store: &mut Store,
    platform: &str,
    user_id: &str,
    name: Option<&str>,
    now_ms: u64,
) -> Result<Answer, PairingError> {
    let key = pending_key(platform, user_id);
    let existing = match store.kv_get(&key)? {
        Some(v) => Some(decode::<PendingRow>(&key, &v)?),
        None => None,
    };
    let window = ms(ANSWER_WINDOW);
    let mut row = match existing {
        Some(mut row) => {
            row.answered_ms
                .retain(|t| now_ms.saturating_sub(*t) < window);
            if row.answered_ms.len() >= ANSWERS_PER_WINDOW {
                return Ok(Answer::Silent);
            }
            if now_ms.saturating_sub(row.issued_ms) >= ms(CODE_TTL) {
                row.code = new_code();
                row.issued_ms = now_ms;
            }
            row
        }
        None => {
            let waiting = store
                .kv_scan(&format!("{PENDING}{platform}:"))?
                .iter()
                .filter(|(k, v)| {
                    decode::<PendingRow>(k, v)
                        .is_ok_and(|r| now_ms.saturating_sub(r.issued_ms) < ms(CODE_TTL))
                })
                .count();
            if waiting >= MAX_PENDING {
                tracing::warn!(
                    platform,
                    "{MAX_PENDING} pairing codes are waiting; no new code issued"
                );
                return Ok(Answer::Silent);
            }
            PendingRow {
                code: new_code(),
                name: None,
                issued_ms: now_ms,
                answered_ms: Vec::new(),
            }
        }
    };
    if name.is_some() {
        row.name = name.map(str::to_owned);
    }
    row.answered_ms.push(now_ms);
    store.kv_set(&key, &encode(&row))?;
    tracing::info!(platform, user = user_id, code = %redacted(&row.code), "pairing code sent to a stranger");
    Ok(Answer::Code(row.code))
}

/// Failed approvals on `platform` within [`LOCKOUT`] of `now_ms`.
fn recent_failures(store: &Store, platform: &str, now_ms: u64) -> Result<Vec<u64>, PairingError> {
    let key = format!("{FAILED}{platform}");
    let mut times: Vec<u64> = match store.kv_get(&key)? {
        Some(v) => decode(&key, &v)?,
        None => Vec::new(),
    };
    times.retain(|t| now_ms.saturating_sub(*t) < ms(LOCKOUT));
    Ok(times)
}

fn record_failure(store: &mut Store, platform: &str, now_ms: u64) -> Result<(), PairingError> {
    let mut times = recent_failures(store, platform, now_ms)?;
    times.push(now_ms);
    store.kv_set(&format!("{FAILED}{platform}"), &encode(&times))?;
    Ok(())
}

/// Approves the user whose pending code on `platform` is `code` (case and
/// surrounding blanks ignored). Fails on a wrong, used or expired code
/// (each counted towards the lockout) and while locked out.
pub fn approve(
    store: &mut Store,
    platform: &str,
    code: &str,
    now_ms: u64,
) -> Result<ApprovedUser, PairingError> {
    let failures = recent_failures(store, platform, now_ms)?;
    if failures.len() >= MAX_FAILED_APPROVALS {
        let oldest = failures.iter().copied().min().unwrap_or(now_ms);
        let left = ms(LOCKOUT).saturating_sub(now_ms.saturating_sub(oldest));
        return Err(PairingError::LockedOut {
            platform: platform.to_owned(),
            minutes: left.div_ceil(60_000),
        });
    }
    let wanted = code.trim().to_ascii_uppercase();
    let prefix = format!("{PENDING}{platform}:");
    let mut found = None;
    // Every row is compared, in constant time, whatever matched before.
    for (key, value) in store.kv_scan(&prefix)? {
        let row: PendingRow = decode(&key, &value)?;
        let same: bool = row.code.as_bytes().ct_eq(wanted.as_bytes()).into();
        if same {
            found = Some((key, row));
        }
    }
    let shown = redacted(&wanted);
    let Some((key, row)) = found else {
        record_failure(store, platform, now_ms)?;
        tracing::warn!(platform, code = %shown, "pairing approval with an unknown code");
        return Err(PairingError::NoSuchCode(shown, platform.to_owned()));
    };
    if now_ms.saturating_sub(row.issued_ms) >= ms(CODE_TTL) {
        store.kv_delete(&[&key])?;
        record_failure(store, platform, now_ms)?;
        return Err(PairingError::Expired(shown, platform.to_owned()));
    }
    let user_id = key[prefix.len()..].to_owned();
    let approved = ApprovedRow {
        name: row.name.clone(),
        approved_ms: now_ms,
    };
    let value = encode(&approved);
    let approved_key = approved_key(platform, &user_id);
    let writes = [
        KvWrite::Consume(&key),
        KvWrite::Set {
            key: &approved_key,
            value: &value,
        },
        KvWrite::Delete(&format!("{FAILED}{platform}")),
    ];
    if !store.kv_commit(&writes)? {
        // Another approval consumed it between the scan and now.
        record_failure(store, platform, now_ms)?;
        return Err(PairingError::NoSuchCode(shown, platform.to_owned()));
    }
    tracing::info!(platform, user = %user_id, "pairing approved");
    Ok(ApprovedUser {
        platform: platform.to_owned(),
        user_id,
        name: row.name,
        approved_ms: now_ms,
    })
}

/// Removes an approval; `false` when the user was not approved.
pub fn revoke(store: &mut Store, platform: &str, user_id: &str) -> Result<bool, PairingError> {
    let key = approved_key(platform, user_id);
    if store.kv_get(&key)?.is_none() {
        return Ok(false);
    }
    store.kv_delete(&[&key])?;
    tracing::info!(platform, user = user_id, "pairing revoked");
    Ok(true)
}

/// Drops every pending code (and the failure counts); returns how many
/// codes were dropped.
pub fn clear_pending(store: &mut Store) -> Result<usize, PairingError> {
    let rows = store.kv_scan(PENDING)?;
    let failed = store.kv_scan(FAILED)?;
    let keys: Vec<&str> = rows
        .iter()
        .chain(failed.iter())
        .map(|(k, _)| k.as_str())
        .collect();
    store.kv_delete(&keys)?;
    Ok(rows.len())
}

/// Codes still valid at `now_ms`, oldest first.
pub fn pending(store: &Store, now_ms: u64) -> Result<Vec<PendingCode>, PairingError> {
    let mut out = Vec::new();
    for (key, value) in store.kv_scan(PENDING)? {
        let row: PendingRow = decode(&key, &value)?;
        if now_ms.saturating_sub(row.issued_ms) >= ms(CODE_TTL) {
            continue;
        }
        let Some((platform, user_id)) = key[PENDING.len()..].split_once(':') else {
            continue;
        };
        out.push(PendingCode {
            platform: platform.to_owned(),
            user_id: user_id.to_owned(),
            name: row.name,
            code: row.code,
            issued_ms: row.issued_ms,
        });
    }
    out.sort_by_key(|p| p.issued_ms);
    Ok(out)
}

/// Every approved user, by platform and id.
pub fn approved(store: &Store) -> Result<Vec<ApprovedUser>, PairingError> {
    let mut out = Vec::new();
    for (key, value) in store.kv_scan(APPROVED)? {
        let row: ApprovedRow = decode(&key, &value)?;
        let Some((platform, user_id)) = key[APPROVED.len()..].split_once(':') else {
            continue;
        };
        out.push(ApprovedUser {
            platform: platform.to_owned(),
            user_id: user_id.to_owned(),
            name: row.name,
            approved_ms: row.approved_ms,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HOUR: u64 = 3_600_000;

    #[test]
    fn codes_use_the_unambiguous_alphabet() {
        for _ in 0..200 {
            let code = new_code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(code.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
        }
        assert_eq!(redacted("ABCDEFGH"), "AB******");
    }

    #[test]
    fn one_code_per_user_two_answers_per_hour() {
        let mut store = Store::open_in_memory().unwrap();
        let Answer::Code(first) = answer_stranger(&mut store, "t", "9", Some("Ann"), 0).unwrap()
        else {
            panic!("no code")
        };
        assert_eq!(
            answer_stranger(&mut store, "t", "9", None, 1000).unwrap(),
            Answer::Code(first.clone()),
            "the same code again"
        );
        for t in [2000, 3000, 4000, 5000] {
            assert_eq!(
                answer_stranger(&mut store, "t", "9", None, t).unwrap(),
                Answer::Silent
            );
        }
        // An hour later: a new code (the old one expired).
        let Answer::Code(second) = answer_stranger(&mut store, "t", "9", None, HOUR + 1).unwrap()
        else {
            panic!("no code")
        };
        assert_ne!(first, second);
        let listed = pending(&store, HOUR + 2).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].code, second);
        assert_eq!(listed[0].name.as_deref(), Some("Ann"));
    }

    #[test]
    fn approve_once_then_revoke() {
        let mut store = Store::open_in_memory().unwrap();
        let Answer::Code(code) = answer_stranger(&mut store, "t", "9", None, 0).unwrap() else {
            panic!("no code")
        };
        assert!(matches!(
            approve(&mut store, "t", "ZZZZZZZZ", 10),
            Err(PairingError::NoSuchCode(..))
        ));
        assert!(matches!(
            approve(&mut store, "other", &code, 10),
            Err(PairingError::NoSuchCode(..))
        ));
        let user = approve(&mut store, "t", &code.to_lowercase(), 20).unwrap();
        assert_eq!(user.user_id, "9");
        assert!(is_approved(&store, "t", "9").unwrap());
        assert!(matches!(
            approve(&mut store, "t", &code, 30),
            Err(PairingError::NoSuchCode(..))
        ));
        assert_eq!(approved(&store).unwrap().len(), 1);
        assert!(revoke(&mut store, "t", "9").unwrap());
        assert!(!revoke(&mut store, "t", "9").unwrap());
        assert!(!is_approved(&store, "t", "9").unwrap());
    }

    #[test]
    fn expired_codes_fail_and_failures_lock_out() {
        let mut store = Store::open_in_memory().unwrap();
        let Answer::Code(code) = answer_stranger(&mut store, "t", "9", None, 0).unwrap() else {
            panic!("no code")
        };
        assert!(matches!(
            approve(&mut store, "t", &code, HOUR),
            Err(PairingError::Expired(..))
        ));
        let Answer::Code(code) = answer_stranger(&mut store, "t", "8", None, HOUR).unwrap() else {
            panic!("no code")
        };
        for i in 0..4 {
            assert!(approve(&mut store, "t", "WRONG", HOUR + i).is_err());
        }
        // Five failures (the expired one counts): even the right code waits.
        assert!(matches!(
            approve(&mut store, "t", &code, HOUR + 10),
            Err(PairingError::LockedOut { .. })
        ));
        clear_pending(&mut store).unwrap();
        assert!(pending(&store, HOUR + 11).unwrap().is_empty());
    }
}
