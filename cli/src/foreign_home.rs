//! Never step on a hermes-agent home (issue 45, item 0).
//!
//! hermes-agent (the Python program) also keeps its data in `~/.hermes`
//! and also installs a `hermes` command. Its home has a `config.yaml` and a
//! `state.db` whose `sessions` table our first migration would trip over.
//! Before any command reads or writes the home, [`check`] recognises such a
//! home and stops with one paragraph: what was found, that nothing was
//! changed, and the ways on. The store refuses such a file by itself too
//! (`StoreError::Foreign`), so a gateway started by other means cannot
//! migrate it either.

use std::path::Path;

use hermes_runtime::store::{SqliteFile, inspect_sqlite};

/// What marks `home` as hermes-agent's, or `None` when it is not one.
///
/// Every command asks, so the common case costs one `stat`: only a home
/// with a `config.yaml` has its `state.db` looked at (read-only, creating
/// nothing). A foreign `state.db` without it is still refused by the store
/// itself, untouched.
pub fn hermes_agent_marks(home: &Path) -> Option<Vec<String>> {
    if !home.join("config.yaml").is_file() {
        return None;
    }
    let mut marks = vec!["config.yaml (hermes-agent's settings)".to_owned()];
    let db = home.join("state.db");
    let foreign_db = db.is_file()
        && match inspect_sqlite(&db) {
            Ok(kind @ (SqliteFile::HermesAgent { .. } | SqliteFile::Foreign { .. })) => {
                marks.push(format!("state.db is {}", kind.describe()));
                true
            }
            _ => false,
        };
    // A config.yaml beside a config.toml and a store of ours is the user's
    // own business.
    (foreign_db || !home.join("config.toml").exists()).then_some(marks)
}

/// `Err(paragraph)` when `home` is a hermes-agent home.
pub fn check(home: &Path) -> Result<(), String> {
    match hermes_agent_marks(home) {
        None => Ok(()),
        Some(marks) => Err(paragraph(home, &marks)),
    }
}

fn paragraph(home: &Path, marks: &[String]) -> String {
    let shown = home.display();
    // The board build has no `hermes import` (cli/Cargo.toml, feature
    // `import`): it says where the command is instead.
    let bring_over = if cfg!(feature = "import") {
        format!("`HERMES_HOME=~/.hermes-rs hermes import hermes-agent {shown}`")
    } else {
        "`hermes import hermes-agent` of a full build (this is the board build, without it)"
            .to_owned()
    };
    format!(
        "{shown} is a hermes-agent home ({}), not one of this hermes's. It is left untouched: \
         nothing in it was changed. Two ways on: give this hermes a home of its own and bring \
         hermes-agent's sessions and memory over, {bring_over} (it only reads this home; \
         hermes-agent reads HERMES_HOME too, so set it for this hermes only: `alias \
         hermes-rs='HERMES_HOME=~/.hermes-rs /usr/bin/hermes'`); or point HERMES_HOME at any \
         other folder, `HERMES_HOME=DIR hermes …`. docs/src/coming-from-hermes-agent.md.",
        marks.join("; ")
    )
}
