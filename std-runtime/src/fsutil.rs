//! Atomic file writes: a temp file in the same directory, flushed, then
//! renamed over the target, so a crash leaves the old or the new content,
//! never half of it. Below the features: the file tools, the memory tool
//! and the skills writer all use these (none of them owns the others).

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, PermissionsExt as _};

/// Writes `bytes` to `path` atomically. The permissions of the file being
/// replaced are kept.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        // Keep the permissions of the file being replaced.
        if let Ok(meta) = std::fs::metadata(path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes `bytes` to `name` in `dir` atomically, beneath the handle (no
/// symlink followed). The old file's permissions are kept; a hard link is
/// replaced, never written through.
pub(crate) fn write_atomic_in(dir: &Dir, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true).follow(FollowSymlinks::No);
    let result = (|| {
        let mut f = dir.open_with(&tmp, &opts)?.into_std();
        f.write_all(bytes)?;
        f.sync_all()?;
        if let Ok(meta) = dir.symlink_metadata(name)
            && meta.is_file()
        {
            f.set_permissions(std::fs::Permissions::from_mode(meta.permissions().mode()))?;
        }
        dir.rename(&tmp, dir, name)
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}
