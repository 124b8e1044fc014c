# Sourced by .ci/cross, scripts/symbol-order.sh, scripts/board-sizes.sh and
# scripts/deb-check.sh: what they need to know of the cross targets, said
# once.
#
# - The repo's linker wrappers (scripts/toolchain) go on PATH:
#   .cargo/config.toml names them without a directory (why: there).
# - The targets whose standard library is built from source and whose C is
#   compiled and linked by Zig (armv7, armv6, riscv64: issue 39), the command that
#   builds them, and where their builds lie.
# - Each target's runner, read from .cargo/config.toml (`runner = [...]`),
#   the one place it is written.

targets_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH="$targets_root/scripts/toolchain:$PATH"

# rustup has no standard library for these on the CI machine (its mirror
# answers 404), so cargo builds it from the rust-src component
# (`-Zbuild-std`, which a stable toolchain allows with RUSTC_BOOTSTRAP=1),
# and Zig (scripts/toolchain/zig-driver; `$ZIG` names it) compiles their C
# and links them against its own musl. In a target directory of their own:
# RUSTC_BOOTSTRAP=1 changes what proc-macro2's and anyhow's build scripts
# find, so sharing the host's build scripts and proc macros with the other
# builds would rebuild them, and all that depends on them, at every switch.
std_from_source_targets=(armv7-unknown-linux-musleabihf arm-unknown-linux-musleabihf riscv64gc-unknown-linux-musl)
std_from_source_dir=$targets_root/target/std-from-source

is_std_from_source() {
  case " ${std_from_source_targets[*]} " in
    *" $1 "*) return 0 ;;
    *) return 1 ;;
  esac
}

# `cargo SUBCOMMAND ARGS…` for the std-from-source targets (ARGS name them
# with --target), at low priority.
cargo_std_from_source() {
  local subcommand=$1
  shift
  : "${ZIG:?set ZIG to the zig executable (docs/src/boards.md)}"
  RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$std_from_source_dir nice -n 10 \
    cargo "$subcommand" -Zbuild-std=std,panic_unwind "$@"
}

# The target directory TARGET is built in (cargo's CARGO_TARGET_DIR).
target_dir_of() {
  if is_std_from_source "$1"; then
    echo "$std_from_source_dir"
  else
    echo "$targets_root/target"
  fi
}

# Where TARGET's release build lies.
release_dir() { echo "$(target_dir_of "$1")/$1/release"; }

# TARGET's runner from .cargo/config.toml, as words on one line (none for a
# target without one: the host's): the quoted strings of its array, which
# may hold commas (`"cortex-a7,neon=off"`) but no spaces.
#   runner = ["qemu-arm-static", "-cpu", "cortex-a7,neon=off"]
runner_of() {
  awk -v t="[target.$1]" '
    $0 == t { on = 1; next }
    /^\[/ { on = 0 }
    on && /^runner *=/ {
      line = $0; words = ""
      while (match(line, /"[^"]*"/)) {
        words = words (words == "" ? "" : " ") substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, RSTART + RLENGTH)
      }
      print words
    }
  ' "$targets_root/.cargo/config.toml"
}
