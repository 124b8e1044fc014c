#!/usr/bin/env bash
# Records the symbol order of the release `hermes` (cli/build.rs passes it to
# lld): the functions that `--version`, `--help`, a 20-turn one-shot (fresh
# and warm home) and an idle Telegram gateway execute, grouped by which runs
# reach them (below), so that the linker places each run's code side by side
# and a run maps little more text than it executes (benchmarks/runs/2026-12-04-symbol-order.md).
#
#   scripts/symbol-order.sh [TARGET [board]]   default x86_64-unknown-linux-musl
#
# A target this machine does not run natively (aarch64: valgrind does not
# work under qemu-user) gets the x86_64 order carried over: the same
# functions, found in that target's unstripped build by their names with the
# crates' hashes and LTO's numbered copies (`.1433`) left out (the code that
# runs is the same source; a name that matches several instantiations
# brings all of them). A carried-over order misses what the other build
# inlined differently, so every target this machine runs is recorded
# itself: the board build's carried-over order left 29 of the 64 KiB
# stretches a 0-turn one-shot executes outside its ordered code
# (benchmarks/runs/2026-12-04-symbol-order.md).
#
# Run it after changes that move much code (the budgets' RSS figures creep up
# when the order goes stale: new hot functions land outside the hot group),
# then commit cli/symbol-order/TARGET.txt (all three: x86_64 first, then
# `aarch64-unknown-linux-musl` and `x86_64-unknown-linux-gnu board`). Needs valgrind (callgrind) and a
# target the build machine runs natively. The default features are recorded:
# symbol names carry a hash of the crate's features and target, so the order
# of one build does not name the functions of another.
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
# address; the order in force does not change any name).
nice -n 10 cargo rustc --locked --release --target "$target" -p hermes-cli --bin hermes "${features[@]}" -- -C strip=none
exe=target/$target/release/hermes
out=cli/symbol-order/$target$suffix.txt
mkdir -p "$(dirname "$out")"

if [ "${target%%-*}" != "$(uname -m)" ]; then
  from=cli/symbol-order/x86_64-unknown-linux-musl.txt
  [ -f "$from" ] || { echo "symbol-order: record $from first" >&2; exit 1; }
  nm --defined-only "$exe" | awk '$2 ~ /^[tTwW]$/ { print $3 }' >"$out.names"
  python3 - "$from" "$out.names" "$out" <<'PY'
import re, sys
src, names, out = sys.argv[1:4]
def base(name):
    # LTO numbers the local copies it makes (`.1433`, `.llvm.123`), per
    # build; legacy mangling ends in the hash (17h + 16 hex digits + E); v0
    # names carry crate disambiguators (Cs…_)
    name = re.sub(r"(\.llvm)?\.[0-9]+$", "", name)
    name = re.sub(r"17h[0-9a-f]{16}E$", "", name)
    return re.sub(r"Cs[0-9A-Za-z]+_", "C", name)
by_base = {}
for n in open(names).read().split():
    by_base.setdefault(base(n), []).append(n)
seen, order = set(), []
for n in open(src).read().split("\n"):
    for full in by_base.get(base(n), []):
        if full not in seen:
            seen.add(full)
            order.append(full)
open(out, "w").write("".join(f + "\n" for f in order))
PY
  rm -f "$out.names"
  echo "symbol-order: $(wc -l <"$out") functions in $out (from $(wc -l <"$from") in $from)"
  exit 0
fi

command -v valgrind >/dev/null || { echo "symbol-order: needs valgrind (apt install valgrind)" >&2; exit 1; }
cargo build -q --locked -p hermes-tests --example fake_provider --example fake_telegram
ex=target/debug/examples

work=$(mktemp -d)
. scripts/lib/example-servers.sh
start_server fake_provider 20
provider=$url
start_server fake_telegram
telegram=$url

profile() { # name command… (under callgrind, names as the linker sees them)
  local name=$1
  shift
  valgrind --tool=callgrind --dump-instr=no --compress-strings=no --demangle=no \
    --callgrind-out-file="$work/cg.$name" "$@" >/dev/null 2>"$work/$name.log" || {
    cat "$work/$name.log" >&2
    exit 1
  }
}
profile version "$exe" --version
profile help "$exe" --help
home=$work/home
mkdir -p "$home"
for run in fresh warm; do
  HERMES_HOME=$home HERMES_BASE_URL=$provider HERMES_MODEL=fake \
    profile "oneshot-$run" "$exe" -Q -z "do 20 things" --toolsets todo
done
# valgrind does not know the Landlock system calls: the gateway runs with the
# sandbox off here (its set-up code is small and stays unordered).
gateway_home=$work/gateway
mkdir -p "$gateway_home"
printf '[agent]\nsandbox = "off"\n' >"$gateway_home/config.toml"
HERMES_HOME=$gateway_home HERMES_BASE_URL=$provider HERMES_MODEL=fake \
  TELEGRAM_BOT_TOKEN=123456:order-token TELEGRAM_API_URL=$telegram TELEGRAM_POLL_TIMEOUT=30 \
  valgrind --tool=callgrind --dump-instr=no --compress-strings=no --demangle=no \
  --callgrind-out-file="$work/cg.gateway" "$exe" gateway run >"$work/gateway.log" 2>&1 &
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

# Every function callgrind saw (as caller or callee) in each run; "'2"
# marks a recursion level, addresses without a name are skipped.
for run in version help oneshot-fresh oneshot-warm gateway; do
  sed -n 's/^c\{0,1\}fn=//p' "$work/cg.$run" | sed "s/'[0-9]*\$//" | grep -v '^0x' |
    awk '!seen[$0]++' >"$work/$run.fns"
done
# Grouped by which runs reach them, so that each run's code is one stretch
# with little of the others' inside it: what `--version` runs (every start
# runs it), then what both a one-shot and the gateway run, then the
# one-shot's own, then the gateway's own, then `--help`'s; first sight
# first within a group. (A plain first-sight order put the one-shot's own
# code in the middle of the gateway's.)
python3 - "$work" "$out" <<'PY'
import sys
work, out = sys.argv[1:3]
runs = {r: open(f"{work}/{r}.fns").read().split() for r in
        ("version", "help", "oneshot-fresh", "oneshot-warm", "gateway")}
first = []
for r in ("version", "oneshot-fresh", "oneshot-warm", "gateway", "help"):
    first += runs[r]
version = set(runs["version"])
oneshot = set(runs["oneshot-fresh"]) | set(runs["oneshot-warm"])
gateway = set(runs["gateway"])
def group(f):
    if f in version:
        return 0
    if f in oneshot and f in gateway:
        return 1
    if f in oneshot:
        return 2
    if f in gateway:
        return 3
    return 4
seen, groups = set(), [[] for _ in range(5)]
for f in first:
    if f not in seen:
        seen.add(f)
        groups[group(f)].append(f)
open(out, "w").write("".join(f + "\n" for g in groups for f in g))
print("symbol-order: groups (version, both, one-shot, gateway, help):",
      ", ".join(str(len(g)) for g in groups), file=sys.stderr)
PY
echo "symbol-order: $(wc -l <"$out") functions in $out"
