//! The committed fuzz inputs (`fuzz/seeds/`, `fuzz/regressions/`), replayed
//! on stable by the `hostile_bytes` suites through the same `fuzz_entry`
//! functions the nightly targets call. (hermes-core's suite keeps its own
//! copy: a dev-dependency on this crate would build the runtime for the
//! core's tests.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Runs `entry` on every committed input of the fuzz target `target`;
/// panics naming the file that fails, and when the target has no inputs.
pub fn replay(target: &str, entry: impl Fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for file in dir {
            let path = match file {
                Ok(f) => f.path(),
                Err(e) => panic!("cannot list the inputs of {target}: {e}"),
            };
            let data = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
                panic!("{} fails (see the panic above)", path.display());
            }
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no committed inputs for {target}");
}
