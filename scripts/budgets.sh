#!/usr/bin/env bash
# The budgets (issue 18, decided in issue 32): what `hermes` costs, measured,
# and with --check enforced (.ci/cross runs it so, on the release builds it
# made; see BENCHMARKS.md "Current figures" and
# benchmarks/runs/2026-12-02-board-build.md):
#
#   scripts/budgets.sh            report every figure
#   scripts/budgets.sh --check    report, then fail if a limit is exceeded
#   scripts/budgets.sh --cpu      also the CPU per loop iteration (31 pairs
#                                 of runs). Its target is in microseconds;
#                                 what --check enforces is its ratio to the
#                                 hello world's CPU in the same sitting (CPU
#                                 time on a shared machine is too noisy for
#                                 a gate in microseconds)
#
# Two builds are measured:
#   default   the full build, static-pie on musl (issue 39): x86_64 at
#             target/x86_64-unknown-linux-musl/release/hermes (HERMES_EXE
#             overrides; built when missing), the amd64 package, a growth
#             fence; and aarch64 at
#             target/aarch64-unknown-linux-musl/release/hermes
#             (HERMES_AARCH64_EXE), the arm64 package: its size only
#             (under qemu-user the RSS would be qemu's), against issue
#             39's 9 MB target.
#   board     `--no-default-features --features board` (= telegram,wecom,web,
#             an option, no package's build any more), x86_64 at
#             target/x86_64-unknown-linux-gnu/release/hermes
#             (HERMES_BOARD_EXE). Issue 32's targets.
#             A build that is absent is reported "not measured".
#
# Figures (one tab-separated line each, then a verdict per budget):
#   size      stripped release binary, bytes
#   rss       peak RSS of a one-shot with 20 tool turns against the loopback
#             fake provider (median of 5 runs, fresh HERMES_HOME each), KiB
#   idle      RSS of `hermes gateway run` with Telegram (a loopback Bot API
#             that holds polls, as Telegram does) after it settled, KiB.
#             Both measure a copy of the binary written just now with
#             write()s, as a package manager installs it (`cp`; dpkg writes
#             the same way): on ext4 with kernel 6.16+ such a file is cached
#             in large folios, which a fault maps whole, and it reads
#             300-450 KiB more than the file the linker wrote through a
#             mapping (2026-12-06: board one-shot 5,928 against 5,584 KiB).
#             "From disk" is the copy after its pages were dropped, as the
#             gateway reads them after a reboot (reported, not fenced;
#             BENCHMARKS.md "Memory")
#   cpu       whole-process user+sys of a 20-turn one-shot minus a 0-turn
#             one, divided by 20 (median over 31 pairs of runs), us
set -euo pipefail
cd "$(dirname "$0")/.."

# Two numbers per measure (sizes in bytes, decimal MB; memory in KiB as the
# kernel reports it, 1 MB = 1000 KiB, the stricter reading):
#
# - TARGET: the budget (issue 32: for the board build). Reported as met or
#   MISSED; "-" where there is none (the default build has a fence only).
# - LIMIT: what --check enforces. Equal to the target where the target is
#   met; where it is not, today's figure plus stated slack, so growth fails
#   CI until someone decides otherwise (raise it here, in one place, and say
#   so in BENCHMARKS.md).
SIZE_X86_64_LIMIT=14800000     # TIGHTENED 2026-12-07 (was 14,895,000): 14,765,784 B, tool schemas as compact JSON text, not json! code (benchmarks/runs/2026-12-07-schemas-as-text.md). TIGHTENED 2026-12-06 (was 15,470,000): 14,862,296 B, tokio tasks spawned boxed and the PostgreSQL replies as one type (benchmarks/runs/2026-12-06-the-size-anatomy.md). TIGHTENED 2026-12-06 (was 15,510,000): 15,437,272 B in CI50, mail-parser's HTML converter gone (benchmarks/runs/2026-12-06-sqlite-in-the-arena.md). RAISED 2026-12-04 (was 15,320,000; benchmarks/runs/2026-12-04-budgets-after-the-fourth-wave-fourth-session.md): measured 15,356,248 B after this session's merges (15,243,992 B before them: +112,256 B of the features issues 42-46 asked for — files in send_message, notices in the transcript, reservations, charging, late delivery failures, Discord message edits); +~1 %
RSS_ONESHOT_TARGET_KIB=8000   # issue 39, item 4: the full build's one-shot
RSS_ONESHOT_LIMIT_KIB=8000     # = the target, met (2026-12-04: 4,580-4,832 KiB with a fresh symbol order, cli/build.rs; 9,824 KiB in CI without it; was 10,400). A stale order (code changed since scripts/symbol-order.sh recorded it) costs RSS first: re-record it when this creeps
RSS_IDLE_GATEWAY_TARGET_KIB=9000  # issue 39, item 4: the full build's idle Telegram gateway
RSS_IDLE_GATEWAY_LIMIT_KIB=9000  # = the target, met (2026-12-04: 5,656-5,680 KiB with a fresh symbol order; 12,080 KiB in CI without it; was 12,700)
SIZE_AARCH64_TARGET=9000000   # issue 39
SIZE_AARCH64_LIMIT=13340000   # TIGHTENED 2026-12-07 (was 13,410,000): 13,304,792 B in CI72, the tool schemas as compact text; +~0.3 %. TIGHTENED 2026-12-06 (was 14,000,000): 13,378,776 B, as for x86_64. TIGHTENED 2026-12-06 (was 14,040,000): 13,964,504 B in CI50, as for x86_64. RAISED 2026-12-05 (was 13,930,000; measured 13,895,000 in CI18): Discord and the WeCom AI bot became crates of their own (issue 40), and with no shared generics on stable Rust each crate instantiates the WebSocket stack's generic code (tungstenite, tokio-tungstenite, futures-util) again — x86_64, same sitting: +53,248 B for Discord, +53,376 B for WeCom, -11,392 B for the rand and md-5 lines leaving (benchmarks/runs/2026-12-05-crates-cost-generics.md); +~1 %
BOARD_SIZE_X86_64_TARGET=6500000
BOARD_SIZE_X86_64_LIMIT=9790000       # TIGHTENED 2026-12-07 (was 9,870,000): 9,761,584 B in CI72, the tool schemas as compact text; +~0.3 %. TIGHTENED 2026-12-06 (was 10,010,000): 9,847,344 B, tasks spawned boxed (benchmarks/runs/2026-12-06-the-size-anatomy.md). RAISED 2026-12-04 (was 9,850,000, with the default fence and for the same reason: benchmarks/runs/2026-12-04-budgets-after-the-fourth-wave-fourth-session.md): measured 9,910,192 B in CI15, the session's features in what every build carries (reservations, charging, transcript notes, late failures); +~1 %
BOARD_RSS_ONESHOT_TARGET_KIB=8000
BOARD_RSS_ONESHOT_LIMIT_KIB=8000      # = the target, met (2026-12-06: 5,584 KiB here with the board's order recorded from its own runs and a new database built in one step, 6,008 from a copy written by `cp`; 7,688 in CI45 with the order carried over from the default build; 9,668 in CI23 without any). A copy written by `cp` reads 300-900 KiB more than the linker's file (large page-cache folios)
BOARD_RSS_IDLE_GATEWAY_TARGET_KIB=9000
BOARD_RSS_IDLE_GATEWAY_LIMIT_KIB=9000   # = the target, met; TIGHTENED 2026-12-06 (was 9,600): 6,896 KiB here with the board's own recorded order (7,056 from disk; 9,144 in CI45 with the carried-over order)
CPU_ITERATION_TARGET_US=150    # issue 39, item 4; met on 2026-12-06 (107 us: memcpy of our own, the request's buffer kept)
CPU_ITERATION_RATIO_LIMIT=2.0  # the fence that target became: CPU per iteration over the hello world's in the same sitting, enforced with --cpu --check; measured 1.20-1.43 in three runs of one sitting on 2026-12-06 (107-124 us against 87-92 us), 1.34 in CI55 and 1.54 in CI56 (143 us against 93 us); +30 % on the worst, as the other CPU ratios
# Start-up against a static-pie hello world built and run in the same
# sitting (issue 39, item 4): ratios of median CPU (user + system, wait4)
# and page faults. Targets: `--version` 1.5x and 80 faults, a 0-turn
# one-shot in a warm home 5x and 300 faults. Limits: today's figure plus
# slack, as for the other unmet targets (CPU ratios on a shared machine are
# noisier than faults: more slack).
# Relative relocations of the static x86_64 build (its packed `.relr.dyn`
# decoded): every start of every command writes each one, and the pages
# they sit in are the bulk of `--version`'s faults. A table of pointers to
# strings (a second HTML entity table was 2,125) shows here before it moves
# the fault count past its slack.
RELOCATIONS_LIMIT=30300       # TIGHTENED 2026-12-06 (was 30,800): 29,687, the task harnesses' vtables gone (benchmarks/runs/2026-12-06-the-size-anatomy.md). 30,144 on 2026-12-06 (32,240 with mail-parser's HTML converter; benchmarks/runs/2026-12-06-sqlite-in-the-arena.md); +~2 %
VERSION_RATIO_TARGET=1.5
VERSION_RATIO_LIMIT=3.2       # TIGHTENED 2026-12-06 (was 4.0): 2.24-2.49x here and 2.32x in CI55 with the relocations applied by hermes_start (3.05x in CI54); +~30 %
VERSION_FAULTS_TARGET=80
VERSION_FAULTS_LIMIT=175      # TIGHTENED 2026-12-06 (was 185): 158 in CI50, 2,096 relocations fewer (one HTML entity table); 166-168 on 2026-12-04 with the symbol order
ONESHOT0_RATIO_TARGET=5.0
ONESHOT0_RATIO_LIMIT=24.0     # TIGHTENED 2026-12-07 (was 28x): 17.59x in CI75 (19.12x in CI74), the arena's lists and no Ctrl-C thread in a one-shot (benchmarks/runs/2026-12-07-the-arena-hands-freed-blocks-out-again.md); +~36 %, as CI56 read 21.5x when others read 19x. TIGHTENED 2026-12-06 (was 35x): 18.6-19.9x here and 21.4x in CI55 (memcpy of our own, the relocation walk, the system generator for ids; 24.2x in CI54); +~30 %. Earlier (was 50x): measured 26.6x here (4.97 ms against a 182 us hello world; 33x before the tools were built once and clap deferred) — CI15 read 35.4x where this machine read 33x
ONESHOT0_FAULTS_TARGET=300
ONESHOT0_FAULTS_LIMIT=300     # TIGHTENED 2026-12-07 a fourth time, to the target (was 340): 290 here (308 before in the same sitting), 296 in CI85, the CLI keeps 8 database pages cached, schema V13 (benchmarks/runs/2026-12-07-the-page-cache-of-a-one-shot.md). TIGHTENED 2026-12-07 a third time (was 380): 305-308 here (342 before), the 0-turn run's code in one stretch, SQLite's lookaside 8 slots, no C-library malloc (benchmarks/runs/2026-12-07-a-0-turn-run-in-one-stretch.md); +~10 %. TIGHTENED 2026-12-07 again (was 450): 338-342 here (394 before), the start-up arena hands freed blocks out again (benchmarks/runs/2026-12-07-the-arena-hands-freed-blocks-out-again.md); +11 %. TIGHTENED 2026-12-07 (was 490): 406 here (444 before), no tree of the tool schemas at start (benchmarks/runs/2026-12-07-schemas-as-text.md); +10 %. TIGHTENED 2026-12-06 again (was 520): 446 in CI50, SQLite's blocks from the start-up arena; earlier (was 690): 470-473 in CI40-CI46 (the start-up arena, the relocated pages at once; fault counts do not drift with the machine's speed as the ratio does); +10 %

check=0
cpu=0
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    --cpu) cpu=1 ;;
    *) echo "usage: $0 [--check] [--cpu]" >&2; exit 2 ;;
  esac
done

exe=${HERMES_EXE:-target/x86_64-unknown-linux-musl/release/hermes}
board_exe=${HERMES_BOARD_EXE:-target/x86_64-unknown-linux-gnu/release/hermes}
arm_exe=${HERMES_AARCH64_EXE:-target/aarch64-unknown-linux-musl/release/hermes}
if [ ! -x "$exe" ] && [ -z "${HERMES_EXE:-}" ]; then
  nice -n 10 cargo build --locked --release --target x86_64-unknown-linux-musl -p hermes-cli
fi
[ -x "$exe" ] || { echo "budgets: no executable at $exe" >&2; exit 1; }
# The helpers in the debug profile (the test build has them): their speed
# is not measured, only the hermes process they talk to.
cargo build -q --locked -p hermes-tests \
  --example fake_provider --example fake_telegram --example rusage
ex=target/debug/examples

work=$(mktemp -d)
. scripts/lib/example-servers.sh

failed=0
verdict() { # name value target limit unit
  local name=$1 value=$2 target=$3 limit=$4 unit=$5 met
  if [ "$value" = "-" ]; then
    printf 'budget\t%s\tnot measured\t(target %s, limit %s %s)\n' "$name" "$target" "$limit" "$unit"
    return
  fi
  if [ "$target" = "-" ]; then
    met="a growth fence (no target)"
  elif [ "$value" -le "$target" ]; then
    met="target met ($((100 * value / target))% of $target)"
  else
    met="target MISSED by $((value - target)) $unit ($value > $target)"
  fi
  if [ "$value" -le "$limit" ]; then
    printf 'budget\t%s\tok\t%s %s, limit %s: slack %s; %s\n' "$name" "$value" "$unit" "$limit" \
      "$((limit - value))" "$met"
  else
    printf 'budget\t%s\tLIMIT EXCEEDED\t%s > %s %s; %s\n' "$name" "$value" "$limit" "$unit" "$met"
    failed=1
  fi
}

ratio_verdict() { # name value target limit (decimal ratios)
  local name=$1 value=$2 target=$3 limit=$4 met
  if awk -v v="$value" -v t="$target" 'BEGIN { exit !(v <= t) }'; then
    met="target met ($value <= $target)"
  else
    met="target MISSED ($value > $target)"
  fi
  if awk -v v="$value" -v l="$limit" 'BEGIN { exit !(v <= l) }'; then
    printf 'budget\t%s\tok\t%sx, limit %sx; %s\n' "$name" "$value" "$limit" "$met"
  else
    printf 'budget\t%s\tLIMIT EXCEEDED\t%sx > %sx; %s\n' "$name" "$value" "$limit" "$met"
    failed=1
  fi
}

start_server fake_provider 20
provider20=$url
start_server fake_telegram
telegram=$url

# Peak RSS of a 20-turn one-shot of $1 (KiB) into $rss.
measure_oneshot() {
  local exe=$1 answer
  # The conversation really has its 20 tool turns (the fake answers from the
  # request, and a run that got fewer would measure too little).
  answer=$(HERMES_HOME=$(mktemp -d -p "$work") HERMES_BASE_URL=$provider20 HERMES_MODEL=fake \
    "$exe" -Q -z "do 20 things" --toolsets todo)
  [ "$answer" = "Done after 20 tool turns." ] || {
    echo "budgets: the 20-turn one-shot of $exe answered: $answer" >&2
    exit 1
  }
  rss=$(HERMES_BASE_URL="$provider20" HERMES_MODEL=fake "$ex/rusage" --runs 5 --fresh-home -- \
    "$exe" -Q -z "do 20 things" --toolsets todo | sed -n 's/.*maxrss_kib_median=\([0-9]*\).*/\1/p')
  [ -n "$rss" ] || { echo "budgets: no peak RSS from rusage" >&2; exit 1; }
}

# Drops $1's pages from the page cache (clean and unmapped ones: no process
# runs it now; written back first, or a file written just now would keep
# its dirty pages), so the next run reads it from disk.
drop_cached() {
  sync "$1"
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}

# RSS of $1's idle Telegram gateway (KiB) into $idle and $idle_peak.
measure_idle() {
  local exe=$1 home gateway
  home=$(mktemp -d -p "$work")
  : >"$home/gateway.log"
  HERMES_HOME=$home HERMES_BASE_URL=$provider20 HERMES_MODEL=fake \
    TELEGRAM_BOT_TOKEN=123456:budget-token TELEGRAM_API_URL=$telegram TELEGRAM_POLL_TIMEOUT=30 \
    "$exe" gateway run >"$home/gateway.log" 2>&1 &
  gateway=$!
  pids+=("$gateway")
  for _ in $(seq 600); do
    grep -q "gateway running" "$home/gateway.log" && break
    kill -0 "$gateway" 2>/dev/null || { cat "$home/gateway.log" >&2; exit 1; }
    sleep 0.05
  done
  # Settled: connected, one poll held.
  sleep 3
  idle=$(awk '/^VmRSS:/ { print $2 }' "/proc/$gateway/status")
  idle_peak=$(awk '/^VmHWM:/ { print $2 }' "/proc/$gateway/status")
  [ -n "$idle" ] || { echo "budgets: no RSS for the gateway (pid $gateway)" >&2; exit 1; }
  kill -TERM "$gateway"
  wait "$gateway" || true
}

# A copy of $1 written as a package manager writes it, into $installed
# (`$work/NAME/hermes`: the program keeps its name).
install_copy() {
  mkdir -p "$work/$2"
  installed=$work/$2/hermes
  cp "$1" "$installed"
}

# The memory figures of build NAME ($2) at $1, on an installed copy: the
# one-shot's peak into $rss, the idle gateway into $idle, printed, then the
# idle gateway with the copy read from disk (reported only).
measure_memory() {
  local fenced
  install_copy "$1" "$2"
  measure_oneshot "$installed"
  printf 'rss\t%s: one-shot, 20 tool turns\t%s\n' "$2" "$rss"
  measure_idle "$installed"
  fenced=$idle
  printf 'idle\t%s: gateway (Telegram), now / peak\t%s\t%s\n' "$2" "$idle" "$idle_peak"
  drop_cached "$installed"
  measure_idle "$installed"
  printf 'idle\t%s: gateway (Telegram), binary from disk, now / peak\t%s\t%s\n' "$2" "$idle" "$idle_peak"
  idle=$fenced
}

size=$(stat -c %s "$exe")
printf 'size\tdefault x86_64\t%s\n' "$size"
# The addresses a DT_RELR table relocates: an even entry is an address, an
# odd one a bitmap of the 63 words after the last address covered.
relocations=$(python3 -c 'import struct, subprocess, sys
path = sys.argv[1]
out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
fields = next(l.split("]", 1)[1].split() for l in out.splitlines() if " .relr.dyn " in l)
offset, size = int(fields[3], 16), int(fields[4], 16)
with open(path, "rb") as f:
    f.seek(offset)
    entries = struct.unpack("<%dQ" % (size // 8), f.read(size))
print(sum(1 if e & 1 == 0 else bin(e >> 1).count("1") for e in entries))' "$exe")
printf 'size\tdefault x86_64: relative relocations\t%s\n' "$relocations"
measure_memory "$exe" default
rss_default=$rss idle_default=$idle

# Start-up against a static-pie hello world, in this sitting: built with
# the flags of the static build (musl, lld, packed relocations, stripped).
start_server fake_provider 0
provider0=$url
hello=$work/hello
printf 'fn main() {\n    println!("hello world");\n}\n' >"$work/hello.rs"
rustc --edition 2024 -C opt-level=s -C strip=symbols --target x86_64-unknown-linux-musl \
  -C link-arg=-B/usr/lib/llvm-16/bin/ -C link-arg=-fuse-ld=lld \
  -C link-arg=-Wl,-z,pack-relative-relocs -o "$hello" "$work/hello.rs"
warm=$(mktemp -d -p "$work")
HERMES_HOME=$warm HERMES_BASE_URL=$provider0 HERMES_MODEL=fake "$exe" -Q -z "hello" >/dev/null
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
: >"$work/startup"
# Nine rounds of the three, each the median of 9 runs, so a change in the
# machine's load reaches all three alike; the figures are the medians of
# the rounds. (Five of five read the same binary's 0-turn ratio anywhere
# from 26x to 41x on this machine, one sitting: a hello world of ≈ 0.1 ms
# is at the mercy of every interruption. Nine of nine cost ≈ 1 s more.)
# All of it on one CPU (the last one): the kernel moves a process to the
# idlest CPU at exec, and a hello world that moved cost ≈ 190 us against
# ≈ 105 us for one that stayed — a bimodal denominator that swung one
# sitting's 0-turn ratio from 14x to 37x between rounds; pinned, the
# hello world read 108-133 us and the ratio's median 30-32x in three
# sittings (benchmarks/runs/2026-12-05-start-up-ratios-on-one-cpu.md).
# hermes's threads then share that CPU too: the figure is its whole CPU.
one_cpu=$(($(nproc) - 1))
for _ in 1 2 3 4 5 6 7 8 9; do
  h=$(taskset -c "$one_cpu" "$ex/rusage" --runs 9 -- "$hello")
  v=$(taskset -c "$one_cpu" "$ex/rusage" --runs 9 -- "$exe" --version)
  # The variables reach hermes through rusage's environment: an `env`
  # in front would be measured too (coreutils' `env` is dynamically
  # linked: ≈ 1.1 ms and 76 faults here, six hello worlds).
  o=$(HERMES_HOME="$warm" HERMES_BASE_URL="$provider0" HERMES_MODEL=fake \
    taskset -c "$one_cpu" "$ex/rusage" --runs 9 -- "$exe" -Q -z "hello")
  echo "$(echo "$h" | field cpu_us_median) $(echo "$h" | field minflt_median)" \
    "$(echo "$v" | field cpu_us_median) $(echo "$v" | field minflt_median)" \
    "$(echo "$o" | field cpu_us_median) $(echo "$o" | field minflt_median)" >>"$work/startup"
done
col_median() { awk -v c="$1" '{ print $c }' "$work/startup" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# The ratio of each round, then their median.
ratio_median() { awk -v a="$1" '{ printf "%.2f\n", $a / ($1 > 0 ? $1 : 1) }' "$work/startup" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
hello_cpu=$(col_median 1) hello_faults=$(col_median 2)
version_faults=$(col_median 4) oneshot0_faults=$(col_median 6)
version_ratio=$(ratio_median 3) oneshot0_ratio=$(ratio_median 5)
printf 'start\thello world (static-pie): CPU us / faults\t%s\t%s\n' "$hello_cpu" "$hello_faults"
printf 'start\thermes --version: CPU ratio / faults\t%s\t%s\n' "$version_ratio" "$version_faults"
printf 'start\t0-turn one-shot, warm home: CPU ratio / faults\t%s\t%s\n' "$oneshot0_ratio" "$oneshot0_faults"

board_size=- board_rss=- board_idle=-
if [ -x "$board_exe" ]; then
  board_size=$(stat -c %s "$board_exe")
  printf 'size\tboard x86_64\t%s\n' "$board_size"
  measure_memory "$board_exe" board
  board_rss=$rss board_idle=$idle
fi
arm_size=-
if [ -f "$arm_exe" ]; then
  arm_size=$(stat -c %s "$arm_exe")
  printf 'size\tdefault aarch64\t%s\n' "$arm_size"
fi

if [ "$cpu" = 1 ]; then
  # Pairs of runs, a 20-turn one then a 0-turn one, so that a change in the
  # machine's load hits both halves of a pair alike; the figure is the
  # median of the pairs' differences (and, for comparison, the difference
  # of the two medians).
  one_run() { # provider turns -> CPU microseconds of one run
    HERMES_BASE_URL="$1" HERMES_MODEL=fake "$ex/rusage" --runs 1 --fresh-home -- \
      "$exe" -Q -z "do $2 things" | sed -n 's/.*cpu_us_median=\([0-9]*\).*/\1/p'
  }
  pairs=31
  : >"$work/cpu20" >"$work/cpu0" >"$work/diff"
  for _ in $(seq "$pairs"); do
    a=$(one_run "$provider20" 20)
    b=$(one_run "$provider0" 0)
    echo "$a" >>"$work/cpu20"
    echo "$b" >>"$work/cpu0"
    echo $((a - b)) >>"$work/diff"
  done
  median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  c20=$(median "$work/cpu20")
  c0=$(median "$work/cpu0")
  per_median=$(($(median "$work/diff") / 20))
  printf 'cpu\tone-shot 20 turns / 0 turns, medians of %s runs (us)\t%s\t%s\n' "$pairs" "$c20" "$c0"
  printf 'cpu\tper iteration: median of the pairs'"'"' differences / 20 (us)\t%s\n' "$per_median"
  printf 'cpu\tper iteration: difference of the medians / 20 (us)\t%s\n' $(((c20 - c0) / 20))
  iteration_ratio=$(awk -v p="$per_median" -v h="$hello_cpu" 'BEGIN { printf "%.2f", p / (h > 0 ? h : 1) }')
  printf 'cpu\tper iteration against the hello world\t%s\n' "$iteration_ratio"
  if [ "$per_median" -le "$CPU_ITERATION_TARGET_US" ]; then
    printf 'budget\tCPU per iteration\treported\t%s us, target %s us: met\n' "$per_median" "$CPU_ITERATION_TARGET_US"
  else
    printf 'budget\tCPU per iteration\treported\t%s us, target %s us: MISSED\n' "$per_median" "$CPU_ITERATION_TARGET_US"
  fi
fi

verdict "default x86_64 binary" "$size" - "$SIZE_X86_64_LIMIT" bytes
verdict "default x86_64 relative relocations" "$relocations" - "$RELOCATIONS_LIMIT" relocations
verdict "default aarch64 binary" "$arm_size" "$SIZE_AARCH64_TARGET" "$SIZE_AARCH64_LIMIT" bytes
verdict "default one-shot peak RSS" "$rss_default" "$RSS_ONESHOT_TARGET_KIB" "$RSS_ONESHOT_LIMIT_KIB" KiB
verdict "default idle gateway RSS" "$idle_default" "$RSS_IDLE_GATEWAY_TARGET_KIB" "$RSS_IDLE_GATEWAY_LIMIT_KIB" KiB
ratio_verdict "--version CPU against hello world" "$version_ratio" "$VERSION_RATIO_TARGET" "$VERSION_RATIO_LIMIT"
verdict "--version page faults" "$version_faults" "$VERSION_FAULTS_TARGET" "$VERSION_FAULTS_LIMIT" faults
ratio_verdict "0-turn one-shot CPU against hello world" "$oneshot0_ratio" "$ONESHOT0_RATIO_TARGET" "$ONESHOT0_RATIO_LIMIT"
verdict "0-turn one-shot page faults" "$oneshot0_faults" "$ONESHOT0_FAULTS_TARGET" "$ONESHOT0_FAULTS_LIMIT" faults
if [ "$cpu" = 1 ]; then
  ratio_verdict "CPU per iteration against hello world" "$iteration_ratio" "$CPU_ITERATION_RATIO_LIMIT" "$CPU_ITERATION_RATIO_LIMIT"
fi
verdict "board x86_64 binary" "$board_size" "$BOARD_SIZE_X86_64_TARGET" "$BOARD_SIZE_X86_64_LIMIT" bytes
verdict "board one-shot peak RSS" "$board_rss" "$BOARD_RSS_ONESHOT_TARGET_KIB" "$BOARD_RSS_ONESHOT_LIMIT_KIB" KiB
verdict "board idle gateway RSS" "$board_idle" "$BOARD_RSS_IDLE_GATEWAY_TARGET_KIB" "$BOARD_RSS_IDLE_GATEWAY_LIMIT_KIB" KiB

if [ "$check" = 1 ] && [ "$failed" = 1 ]; then
  echo "budgets: a limit is exceeded (the limits are at the top of $0; BENCHMARKS.md, Current figures, says what they are)" >&2
  exit 1
fi
