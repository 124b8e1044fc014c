#!/usr/bin/env bash
# Start-up cost of `hermes` (issue 28, part 3): whole-process CPU
# (`perf stat -e task-clock`, a software counter, so it works on VMs without
# hardware counters) and requests sent to the provider, for
#
#   version   `hermes --version`
#   zero      a one-shot whose answer needs no tool call
#   twenty    a one-shot with 20 tool turns (`todo` list calls)
#
# each on a cold HERMES_HOME (the first run: the context window is probed)
# and a warm one (the window comes from the store's cache). Reported: the
# median task-clock over RUNS runs, in ms, and the provider's request count
# of one warm and one cold one-shot.
#
#   scripts/startup-cpu.sh [RUNS]      (default 31)
#
# Uses target/release/hermes (HERMES_EXE overrides) and the loopback fake
# provider (`cargo build -p hermes-tests --example fake_provider`; a debug
# build is fine: only hermes is measured). Not a test: CPU time on a shared
# machine is noisy; compare figures taken in one sitting.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-31}
exe=${HERMES_EXE:-target/release/hermes}
[ -x "$exe" ] || cargo build --release --locked -p hermes-cli --bin hermes
[ -x target/debug/examples/fake_provider ] ||
  cargo build -q --locked -p hermes-tests --example fake_provider

tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
# Started in this shell, not in a command substitution: a provider started
# in `$(...)` would be the subshell's child, missing from `pids`, never
# killed, and holding a caller's pipe (`| tail`) open for ever.
start_provider() { # TURNS; its base URL lands in $tmp/urlTURNS
  target/debug/examples/fake_provider "$1" "$tmp/count$1" >"$tmp/url$1" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$tmp/url$1" ] && break; sleep 0.1; done
}
start_provider 0
start_provider 20
url0=$(cat "$tmp/url0")
url20=$(cat "$tmp/url20")

# The median task-clock (ms) of RUNS runs of "$@", each with HERMES_HOME=$home.
median_ms() {
  local home=$1 url=$2; shift 2
  for _ in $(seq "$runs"); do
    HERMES_HOME=$home HOME=$home HERMES_BASE_URL=$url HERMES_MODEL=fake \
      perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ { print $1 }'
  done | sort -n | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'
}

warm=$tmp/warm
mkdir -p "$warm"
HERMES_HOME=$warm HOME=$warm HERMES_BASE_URL=$url0 HERMES_MODEL=fake \
  "$exe" -Q -z "warm up" --toolsets todo >/dev/null
HERMES_HOME=$warm HOME=$warm HERMES_BASE_URL=$url20 HERMES_MODEL=fake \
  "$exe" -Q -z "warm up" --toolsets todo >/dev/null

printf 'version\tms=%s\n' "$(median_ms "$warm" "$url0" "$exe" --version)"
printf 'zero\twarm\tms=%s\n' "$(median_ms "$warm" "$url0" "$exe" -Q -z hello --toolsets todo)"
printf 'twenty\twarm\tms=%s\n' "$(median_ms "$warm" "$url20" "$exe" -Q -z "do 20 things" --toolsets todo)"

# Cold: a fresh HERMES_HOME every run (the window is probed each time).
cold_ms() {
  local url=$1; shift
  for i in $(seq "$runs"); do
    local home=$tmp/cold$i
    mkdir -p "$home"
    HERMES_HOME=$home HOME=$home HERMES_BASE_URL=$url HERMES_MODEL=fake \
      perf stat -x, -e task-clock "$exe" "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ { print $1 }'
    rm -rf "$home"
  done | sort -n | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'
}
printf 'zero\tcold\tms=%s\n' "$(cold_ms "$url0" -Q -z hello --toolsets todo)"
printf 'twenty\tcold\tms=%s\n' "$(cold_ms "$url20" -Q -z "do 20 things" --toolsets todo)"

# Requests per one-shot, as the provider counted them.
requests() { sleep 0.1; cat "$tmp/count0"; }
before=$(requests)
HERMES_HOME=$warm HOME=$warm HERMES_BASE_URL=$url0 HERMES_MODEL=fake \
  "$exe" -Q -z hello --toolsets todo >/dev/null
printf 'requests\twarm\t%s\n' "$(($(requests) - before))"
mkdir -p "$tmp/once"
before=$(requests)
HERMES_HOME=$tmp/once HOME=$tmp/once HERMES_BASE_URL=$url0 HERMES_MODEL=fake \
  "$exe" -Q -z hello --toolsets todo >/dev/null
printf 'requests\tcold\t%s\n' "$(($(requests) - before))"
