//! Where a job's script may live (SPEC Y1, `hermes cron create --script`):
//! a regular file of `$HERMES_HOME/scripts/`, named relative to it. Jobs
//! are checked here when they are made or changed; the script runner
//! (`tools::script`) checks again before each run.

use std::path::{Component, Path, PathBuf};

/// The folder of `$HERMES_HOME` scripts must live in.
pub const SCRIPTS_DIR: &str = "scripts";
/// The largest script file accepted.
const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// Where scripts live under `hermes_home`.
pub fn scripts_dir(hermes_home: &Path) -> PathBuf {
    hermes_home.join(SCRIPTS_DIR)
}

/// Checks a script path as a user gave it (relative to `scripts`, or
/// absolute inside it) and returns it relative to `scripts`: a regular file
/// that is inside the folder once every symlink is resolved. Refusals are
/// one sentence.
pub fn check_script(scripts: &Path, given: &str) -> Result<String, String> {
    let given = given.trim();
    if given.is_empty() || given.contains('\0') {
        return Err("the script path is empty".into());
    }
    let path = Path::new(given);
    let relative = if path.is_absolute() {
        match path.strip_prefix(scripts) {
            Ok(rest) => rest.to_path_buf(),
            Err(_) => {
                return Err(format!(
                    "scripts must live in {}; {given:?} is outside it",
                    scripts.display()
                ));
            }
        }
    } else {
        path.to_path_buf()
    };
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(format!(
            "the script path {given:?} must name a file inside {} (no `..`)",
            scripts.display()
        ));
    }
    let real_dir = scripts.canonicalize().map_err(|e| {
        format!(
            "there is no scripts folder ({}: {e}); put the script there",
            scripts.display()
        )
    })?;
    let real = scripts
        .join(&relative)
        .canonicalize()
        .map_err(|e| format!("no script {given:?} in {}: {e}", scripts.display()))?;
    if !real.starts_with(&real_dir) {
        return Err(format!(
            "the script {given:?} leads outside {} (a symlink)",
            scripts.display()
        ));
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("cannot read {given:?}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("the script {given:?} is not a file"));
    }
    if meta.len() > MAX_SCRIPT_BYTES {
        return Err(format!(
            "the script {given:?} is {} bytes; at most {MAX_SCRIPT_BYTES} are accepted",
            meta.len()
        ));
    }
    relative
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("the script path {given:?} is not UTF-8"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_files_inside_the_scripts_folder_are_accepted() {
        let home = tempfile::tempdir().unwrap();
        let scripts = scripts_dir(home.path());
        assert!(
            check_script(&scripts, "x.sh")
                .unwrap_err()
                .contains("no scripts folder")
        );
        std::fs::create_dir_all(scripts.join("sub")).unwrap();
        std::fs::write(scripts.join("sub/ok.sh"), "echo hi\n").unwrap();
        std::fs::write(home.path().join(".env"), "SECRET=1\n").unwrap();
        std::os::unix::fs::symlink(home.path().join(".env"), scripts.join("leak.sh")).unwrap();
        assert_eq!(check_script(&scripts, "sub/ok.sh").unwrap(), "sub/ok.sh");
        let absolute = scripts.join("sub/ok.sh").display().to_string();
        assert_eq!(check_script(&scripts, &absolute).unwrap(), "sub/ok.sh");
        for bad in ["../.env", "/etc/passwd", "leak.sh", "sub", "missing.sh", ""] {
            assert!(check_script(&scripts, bad).is_err(), "{bad}");
        }
    }
}
