//! The status file (`$HERMES_HOME/gateway.status.json`) and what
//! `hermes gateway status` makes of it. The gateway looks every
//! [`STATUS_EVERY`] and rewrites the file (atomically: a temporary file
//! renamed) when something changed, and at least every [`HEARTBEAT`] —
//! not every few seconds regardless: a board's SD card wears — and once
//! more, marked stopped, when it stops. It holds states and counters only: no
//! chat ids, no user ids, no secrets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::metrics::{Ops, PlatformOps, now_unix};
use crate::lock::InstanceLock;

/// How often a running gateway looks whether its status changed.
pub const STATUS_EVERY: Duration = Duration::from_secs(2);

/// The longest a running gateway leaves its status file unwritten.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// A status file older than this means its gateway is gone (where no lock
/// says so: gateways on PostgreSQL take none).
const STALE_AFTER: Duration = Duration::from_secs(3 * HEARTBEAT.as_secs());

/// What a gateway writes about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFile {
    /// The gateway's process id.
    pub pid: u32,
    /// When it started (Unix seconds).
    pub started_at: u64,
    /// When this file was written.
    pub updated_at: u64,
    /// When it stopped, if it did.
    pub stopped_at: Option<u64>,
    /// Each platform's state and counters.
    pub platforms: BTreeMap<String, PlatformOps>,
    /// The last message from an allowed user (0: none yet).
    pub last_message_in: u64,
    /// The last reply sent (0: none yet).
    pub last_reply_out: u64,
    /// The scheduler's last tick (0: none).
    pub scheduler_tick: u64,
    /// Turns answered.
    pub turns_answered: u64,
    /// Turns that ended without an answer.
    pub turns_failed: u64,
    /// Where `/healthz` and `/metrics` are served, if anywhere.
    pub metrics_addr: Option<String>,
}

/// The status file of `home`.
pub fn path(home: &Path) -> PathBuf {
    home.join("gateway.status.json")
}

impl StatusFile {
    /// What `ops` says now.
    pub fn from_ops(ops: &Ops, metrics_addr: Option<String>) -> Self {
        let (last_message_in, last_reply_out, scheduler_tick) = ops.last_activity();
        let (turns_answered, turns_failed) = ops.turns();
        StatusFile {
            pid: std::process::id(),
            started_at: ops.started_at(),
            updated_at: now_unix(),
            stopped_at: None,
            platforms: ops.platform_snapshot(),
            last_message_in,
            last_reply_out,
            scheduler_tick,
            turns_answered,
            turns_failed,
            metrics_addr,
        }
    }

    /// Writes it to `home` atomically.
    pub fn write(&self, home: &Path) -> std::io::Result<()> {
        let target = path(home);
        let tmp = home.join(format!(".gateway.status.{}.tmp", std::process::id()));
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, &target)
    }
}

/// Keeps `home`'s status file current until `stop` is set; then writes it
/// once more, marked stopped.
pub async fn keep_written(
    home: PathBuf,
    metrics_addr: Option<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let write = |status: &StatusFile| {
        if let Err(e) = status.write(&home) {
            tracing::warn!(error = %e, home = %home.display(), "cannot write the gateway's status file");
        }
    };
    let mut last: Option<StatusFile> = None;
    loop {
        let now = StatusFile::from_ops(super::ops(), metrics_addr.clone());
        let due = last.as_ref().is_none_or(|l| {
            l.updated_at + HEARTBEAT.as_secs() <= now.updated_at
                || StatusFile {
                    updated_at: now.updated_at,
                    ..l.clone()
                } != now
        });
        if due {
            write(&now);
            last = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(STATUS_EVERY) => {}
            _ = stop.changed() => break,
        }
    }
    let mut stopped = StatusFile::from_ops(super::ops(), metrics_addr.clone());
    stopped.stopped_at = Some(stopped.updated_at);
    write(&stopped);
}

/// What `hermes gateway status` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatewayStatus {
    /// A gateway is running for this home; its latest status, if it wrote
    /// one yet.
    Running {
        /// The process id.
        pid: Option<u32>,
        /// What it last wrote.
        status: Option<StatusFile>,
    },
    /// No gateway runs for this home; what the last one wrote, if any.
    NotRunning(Option<StatusFile>),
}

impl GatewayStatus {
    /// The exit code: 0 running and every platform connected (or standing
    /// by), 1 running with a platform that is not, 3 not running (the LSB
    /// code for "program is not running").
    pub fn exit_code(&self) -> i32 {
        match self {
            GatewayStatus::Running {
                status: Some(s), ..
            } if s.platforms.values().all(|p| p.state.healthy()) => 0,
            GatewayStatus::Running { .. } => 1,
            GatewayStatus::NotRunning(_) => 3,
        }
    }
}

/// Reads the status of the gateway of `home`. With a SQLite store the
/// home's lock says whether one runs; with PostgreSQL (no lock) a status
/// file written in the last few seconds does.
pub fn read(home: &Path, sqlite: bool) -> GatewayStatus {
    let file: Option<StatusFile> = std::fs::read(path(home))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if sqlite {
        return match InstanceLock::holder(home) {
            Some(pid) => {
                let status = file.filter(|f| pid.is_none_or(|p| p == f.pid));
                GatewayStatus::Running {
                    pid: pid.or(status.as_ref().map(|s| s.pid)),
                    status,
                }
            }
            None => GatewayStatus::NotRunning(file),
        };
    }
    match file {
        Some(f)
            if f.stopped_at.is_none()
                && now_unix().saturating_sub(f.updated_at) <= STALE_AFTER.as_secs() =>
        {
            GatewayStatus::Running {
                pid: Some(f.pid),
                status: Some(f),
            }
        }
        other => GatewayStatus::NotRunning(other),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ops::PlatformState;

    #[test]
    fn the_lock_says_running_and_the_file_says_how() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(read(home.path(), true), GatewayStatus::NotRunning(None));
        assert_eq!(read(home.path(), true).exit_code(), 3);
        let lock = InstanceLock::acquire(home.path()).unwrap();
        let running = read(home.path(), true);
        assert_eq!(running.exit_code(), 1, "no status written yet: {running:?}");
        let ops = Ops::default();
        ops.started(&["telegram"]);
        ops.platform_state("telegram", PlatformState::Connected);
        StatusFile::from_ops(&ops, None).write(home.path()).unwrap();
        let running = read(home.path(), true);
        assert_eq!(running.exit_code(), 0, "{running:?}");
        ops.platform_state("telegram", PlatformState::Failed("409".into()));
        StatusFile::from_ops(&ops, None).write(home.path()).unwrap();
        assert_eq!(read(home.path(), true).exit_code(), 1);
        drop(lock);
        assert!(matches!(
            read(home.path(), true),
            GatewayStatus::NotRunning(Some(_))
        ));
        // No lock (PostgreSQL): a fresh file not marked stopped is running.
        let mut fresh = StatusFile::from_ops(&ops, None);
        fresh.platforms.clear();
        fresh.write(home.path()).unwrap();
        assert_eq!(read(home.path(), false).exit_code(), 0);
        fresh.stopped_at = Some(fresh.updated_at);
        fresh.write(home.path()).unwrap();
        assert_eq!(read(home.path(), false).exit_code(), 3);
        fresh.stopped_at = None;
        fresh.updated_at -= 600;
        fresh.write(home.path()).unwrap();
        assert_eq!(read(home.path(), false).exit_code(), 3, "stale");
    }
}
