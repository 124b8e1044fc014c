//! Generates the shell completions and the man page from the clap
//! definition (`src/args.rs`), so the binary embeds their text instead of
//! carrying `clap_complete` and `clap_mangen` (≈ 170 KB) to produce it.

#![allow(dead_code)]

use clap::CommandFactory;

include!("src/args.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=src/args.rs");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
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
