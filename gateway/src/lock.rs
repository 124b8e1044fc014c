//! One gateway per `$HERMES_HOME`.
//!
//! Two gateways on the same home would both long-poll the same bot (Telegram
//! answers the second with 409 and both lose messages) and both write the
//! same sessions. The guard is an exclusive advisory lock (`flock`) on
//! `$HERMES_HOME/gateway.lock`: the kernel drops it when the process dies,
//! even by SIGKILL, so a crash never leaves a stale lock behind. The file
//! records the holder's pid, for the error message only.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it. Not retryable: stop the other gateway.
    #[error(
        "another hermes gateway is already running for {home}{holder} (lock file {path}); stop it first"
    )]
    Held {
        /// The `$HERMES_HOME` in question.
        home: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// ` (pid N)` when known.
        holder: String,
    },
    /// The lock file could not be created or locked.
    #[error("cannot use lock file {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
}

/// Held for as long as the gateway runs; dropping it releases the lock.
#[derive(Debug)]
pub struct InstanceLock {
    file: File,
    path: PathBuf,
}

impl InstanceLock {
    /// Takes the lock on `home/gateway.lock`, creating `home` if needed.
    pub fn acquire(home: &Path) -> Result<InstanceLock, LockError> {
        let path = home.join("gateway.lock");
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(home).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(LockError::Held {
                    home: home.to_path_buf(),
                    path,
                    holder: if pid.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {pid})")
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(InstanceLock { file, path })
    }

    /// Whether a gateway holds the lock of `home` now (`Some(pid)` when
    /// it does; the pid when recorded). Never creates anything. A shared
    /// lock taken and dropped at once: a gateway starting in that instant
    /// would be refused, so this is for an operator's command only.
    pub fn holder(home: &Path) -> Option<Option<u32>> {
        let path = home.join("gateway.lock");
        let mut file = File::open(&path).ok()?;
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                None
            }
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                Some(pid.trim().parse().ok())
            }
            Err(TryLockError::Error(_)) => None,
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn second_holder_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(dir.path()).unwrap();
        let err = InstanceLock::acquire(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("already running"), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert_eq!(
            InstanceLock::holder(dir.path()),
            Some(Some(std::process::id()))
        );
        drop(first);
        assert_eq!(InstanceLock::holder(dir.path()), None);
        InstanceLock::acquire(dir.path()).unwrap();
    }
}
