#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (`.ci/run` calls this script).
# Needs: a Rust toolchain (rustup, cargo), Node.js + npm (for the loopback
# emulators the adapter and client tests start). Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> npm emulators (telegram-test-api, aimock)"
for dir in tests/emulators/*/; do
  if [ -f "$dir/package.json" ]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
done

echo "==> formatting"
cargo fmt --all -- --check

echo "==> clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> no_std proof: hermes-core links into a program without std"
cargo build --manifest-path core/nostd-check/Cargo.toml --locked
./core/nostd-check/target/debug/hermes-core-nostd-check

echo "==> tests"
cargo test --workspace --locked
