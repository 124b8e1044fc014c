#!/usr/bin/env bash
# The budgets of issue 18 (SPEC X9): what `hermes` costs on a board,
# measured, and with --check enforced (CI runs it so; see BENCHMARKS.md,
# "Budgets"):
#
#   scripts/budgets.sh            report every figure
#   scripts/budgets.sh --check    report, then fail if a budget is exceeded
#   scripts/budgets.sh --cpu      also the CPU per loop iteration (slow:
#                                 2 x 15 runs; reported, never enforced)
#
# Figures (one tab-separated line each, then a verdict per budget):
#   size      x86_64 / aarch64 stripped release binary, bytes
#   rss       peak RSS of a one-shot with 20 tool turns against the loopback
#             fake provider (median of 5 runs, fresh HERMES_HOME each), KiB
#   idle      RSS of `hermes gateway run` with Telegram (a loopback Bot API
#             that holds polls, as Telegram does) after it settled, KiB
#   cpu       whole-process user+sys of a 20-turn one-shot minus a 0-turn
#             one, divided by 20 (medians of 15 runs each), microseconds
#
# Uses target/release/hermes (built when missing) and, when present,
# target/aarch64-unknown-linux-gnu/release/hermes (.ci/cross builds it; an
# aarch64 budget without that build is reported as not measured).
set -euo pipefail
cd "$(dirname "$0")/.."

# The budgets. Sizes in bytes (decimal MB), memory in KiB (as the kernel
# reports it; 1 MB = 1000 KiB here, the stricter reading).
SIZE_X86_64=6000000
SIZE_AARCH64=5500000
RSS_ONESHOT_KIB=8000
RSS_IDLE_GATEWAY_KIB=10000

check=0
cpu=0
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    --cpu) cpu=1 ;;
    *) echo "usage: $0 [--check] [--cpu]" >&2; exit 2 ;;
  esac
done

exe=${HERMES_EXE:-target/release/hermes}
arm_exe=target/aarch64-unknown-linux-gnu/release/hermes
if [ ! -x "$exe" ] && [ -z "${HERMES_EXE:-}" ]; then
  nice -n 10 cargo build --locked --release -p hermes-cli
fi
cargo build -q --locked --release -p hermes-tests \
  --example fake_provider --example fake_telegram --example rusage
ex=target/release/examples

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts an example server that prints its base URL; sets $url.
start_server() {
  local name=$1
  shift
  "$ex/$name" "$@" >"$work/$name.url" &
  pids+=($!)
  for _ in $(seq 200); do
    [ -s "$work/$name.url" ] && break
    sleep 0.05
  done
  url=$(head -1 "$work/$name.url")
  [ -n "$url" ] || { echo "budgets: $name did not start" >&2; exit 1; }
}

failed=0
verdict() { # name value budget unit
  if [ "$2" = "-" ]; then
    printf 'budget\t%s\tnot measured\t(budget %s %s)\n' "$1" "$3" "$4"
  elif [ "$2" -le "$3" ]; then
    printf 'budget\t%s\tok\t%s <= %s %s (%s%% of it)\n' "$1" "$2" "$3" "$4" $((100 * $2 / $3))
  else
    printf 'budget\t%s\tEXCEEDED\t%s > %s %s\n' "$1" "$2" "$3" "$4"
    failed=1
  fi
}

size=$(stat -c %s "$exe")
printf 'size\tx86_64\t%s\n' "$size"
arm_size=-
if [ -f "$arm_exe" ]; then
  arm_size=$(stat -c %s "$arm_exe")
  printf 'size\taarch64\t%s\n' "$arm_size"
fi

start_server fake_provider 20
provider20=$url
rss=$("$ex/rusage" --runs 5 --fresh-home -- env HERMES_BASE_URL="$provider20" HERMES_MODEL=fake \
  "$exe" -Q -z "do 20 things" | sed -n 's/.*maxrss_kib_median=\([0-9]*\).*/\1/p')
printf 'rss\tone-shot, 20 tool turns\t%s\n' "$rss"

start_server fake_telegram
home=$work/gateway
mkdir -p "$home"
HERMES_HOME=$home HERMES_BASE_URL=$provider20 HERMES_MODEL=fake \
  TELEGRAM_BOT_TOKEN=123456:budget-token TELEGRAM_API_URL=$url TELEGRAM_POLL_TIMEOUT=30 \
  "$exe" gateway run >"$work/gateway.log" 2>&1 &
gateway=$!
pids+=("$gateway")
for _ in $(seq 600); do
  grep -q "gateway running" "$work/gateway.log" && break
  kill -0 "$gateway" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
  sleep 0.05
done
# Settled: connected, one poll held.
sleep 3
idle=$(awk '/^VmRSS:/ { print $2 }' "/proc/$gateway/status")
idle_peak=$(awk '/^VmHWM:/ { print $2 }' "/proc/$gateway/status")
kill -TERM "$gateway"
wait "$gateway" || true
printf 'idle\tgateway (Telegram), now / peak\t%s\t%s\n' "$idle" "$idle_peak"

if [ "$cpu" = 1 ]; then
  start_server fake_provider 0
  provider0=$url
  median_cpu() {
    "$ex/rusage" --runs 15 --fresh-home -- env HERMES_BASE_URL="$1" HERMES_MODEL=fake \
      "$exe" -Q -z "do $2 things" | sed -n 's/.*cpu_us_median=\([0-9]*\).*/\1/p'
  }
  c20=$(median_cpu "$provider20" 20)
  c0=$(median_cpu "$provider0" 0)
  printf 'cpu\tone-shot 20 turns / 0 turns / per iteration (us)\t%s\t%s\t%s\n' \
    "$c20" "$c0" $(((c20 - c0) / 20))
fi

verdict "x86_64 binary" "$size" "$SIZE_X86_64" bytes
verdict "aarch64 binary" "$arm_size" "$SIZE_AARCH64" bytes
verdict "one-shot peak RSS" "$rss" "$RSS_ONESHOT_KIB" KiB
verdict "idle gateway RSS" "$idle" "$RSS_IDLE_GATEWAY_KIB" KiB

if [ "$check" = 1 ] && [ "$failed" = 1 ]; then
  echo "budgets: exceeded (see BENCHMARKS.md, Budgets, for what they are and how to measure)" >&2
  exit 1
fi
