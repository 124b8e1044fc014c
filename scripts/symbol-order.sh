#!/usr/bin/env bash
# Records the symbol order of the release `hermes` (cli/build.rs passes it to
# lld): the functions that `--version`, `--help`, a 20-turn one-shot (fresh
# and warm home), a 0-turn one-shot and an idle Telegram gateway execute, grouped by which runs
# reach them (below), so that the linker places each run's code side by side
# and a run maps little more text than it executes (benchmarks/runs/2026-12-04-symbol-order.md).
#
#   scripts/symbol-order.sh [TARGET [board]]   default x86_64-unknown-linux-musl
#
# Every target is recorded from its own runs: a target this machine does
# not run natively (the arm ones) under qemu-user (valgrind does not work
# there).
# An order carried over from another build by function names misses what
# that build inlined differently: the board build's carried-over order left
# 29 of the 64 KiB stretches a 0-turn one-shot executes outside the ordered
# code (benchmarks/runs/2026-12-04-symbol-order.md).
#
# Run it after changes that move much code (the budgets' RSS figures creep up
# when the order goes stale: new hot functions land outside the hot group),
# then commit cli/symbol-order/TARGET.txt (all six: `x86_64-unknown-linux-musl`,
# `aarch64-unknown-linux-musl`, `armv7-unknown-linux-musleabihf`,
# `arm-unknown-linux-musleabihf`, `riscv64gc-unknown-linux-musl` and
# `x86_64-unknown-linux-gnu board`). Needs valgrind (callgrind) for the
# native target and qemu-user for the others.
# The default features are recorded: symbol names carry a hash of the
# crate's features and target, so the order of one build does not name the
# functions of another.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-x86_64-unknown-linux-musl}
# `board`: the board build (`--no-default-features --features board`,
# cli/symbol-order/TARGET-board.txt), recorded like the default one.
variant=${2:-}
features=()
suffix=
if [ "$variant" = board ]; then
  features=(--no-default-features --features board)
  suffix=-board
fi
# The same code as the release build, with its symbols (strip changes no
# address; the order in force does not change any name). The armv7, armv6
# and riscv64 builds as .ci/cross makes them: their std from source, in a
# target directory of their own (scripts/lib/targets.sh).
. scripts/lib/targets.sh
if is_std_from_source "$target"; then
  cargo_std_from_source rustc --locked --release --target "$target" -p hermes-cli --bin hermes \
    "${features[@]}" -- -C strip=none
else
  nice -n 10 cargo rustc --locked --release --target "$target" -p hermes-cli --bin hermes "${features[@]}" -- -C strip=none
fi
exe=$(release_dir "$target")/hermes
out=cli/symbol-order/$target$suffix.txt
mkdir -p "$(dirname "$out")"

# Each run is recorded where it runs: natively under valgrind (callgrind
# names every function it enters), or for another architecture under the
# target's runner from .cargo/config.toml (qemu-user, with the glibc
# targets' `-L` sysroot), whose `-d in_asm` log lists each block of code
# the first time it is translated, under the name of the function around
# it. Either way a run gives its functions in order of first sight.
arch=${target%%-*}
if [ "$arch" = "$(uname -m)" ]; then
  recorder=(valgrind)
  command -v valgrind >/dev/null || { echo "symbol-order: needs valgrind (apt install valgrind)" >&2; exit 1; }
else
  read -r -a recorder < <(runner_of "$target") || true
  [ "${#recorder[@]}" -gt 0 ] || { echo "symbol-order: no runner for $target in .cargo/config.toml" >&2; exit 1; }
  command -v "${recorder[0]}" >/dev/null || { echo "symbol-order: needs ${recorder[0]} (apt install qemu-user-static)" >&2; exit 1; }
fi
cargo build -q --locked -p hermes-tests --example fake_provider --example fake_telegram
ex=target/debug/examples

work=$(mktemp -d)
. scripts/lib/example-servers.sh
start_server fake_provider 20
provider=$url
start_server fake_telegram
telegram=$url

# The command that runs a program recorded as NAME (its record in
# $work/rec.NAME), into the array `rec`.
recorder_for() {
  if [ "${recorder[0]}" = valgrind ]; then
    rec=(valgrind --tool=callgrind --dump-instr=no --compress-strings=no --demangle=no
      --callgrind-out-file="$work/rec.$1")
  else
    rec=("${recorder[@]}" -d in_asm -D "$work/rec.$1")
  fi
}
# The functions of run NAME's record, first sight first, into $work/NAME.fns.
functions_of() {
  local name=$1
  if [ "${recorder[0]}" = valgrind ]; then
    # As caller or callee; "'2" marks a recursion level, addresses without
    # a name are skipped. Valgrind calls musl's `__libc_start_main`
    # "(below main)".
    sed -n 's/^c\{0,1\}fn=//p' "$work/rec.$name" | sed "s/'[0-9]*\$//; s/^(below main)\$/__libc_start_main/" |
      grep -v '^0x' | awk '!seen[$0]++' >"$work/$name.fns"
  else
    # qemu names the symbol around each block it translates ("IN: name",
    # blank where it knows none). In a glibc build the dynamic loader's
    # and the C library's functions are listed too; the linker skips
    # names the binary does not define.
    sed -n 's/^IN: \(..*\)$/\1/p' "$work/rec.$name" | awk '!seen[$0]++' >"$work/$name.fns"
  fi
}
profile() { # name args… (the run's output is not needed)
  local name=$1
  shift
  recorder_for "$name"
  "${rec[@]}" "$exe" "$@" >/dev/null 2>"$work/$name.log" || {
    cat "$work/$name.log" >&2
    exit 1
  }
}
profile version --version
profile help --help
home=$work/home
mkdir -p "$home"
for run in fresh warm; do
  HERMES_HOME=$home HERMES_BASE_URL=$provider HERMES_MODEL=fake \
    profile "oneshot-$run" -Q -z "do 20 things" --toolsets todo
done
# The 0-turn one-shot of budgets.sh, on the now warm home: every default
# toolset is built (the runs above build `todo` alone), and no tool runs.
start_server fake_provider 0
HERMES_HOME=$home HERMES_BASE_URL=$url HERMES_MODEL=fake profile oneshot-hello -Q -z hello
# Neither valgrind nor qemu-user knows the Landlock system calls: the
# gateway runs with the sandbox off here (its set-up code is small and stays
# unordered).
gateway_home=$work/gateway
mkdir -p "$gateway_home"
printf '[agent]\nsandbox = "off"\n' >"$gateway_home/config.toml"
recorder_for gateway
HERMES_HOME=$gateway_home HERMES_BASE_URL=$provider HERMES_MODEL=fake \
  TELEGRAM_BOT_TOKEN=123456:order-token TELEGRAM_API_URL=$telegram TELEGRAM_POLL_TIMEOUT=30 \
  "${rec[@]}" "$exe" gateway run >"$work/gateway.log" 2>&1 &
gateway=$!
pids+=("$gateway")
for _ in $(seq 1200); do
  grep -q "gateway running" "$work/gateway.log" && break
  kill -0 "$gateway" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
  sleep 0.1
done
sleep 10 # a few held polls
kill -TERM "$gateway"
wait "$gateway" || true

for run in version help oneshot-fresh oneshot-warm oneshot-hello gateway; do
  functions_of "$run"
done
# Grouped by which runs reach them, so that each run's code is one stretch
# with little of the others' inside it: what `--version` runs (every start
# runs it); then what a 0-turn one-shot runs (the commonest run, a question
# answered), its own code before the part the gateway shares; then what the
# other one-shots run besides, their own before the part the gateway shares;
# then the gateway's own; then `--help`'s. First sight first within a group.
# A 0-turn run's code is then one stretch (with the 20-turn runs' code
# mixed in, it spanned 1.77 MB for 1.10 MB executed: 28 windows of 64 KiB
# and 11 more outside the order, which recorded `--toolsets todo` alone),
# a 20-turn one-shot's continues it, and the gateway skips the one-shot's
# own code as before, in two pieces instead of one. (A plain first-sight
# order put the one-shot's own code in the middle of the gateway's.)
python3 - "$work" "$out" <<'PY'
import sys
work, out = sys.argv[1:3]
runs = {r: open(f"{work}/{r}.fns").read().split() for r in
        ("version", "help", "oneshot-fresh", "oneshot-warm", "oneshot-hello", "gateway")}
first = []
for r in ("version", "oneshot-hello", "oneshot-fresh", "oneshot-warm", "gateway", "help"):
    first += runs[r]
version = set(runs["version"])
hello = set(runs["oneshot-hello"])
oneshot = hello | set(runs["oneshot-fresh"]) | set(runs["oneshot-warm"])
gateway = set(runs["gateway"])
def group(f):
    if f in version:
        return 0
    if f in hello:
        return 2 if f in gateway else 1
    if f in oneshot:
        return 4 if f in gateway else 3
    if f in gateway:
        return 5
    return 6
seen, groups = set(), [[] for _ in range(7)]
for f in first:
    if f not in seen:
        seen.add(f)
        groups[group(f)].append(f)
open(out, "w").write("".join(f + "\n" for g in groups for f in g))
print("symbol-order: groups (version, 0-turn own, 0-turn shared, one-shot own, "
      "one-shot shared, gateway, help):", ", ".join(str(len(g)) for g in groups), file=sys.stderr)
PY
echo "symbol-order: $(wc -l <"$out") functions in $out"
