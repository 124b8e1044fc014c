//! `hermes restore FILE [--force]`: a `hermes backup` archive back into
//! `$HERMES_HOME` (issue 45).
//!
//! Nothing changes until the whole archive has been checked: a first pass
//! reads every entry (regular files under `home/` with plain relative
//! paths, each once) and the manifest, and checks the format version, the
//! store's schema (newer than this build knows is a downgrade, refused) and
//! every file's size and SHA-256 against the manifest, which must list
//! exactly the files present — so a truncated or tampered archive is refused
//! with the home as it was. The second pass extracts into a staging folder
//! beside the home, checking the bytes again; only then are the files moved
//! in. A home that is not empty is refused unless `--force`, and then what
//! was there is moved into `.replaced-<time>/` inside it, not deleted; a
//! home whose gateway runs is refused (it would write on into the moved
//! files).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hermes_runtime::config::Settings;
use hermes_runtime::store::{SQLITE_SCHEMA, SqliteFile, StoreTarget, inspect_sqlite};
use serde_json::Value;

use crate::app::{CliError, runtime};
use crate::backup::{FORMAT, HOME_PREFIX, Hashing, MANIFEST, manifest_files};

/// The largest manifest read (a million files' lines fit well within).
const MANIFEST_LIMIT: u64 = 64 * 1024 * 1024;

pub fn run(settings: &Settings, file: &Path, force: bool) -> Result<i32, CliError> {
    let home = settings.home.clone();
    let checked = verify(file).map_err(|why| {
        CliError::Runtime(format!(
            "{} refused: {why}; nothing was changed",
            file.display()
        ))
    })?;
    if let Some(pid) = gateway_running(&home) {
        return Err(CliError::Config(format!(
            "a gateway is running for {}{pid}: stop it before restoring (it would keep writing to \
             the files being replaced); nothing was changed",
            home.display()
        )));
    }
    let existing =
        listing(&home).map_err(|e| runtime(format!("cannot read {}: {e}", home.display())))?;
    if !existing.is_empty() && !force {
        return Err(CliError::Config(format!(
            "{} is not empty ({} entries); restore into an empty or new HERMES_HOME, or add --force \
             to move what is there into {}/.replaced-<time>/ first",
            home.display(),
            existing.len(),
            home.display()
        )));
    }
    let staging = staging_dir(&home);
    let staged = stage(file, &staging, &checked);
    if let Err(why) = staged {
        let _ = fs::remove_dir_all(&staging);
        return Err(CliError::Runtime(format!(
            "{} refused: {why}; nothing was changed",
            file.display()
        )));
    }
    let aside = move_in(&home, &staging, &existing).map_err(|e| {
        runtime(format!(
            "restoring into {} failed while moving files in: {e}; the restored files are in {}",
            home.display(),
            staging.display()
        ))
    })?;
    let _ = fs::remove_dir_all(&staging);
    println!(
        "restored {} files into {}{}",
        checked.files.len(),
        home.display(),
        match checked.schema {
            Some(v) => format!(" (the sessions at schema {v})"),
            None => String::new(),
        }
    );
    if let Some(aside) = aside {
        println!("what was there before is in {}", aside.display());
    }
    if let StoreTarget::Postgres(_) = settings.store_target() {
        eprintln!(
            "hermes: the sessions of this configuration live in PostgreSQL: restore them with the tools of your pg_dump (pg_restore, psql)"
        );
    }
    Ok(0)
}

/// What the first pass found valid.
struct Checked {
    /// Relative path → (size, SHA-256).
    files: BTreeMap<String, (u64, String)>,
    schema: Option<u32>,
}

fn verify(file: &Path) -> Result<Checked, String> {
    let reader = fs::File::open(file).map_err(|e| format!("cannot open it: {e}"))?;
    let mut archive = tar::Archive::new(io::BufReader::new(reader));
    let mut found: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut manifest: Option<Value> = None;
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar archive: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("unreadable (truncated?): {e}"))?;
        let name = entry_name(&entry)?;
        if !entry.header().entry_type().is_file() {
            return Err(format!("{name} is not a regular file"));
        }
        if name == MANIFEST {
            let mut bytes = Vec::new();
            (&mut entry)
                .take(MANIFEST_LIMIT)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("unreadable (truncated?): {e}"))?;
            manifest = Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("its manifest is not JSON: {e}"))?,
            );
            continue;
        }
        let rel = relative(&name)?;
        let mut hashing = Hashing::new(&mut entry);
        io::copy(&mut hashing, &mut io::sink())
            .map_err(|e| format!("unreadable (truncated?): {e}"))?;
        let size = hashing.count;
        if found
            .insert(rel.clone(), (size, hashing.finish()))
            .is_some()
        {
            return Err(format!("{rel} appears twice"));
        }
    }
    let manifest =
        manifest.ok_or("it has no manifest (truncated, or not made by `hermes backup`)")?;
    let format = manifest.get("format").and_then(Value::as_u64).unwrap_or(0);
    if format != FORMAT {
        return Err(format!(
            "its format is {format}, this hermes reads format {FORMAT} (made by hermes {})",
            manifest
                .get("hermes")
                .and_then(Value::as_str)
                .unwrap_or("?")
        ));
    }
    let schema = match manifest.get("store_schema") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or("its manifest's store_schema is not a number")?,
        ),
    };
    if let Some(found) = schema.filter(|v| *v > SQLITE_SCHEMA) {
        return Err(downgrade(found, &manifest));
    }
    let listed = manifest_files(&manifest).ok_or("its manifest lists no files")?;
    let mut expected = BTreeMap::new();
    for item in listed {
        let path = item
            .get("path")
            .and_then(Value::as_str)
            .ok_or("a manifest entry has no path")?;
        let size = item
            .get("size")
            .and_then(Value::as_u64)
            .ok_or("a manifest entry has no size")?;
        let sha = item
            .get("sha256")
            .and_then(Value::as_str)
            .ok_or("a manifest entry has no sha256")?;
        expected.insert(path.to_owned(), (size, sha.to_owned()));
    }
    for (path, want) in &expected {
        match found.get(path) {
            None => return Err(format!("{path} is missing (truncated?)")),
            Some(got) if got != want => {
                return Err(format!(
                    "{path} does not match its checksum (damaged or altered)"
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = found.keys().find(|k| !expected.contains_key(*k)) {
        return Err(format!("{extra} is not in the manifest (altered)"));
    }
    Ok(Checked {
        files: found,
        schema,
    })
}

fn downgrade(found: u32, manifest: &Value) -> String {
    format!(
        "its sessions are at schema {found}, newer than this hermes knows ({SQLITE_SCHEMA}): it was \
         made by hermes {}; restoring it here would be a downgrade — install that hermes (or newer) \
         and restore with it",
        manifest
            .get("hermes")
            .and_then(Value::as_str)
            .unwrap_or("?")
    )
}

fn entry_name<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String, String> {
    let path = entry
        .path()
        .map_err(|e| format!("an entry's name is unreadable: {e}"))?;
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| "an entry's name is not UTF-8".to_owned())
}

/// The path below `home/`, refused unless it is plain relative parts.
fn relative(name: &str) -> Result<String, String> {
    let rel = name
        .strip_prefix(HOME_PREFIX)
        .ok_or_else(|| format!("{name} is outside the archive's home/"))?;
    let plain = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(format!("{name} is not a plain relative path"));
    }
    Ok(rel.to_owned())
}

/// `Some(" (pid N)")` when a gateway holds the home's lock (the gateway's
/// `InstanceLock`: an exclusive `flock` on `gateway.lock`).
fn gateway_running(home: &Path) -> Option<String> {
    let path = home.join("gateway.lock");
    let mut file = fs::File::open(path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Some(match pid.trim().parse::<u32>() {
                Ok(pid) => format!(" (pid {pid})"),
                Err(_) => String::new(),
            })
        }
        Err(fs::TryLockError::Error(_)) => None,
    }
}

/// The names in `home` (none when it does not exist).
fn listing(home: &Path) -> io::Result<Vec<PathBuf>> {
    match fs::read_dir(home) {
        Ok(dir) => dir.map(|e| e.map(|e| e.path())).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// A new folder beside the home (same file system, so moving in is renames).
fn staging_dir(home: &Path) -> PathBuf {
    let parent = home
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = home
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent.join(format!(".{name}.restore-{}", std::process::id()))
}

/// Extracts the archive's home into `staging`, checking every file again.
fn stage(file: &Path, staging: &Path, checked: &Checked) -> Result<(), String> {
    let _ = fs::remove_dir_all(staging);
    private_dir(staging).map_err(|e| format!("cannot create {}: {e}", staging.display()))?;
    let reader = fs::File::open(file).map_err(|e| format!("cannot open it: {e}"))?;
    let mut archive = tar::Archive::new(io::BufReader::new(reader));
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar archive: {e}"))?;
    let mut written = 0usize;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("unreadable: {e}"))?;
        let name = entry_name(&entry)?;
        if name == MANIFEST {
            continue;
        }
        let rel = relative(&name)?;
        let dest = staging.join(&rel);
        if let Some(parent) = dest.parent() {
            private_dir(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let mut out = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&dest)
                .map_err(|e| format!("cannot write {}: {e}", dest.display()))?
        };
        let mut hashing = Hashing::new(&mut entry);
        io::copy(&mut hashing, &mut out)
            .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
        out.sync_all()
            .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
        let got = (hashing.count, hashing.finish());
        if checked.files.get(&rel) != Some(&got) {
            return Err(format!("{rel} changed since it was checked"));
        }
        written = written.saturating_add(1);
    }
    if written != checked.files.len() {
        return Err("the archive changed since it was checked".into());
    }
    let db = staging.join("state.db");
    if db.is_file() {
        match inspect_sqlite(&db).map_err(|e| format!("its state.db is unreadable: {e}"))? {
            SqliteFile::Hermes { schema } if schema > SQLITE_SCHEMA => {
                return Err(downgrade(schema, &Value::Null));
            }
            SqliteFile::Hermes { .. } | SqliteFile::Empty => {}
            other => return Err(format!("its state.db is {}", other.describe())),
        }
    }
    Ok(())
}

/// Moves the staged files into `home`; returns where the old ones went.
fn move_in(home: &Path, staging: &Path, existing: &[PathBuf]) -> io::Result<Option<PathBuf>> {
    if !home.exists() {
        if let Some(parent) = home.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        fs::rename(staging, home)?;
        return Ok(None);
    }
    let aside = if existing.is_empty() {
        None
    } else {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = home.join(format!(".replaced-{secs}"));
        private_dir(&aside)?;
        for path in existing {
            if let Some(name) = path.file_name() {
                fs::rename(path, aside.join(name))?;
            }
        }
        Some(aside)
    };
    for entry in fs::read_dir(staging)? {
        let entry = entry?;
        fs::rename(entry.path(), home.join(entry.file_name()))?;
    }
    Ok(aside)
}

fn private_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}
