//! Puts `memory.x` where cortex-m-rt's `link.x` looks for it.
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    std::fs::copy("memory.x", out.join("memory.x")).unwrap_or_else(|e| panic!("memory.x: {e}"));
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
}
