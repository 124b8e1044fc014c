//! Atomic file writes: a temp file in the same directory, flushed, then
//! renamed over the target, so a crash leaves the old or the new content,
//! never half of it. Below the features: the file tools, the memory tool
//! and the skills writer all use these (none of them owns the others).
//! Also [`canonicalize`], which the tools' working folder resolves with.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, PermissionsExt as _};

/// `std::fs::canonicalize`, with the C library's `realpath` writing into a
/// buffer of ours. Given none, as std gives it, musl's `realpath` returns
/// a copy from the C library's own `malloc`, which maps pages of its own
/// for it: with the read buffer's spare (`client::pump`) no longer
/// thread-local, the only reason a one-shot set that allocator up at all
/// (issue 39).
pub(crate) fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut resolved: Vec<u8> = Vec::with_capacity(libc::PATH_MAX as usize);
    // SAFETY: `c_path` is NUL-terminated; `resolved` has room for PATH_MAX
    // bytes, what `realpath` may write into a buffer it is given.
    let answer = unsafe { libc::realpath(c_path.as_ptr(), resolved.as_mut_ptr().cast()) };
    if answer.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `realpath` wrote a NUL-terminated path there.
    let len = unsafe { CStr::from_ptr(answer) }.to_bytes().len();
    // SAFETY: its first `len` bytes were just written.
    unsafe { resolved.set_len(len) };
    Ok(PathBuf::from(OsString::from_vec(resolved)))
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn canonicalize_answers_as_std_does() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.path().join("link")).unwrap();
        for given in [
            root.path().join("link"),
            root.path().join("real/../link/."),
            root.path().to_path_buf(),
        ] {
            assert_eq!(
                canonicalize(&given).unwrap(),
                std::fs::canonicalize(&given).unwrap(),
                "{}",
                given.display()
            );
        }
        assert_eq!(
            canonicalize(&root.path().join("link")).unwrap(),
            std::fs::canonicalize(&real).unwrap()
        );
    }

    #[test]
    fn canonicalize_fails_as_std_does() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("missing");
        assert_eq!(
            canonicalize(&missing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let nul = Path::new(OsStr::from_bytes(b"a\0b"));
        assert_eq!(
            canonicalize(nul).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
