//! Generates the shell completions and the man page from the clap
//! definition (`src/args.rs`), so the binary embeds their text instead of
//! carrying `clap_complete` and `clap_mangen` (≈ 170 KB) to produce it.
//!
//! It also gives the release link of `hermes` its symbol order
//! (`symbol-order/<target>.txt`, written by `scripts/symbol-order.sh`): the
//! functions a start, a one-shot and an idle gateway run, placed together.
//! The kernel maps a file-backed page together with its resident
//! neighbours (fault-around, 64 KiB), so the ≈ 2 MB of code those runs
//! execute, scattered over 10.5 MB of text, made nearly all of it resident;
//! placed together, a one-shot's peak RSS halves (BENCHMARKS.md "Symbol
//! order"). The order changes where code lies, never what it does.

#![allow(dead_code)]

use clap::CommandFactory;

include!("src/args.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=src/args.rs");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    symbol_order(&out)?;
    static_entry();
    // The whole tree at once, so that clap's `help` subcommand lists every
    // nested subcommand too (see `Deferred`).
    EXPAND_ALL.store(true, std::sync::atomic::Ordering::Relaxed);
    for (shell, file) in [
        (clap_complete::Shell::Bash, "hermes.bash"),
        (clap_complete::Shell::Zsh, "_hermes"),
        (clap_complete::Shell::Fish, "hermes.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "hermes", &mut script);
        std::fs::write(out.join(file), script)?;
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    std::fs::write(out.join("hermes.1"), page)?;
    Ok(())
}

/// Makes `hermes_start` (`src/start/`) the entry of the musl builds on
/// x86_64, aarch64, 32-bit ARM and riscv64: it asks for the pages the
/// image's relocation writes in one call and applies the relocations, then
/// jumps to musl's `_start`. The same decision compiles the module in
/// (`cfg(hermes_static_entry)`), so the two cannot disagree.
fn static_entry() {
    println!("cargo:rustc-check-cfg=cfg(hermes_static_entry)");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "musl"
        && matches!(
            var("CARGO_CFG_TARGET_ARCH").as_str(),
            "x86_64" | "aarch64" | "arm" | "riscv64"
        )
    {
        println!("cargo:rustc-cfg=hermes_static_entry");
        println!("cargo:rustc-link-arg-bin=hermes=-Wl,-e,hermes_start");
    }
}

/// Passes the target's symbol order to the linker of the `hermes` binary:
/// release builds linked by lld only (its `--symbol-ordering-file`; the
/// targets `.cargo/config.toml` links with `-fuse-ld=lld`), and only where
/// an order was recorded for the target. Names the order lists that a
/// build lacks (code changed since it was recorded) are skipped silently:
/// they cost memory, not correctness, and the budgets fence that.
/// `HERMES_SYMBOL_ORDER=off` links without it (to measure what it gives).
///
/// The linker reads a copy in `OUT_DIR`, not the checkout's file: cargo
/// keeps this script's output while its inputs are unchanged, also for
/// the same sources at another path (a shared target directory between
/// clones, as `.ci/run` keeps), and a path into a checkout that is gone
/// failed the link.
fn symbol_order(out: &std::path::Path) -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=symbol-order");
    println!("cargo:rerun-if-env-changed=HERMES_SYMBOL_ORDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("PROFILE") != "release" || var("HERMES_SYMBOL_ORDER") == "off" {
        return Ok(());
    }
    // x86_64 glibc links with rust-lld by default (Rust 1.90); the
    // armv7, armv6 and riscv64 builds with zig's lld, through the `zig-…-cc`
    // links of scripts/toolchain (whose driver hands the order to lld
    // itself).
    let target = var("TARGET");
    let zig_linker = std::path::Path::new(&var("RUSTC_LINKER"))
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("zig-"));
    if !var("CARGO_ENCODED_RUSTFLAGS").contains("-fuse-ld=lld")
        && target != "x86_64-unknown-linux-gnu"
        && !zig_linker
    {
        return Ok(());
    }
    // The board build (feature `board` without the default platforms) has
    // its own order: its symbols' hashes differ from the default build's.
    let board = std::env::var_os("CARGO_FEATURE_BOARD").is_some()
        && std::env::var_os("CARGO_FEATURE_DISCORD").is_none();
    let name = if board {
        format!("{target}-board.txt")
    } else {
        format!("{target}.txt")
    };
    let order = std::path::Path::new(&var("CARGO_MANIFEST_DIR"))
        .join("symbol-order")
        .join(name);
    if order.is_file() {
        let copy = out.join("symbol-order.txt");
        std::fs::copy(&order, &copy)?;
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            copy.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    Ok(())
}
