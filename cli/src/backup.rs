//! `hermes backup [FILE]`: one tar archive of `$HERMES_HOME` (issue 45).
//!
//! What goes in: a consistent copy of the SQLite store (SQLite's online
//! backup API, one read transaction, so a gateway may keep writing), and
//! every other file of the home — memories, skills, personalities, scripts,
//! `config.toml`, media — except the store's own files, the gateway's lock
//! and status files, spilled tool output and `.env` (only with
//! `--with-secrets`). Symbolic links are skipped and named.
//!
//! The archive's last entry is `hermes-backup.json`, the manifest: the
//! format version, the store's schema and every file's size and SHA-256,
//! computed from the very bytes written (a file that changes while it is
//! copied fails the backup instead of giving a wrong checksum). `hermes
//! restore` checks all of it before it changes anything. The archive is
//! written as `FILE.partial`, mode 0600 (transcripts are private whatever
//! the secrets), and renamed into place when complete.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hermes_runtime::config::Settings;
use hermes_runtime::store::{SQLITE_SCHEMA, StoreTarget, snapshot_sqlite};
use serde_json::{Value, json};

use crate::app::{CliError, runtime};

/// The archive layout this build writes and reads.
pub const FORMAT: u64 = 1;
/// The manifest's name in the archive.
pub const MANIFEST: &str = "hermes-backup.json";
/// The folder of the archive that holds the home's files.
pub const HOME_PREFIX: &str = "home/";

/// Top-level names of the home that are never archived: the live store
/// (copied through the backup API instead), the running gateway's files,
/// and output kept only for one session's tool calls.
const SKIPPED: &[&str] = &[
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "state.db-journal",
    "gateway.lock",
    "gateway.status.json",
    "tool-output",
];

/// The secrets file, archived only with `--with-secrets`.
pub const SECRETS: &str = ".env";

pub fn run(
    settings: &Settings,
    file: Option<PathBuf>,
    with_secrets: bool,
) -> Result<i32, CliError> {
    let home = settings.home.clone();
    if !home.is_dir() {
        return Err(CliError::Config(format!(
            "{} does not exist: nothing to back up",
            home.display()
        )));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let file = file.unwrap_or_else(|| PathBuf::from(format!("hermes-backup-{now}.tar")));
    let partial = with_suffix(&file, ".partial");
    let snapshot = with_suffix(&file, ".state.db.partial");
    let result = write_archive(settings, &home, &file, &partial, &snapshot, with_secrets);
    let _ = fs::remove_file(&snapshot);
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    let summary = result?;
    fs::rename(&partial, &file)
        .map_err(|e| runtime(format!("cannot write {}: {e}", file.display())))?;
    println!(
        "backed up {} to {} ({} files{})",
        home.display(),
        file.display(),
        summary.files,
        match summary.schema {
            Some(v) => format!(", the sessions at schema {v}"),
            None => String::new(),
        }
    );
    println!(
        "{}",
        if with_secrets {
            "secrets: .env included — keep the archive private (it is mode 0600)"
        } else {
            "secrets: .env not included (--with-secrets includes it)"
        }
    );
    for skipped in &summary.links {
        eprintln!("hermes: skipped the symbolic link {skipped}");
    }
    if let StoreTarget::Postgres(_) = settings.store_target() {
        eprintln!(
            "hermes: the sessions live in PostgreSQL and are not in this archive: back the database up with pg_dump"
        );
    }
    Ok(0)
}

struct Summary {
    files: usize,
    schema: Option<u32>,
    links: Vec<String>,
}

fn write_archive(
    settings: &Settings,
    home: &Path,
    file: &Path,
    partial: &Path,
    snapshot: &Path,
    with_secrets: bool,
) -> Result<Summary, CliError> {
    let schema = match settings.store_target() {
        StoreTarget::Sqlite(db) if db.is_file() => {
            let _ = fs::remove_file(snapshot);
            Some(
                snapshot_sqlite(&db, snapshot)
                    .map_err(|e| runtime(format!("cannot copy the sessions: {e}")))?,
            )
        }
        _ => None,
    };
    let out = private_create(partial)
        .map_err(|e| runtime(format!("cannot create {}: {e}", partial.display())))?;
    let mut tar = tar::Builder::new(io::BufWriter::new(out));
    let mut entries = Vec::new();
    let mut links = Vec::new();
    // The archive itself, when written inside the home, is not archived.
    let own: Vec<PathBuf> = [file, partial, snapshot]
        .iter()
        .filter_map(|p| std::path::absolute(p).ok())
        .collect();
    let mut files = Vec::new();
    collect(home, home, with_secrets, &mut files, &mut links)
        .map_err(|e| runtime(format!("cannot read {}: {e}", home.display())))?;
    if schema.is_some() {
        let (size, sha256) = append(&mut tar, snapshot, "state.db")?;
        entries.push(json!({"path": "state.db", "size": size, "sha256": sha256}));
    }
    for (path, rel) in files {
        if std::path::absolute(&path).is_ok_and(|p| own.contains(&p)) {
            continue;
        }
        let (size, sha256) = append(&mut tar, &path, &rel)?;
        entries.push(json!({"path": rel, "size": size, "sha256": sha256}));
    }
    let manifest = json!({
        "format": FORMAT,
        "hermes": env!("CARGO_PKG_VERSION"),
        "created_unix": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "store_schema": schema,
        "supported_schema": SQLITE_SCHEMA,
        "secrets": with_secrets,
        "files": entries,
    });
    let bytes = serde_json::to_vec_pretty(&manifest).map_err(runtime)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(0);
    header.set_cksum();
    tar.append_data(&mut header, MANIFEST, bytes.as_slice())
        .map_err(|e| runtime(format!("cannot write {}: {e}", partial.display())))?;
    let out = tar
        .into_inner()
        .and_then(|w| w.into_inner().map_err(io::IntoInnerError::into_error))
        .map_err(|e| runtime(format!("cannot write {}: {e}", partial.display())))?;
    out.sync_all()
        .map_err(|e| runtime(format!("cannot write {}: {e}", partial.display())))?;
    let count = manifest["files"].as_array().map_or(0, Vec::len);
    Ok(Summary {
        files: count,
        schema,
        links,
    })
}

/// Every regular file under `dir` worth archiving, with its path relative
/// to the home (`/`-separated).
fn collect(
    home: &Path,
    dir: &Path,
    with_secrets: bool,
    out: &mut Vec<(PathBuf, String)>,
    links: &mut Vec<String>,
) -> io::Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
    names.sort_by_key(fs::DirEntry::file_name);
    for entry in names {
        let path = entry.path();
        let rel = path
            .strip_prefix(home)
            .map_err(io::Error::other)?
            .to_string_lossy()
            .into_owned();
        let top = dir == home;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if top && (SKIPPED.contains(&name.as_ref()) || (name == SECRETS && !with_secrets)) {
            continue;
        }
        // Staging folders of a restore in progress are not the user's data.
        if top && name.starts_with(".restore-") {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            links.push(rel);
        } else if kind.is_dir() {
            collect(home, &path, with_secrets, out, links)?;
        } else if kind.is_file() {
            out.push((path, rel));
        }
    }
    Ok(())
}

/// Appends the file at `path` as `home/REL`; returns its size and SHA-256,
/// computed over the bytes written.
fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    rel: &str,
) -> Result<(u64, String), CliError> {
    let read_err = |e: io::Error| runtime(format!("cannot read {}: {e}", path.display()));
    let file = fs::File::open(path).map_err(read_err)?;
    let size = file.metadata().map_err(read_err)?.len();
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o600);
    header.set_mtime(
        file.metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs()),
    );
    header.set_cksum();
    let mut reader = Hashing::new(file.take(size));
    tar.append_data(&mut header, format!("{HOME_PREFIX}{rel}"), &mut reader)
        .map_err(|e| {
            runtime(format!(
                "cannot archive {}: {e} (did it change during the backup? try again)",
                path.display()
            ))
        })?;
    if reader.count != size {
        return Err(runtime(format!(
            "{} changed during the backup; try again",
            path.display()
        )));
    }
    Ok((size, reader.finish()))
}

/// A reader that hashes (SHA-256) and counts what passes through it.
pub struct Hashing<R> {
    inner: R,
    digest: ring::digest::Context,
    pub count: u64,
}

impl<R> Hashing<R> {
    pub fn new(inner: R) -> Self {
        Hashing {
            inner,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
            count: 0,
        }
    }

    /// The lowercase hex SHA-256 of everything read.
    pub fn finish(self) -> String {
        hex(self.digest.finish().as_ref())
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let read = buf.get(..n).unwrap_or_default();
        self.digest.update(read);
        self.count = self.count.saturating_add(n as u64);
        Ok(n)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Creates a new file, mode 0600, replacing a stale one.
fn private_create(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = fs::remove_file(path);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// A manifest's entry list, for the restore side.
pub fn manifest_files(manifest: &Value) -> Option<&Vec<Value>> {
    manifest.get("files").and_then(Value::as_array)
}
