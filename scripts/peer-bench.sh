#!/usr/bin/env bash
# The loop against hermes-agent (issue 39, item 5): whole-process CPU per
# loop iteration of `hermes` and of the Python hermes-agent, measured in the
# same sitting against the same loopback fake provider (BENCHMARKS.md, "The
# loop against hermes-agent"). A measurement, not a fence: .ci/run does not
# run it.
#
#   scripts/peer-bench.sh [PAIRS]      (default 11, at least 7)
#
# Each program runs one-shots of 20 tool turns (`todo` calls, then a text
# answer) and of 0 tool turns, each in a fresh home, interleaved: hermes 20,
# hermes 0, the floor 20, the floor 0, the plain program 20 and 0,
# hermes-agent 20 and 0, PAIRS times, so a change in the machine's load
# reaches every program alike. CPU
# is user + system of the whole process tree as wait4 reports it (the
# `rusage` example: hermes-agent runs `file`, `uname`, `pip --version` and
# two `python -c` at start-up, and those count). Per iteration = (CPU of
# the 20-turn run - CPU of the 0-turn run of the same pair) / 20, median
# over the pairs; start-up = median CPU of the 0-turn runs; peak RSS =
# median ru_maxrss of the 20-turn runs.
#
# Beside them run two programs built with the release profile. The floor
# (store/examples/loop_floor.rs) only asks the provider over one socket and
# keeps the conversation in SQLite: what any such program pays. The plain
# program (store/examples/loop_plain.rs) does a one-shot's work with the
# design's packages — ureq, serde_json, rusqlite — used plainly, sending
# the prompt and tools hermes sent (its first request, captured by the fake
# provider) and running the todo calls: what the same packages cost without
# hermes's work on the hot path. Their figures say how near hermes is to
# the floor, what a plain port would reach, and what ratio against
# hermes-agent each reaches in this sitting.
#
# Every run is checked to have done its turns: the fake provider counts the
# requests it gets, and a 20-turn run must send exactly 20 more than the
# 0-turn run of its pair (a run that failed early would measure nothing).
#
# Inputs (environment):
#   HERMES_EXE         the hermes to measure (default: the x86_64 musl
#                      release build, target/x86_64-unknown-linux-musl/
#                      release/hermes, built when missing)
#   HERMES_AGENT_VENV  a venv with hermes-agent installed (default: the one
#                      .ci/run makes, ${HERMES_CI_CACHE:-~/.cache/hermes-ci}/
#                      hermes-agent-0.19.0); made with
#                      python3 -m venv DIR && DIR/bin/pip install hermes-agent==0.19.0
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=${1:-11}
[ "$pairs" -ge 7 ] || { echo "peer-bench: at least 7 pairs" >&2; exit 2; }
turns=20
HERMES_AGENT_PIN=0.19.0
venv=${HERMES_AGENT_VENV:-${HERMES_CI_CACHE:-$HOME/.cache/hermes-ci}/hermes-agent-$HERMES_AGENT_PIN}
agent=$venv/bin/hermes
[ -x "$agent" ] || { echo "peer-bench: no hermes-agent at $agent (set HERMES_AGENT_VENV)" >&2; exit 1; }
exe=${HERMES_EXE:-target/x86_64-unknown-linux-musl/release/hermes}
if [ ! -x "$exe" ] && [ -z "${HERMES_EXE:-}" ]; then
  nice -n 10 cargo build --locked --release --target x86_64-unknown-linux-musl -p hermes-cli
fi
[ -x "$exe" ] || { echo "peer-bench: no executable at $exe" >&2; exit 1; }
exe=$(realpath "$exe")
# The helpers in the debug profile: only the agents and the floor are measured.
cargo build -q --locked -p hermes-tests --example fake_provider --example rusage
ex=$PWD/target/debug/examples
nice -n 10 cargo build -q --locked --release --target x86_64-unknown-linux-musl -p hermes-store \
  --example loop_floor --example loop_plain
floor=$PWD/target/x86_64-unknown-linux-musl/release/examples/loop_floor
plain=$PWD/target/x86_64-unknown-linux-musl/release/examples/loop_plain

work=$(mktemp -d)
. scripts/lib/example-servers.sh
# The fresh homes `rusage --fresh-home` makes land in $work, removed at exit.
export TMPDIR=$work

# Three providers, each counting the requests it receives: 20 turns in this
# hermes's `todo` form, 20 turns in hermes-agent's (its tool reads `todos`;
# given this hermes's `action`/`items` it would only read the list back), and
# 0 turns for both.
start_server fake_provider "$turns" "$work/count20" --first-request="$work/request.json"
url20=$url
start_server fake_provider "$turns" "$work/count20a" --todo-schema=hermes-agent
url20a=$url
start_server fake_provider 0 "$work/count0"
url0=$url

# Both run in an empty directory (hermes-agent reads AGENTS.md and the like
# from its working directory), hermes-agent with its venv first on PATH, as
# an activated venv has it, and a throwaway HOME.
mkdir -p "$work/cwd" "$work/home"
cd "$work/cwd"
path=$venv/bin:/usr/bin:/bin
# The command line of one one-shot of PROGRAM against URL with TURNS, into
# the array `cmd`, and its environment's additions into `vars` (given to
# rusage's own environment, which the run inherits: an `env` in front would
# be measured too, ≈ 1.1 ms of a dynamically linked program).
oneshot() {
  case $1 in
    hermes) vars=(HERMES_BASE_URL="$2" HERMES_MODEL=fake)
      cmd=("$exe" -Q -z "do $3 things" --toolsets todo) ;;
    floor) vars=(HERMES_BASE_URL="$2")
      cmd=("$floor") ;;
    plain) vars=(HERMES_BASE_URL="$2" HERMES_FLOOR_REQUEST="$work/request.json")
      cmd=("$plain") ;;
    agent) vars=(PATH="$path" HOME="$work/home" CUSTOM_BASE_URL="$2")
      cmd=("$agent" -z "do $3 things" -m fake --provider custom -t todo) ;;
  esac
}

# Once each, answer checked, also warming the page cache and hermes-agent's
# bytecode cache; not measured.
for prog in hermes agent; do
  url=$url20
  [ $prog = agent ] && url=$url20a
  oneshot $prog "$url" $turns
  answer=$(env HERMES_HOME="$(mktemp -d)" "${vars[@]}" "${cmd[@]}")
  [ "$answer" = "Done after $turns tool turns." ] || {
    echo "peer-bench: the $turns-turn one-shot of $prog answered: $answer" >&2
    exit 1
  }
done
# The plain program starts from hermes's first request (written by the
# provider during hermes's run above) and must reach the same answer.
[ -s "$work/request.json" ] || { echo "peer-bench: no request captured" >&2; exit 1; }
oneshot plain "$url20" $turns
answer=$(env HERMES_HOME="$(mktemp -d)" "${vars[@]}" "${cmd[@]}")
[ "$answer" = "Done after $turns tool turns." ] || {
  echo "peer-bench: the $turns-turn run of the plain program answered: $answer" >&2
  exit 1
}

field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
# The fake rewrites its count file within 5 ms of a request.
count() { sleep 0.05; cat "$1"; }
# One measured run of PROGRAM against URL with TURNS, whose provider counts
# into COUNTFILE: its CPU (us), peak RSS (KiB) and requests land in
# $cpu, $rss and $requests.
one_run() {
  local before after out
  before=$(count "$4")
  oneshot "$1" "$2" "$3"
  out=$(env "${vars[@]}" "$ex/rusage" --runs 1 --fresh-home -- "${cmd[@]}")
  cpu=$(echo "$out" | field cpu_us_median)
  rss=$(echo "$out" | field maxrss_kib_median)
  after=$(count "$4")
  [ -n "$cpu" ] && [ -n "$rss" ] || { echo "peer-bench: rusage said: $out" >&2; exit 1; }
  [[ $before =~ ^[0-9]+$ && $after =~ ^[0-9]+$ ]] ||
    { echo "peer-bench: request counts '$before', '$after' from $4" >&2; exit 1; }
  requests=$((after - before))
}

progs=(hermes floor plain agent)
for prog in "${progs[@]}"; do : >"$work/$prog.runs"; done
for i in $(seq "$pairs"); do
  for prog in "${progs[@]}"; do
    url=$url20 cf=$work/count20
    [ $prog = agent ] && url=$url20a cf=$work/count20a
    one_run $prog "$url" $turns "$cf"
    c20=$cpu r20=$rss q20=$requests
    one_run $prog "$url0" 0 "$work/count0"
    c0=$cpu r0=$rss q0=$requests
    [ $((q20 - q0)) = $turns ] || {
      echo "peer-bench: pair $i, $prog: $q20 requests for $turns turns, $q0 for 0" >&2
      exit 1
    }
    echo "$c20 $c0 $((c20 - c0)) $r20 $r0 $q20 $q0" >>"$work/$prog.runs"
  done
done

# Median of column C of a runs file.
median() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for prog in "${progs[@]}"; do
  f=$work/$prog.runs
  printf 'runs\t%s: cpu20_us cpu0_us diff_us maxrss20_kib maxrss0_kib requests20 requests0\n' "$prog"
  sed 's/^/\t/; s/ /\t/g' "$f"
  declare "${prog}_iter=$(($(median "$f" 3) / turns))"
  declare "${prog}_iter2=$((($(median "$f" 1) - $(median "$f" 2)) / turns))"
  declare "${prog}_start=$(median "$f" 2)"
  declare "${prog}_rss20=$(median "$f" 4)"
  declare "${prog}_rss0=$(median "$f" 5)"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a / (b > 0 ? b : 1) }'; }
# The same to two decimals, with its `x` (hermes over the floor).
ratio2() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / (b > 0 ? b : 1) }'; }
printf 'versions\thermes: %s (%s); hermes-agent: %s\n' "$("$exe" --version)" "$exe" \
  "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("hermes-agent"))')"
printf 'pairs\t%s\n' "$pairs"
printf 'cpu\tper iteration, median of the pairs'"'"' differences / %s (us)\thermes %s\thermes-agent %s\tratio %sx\n' \
  "$turns" "$hermes_iter" "$agent_iter" "$(ratio "$agent_iter" "$hermes_iter")"
printf 'cpu\tper iteration, difference of the medians / %s (us)\thermes %s\thermes-agent %s\tratio %sx\n' \
  "$turns" "$hermes_iter2" "$agent_iter2" "$(ratio "$agent_iter2" "$hermes_iter2")"
printf 'cpu\t0-turn one-shot, fresh home (us)\thermes %s\thermes-agent %s\tratio %sx\n' \
  "$hermes_start" "$agent_start" "$(ratio "$agent_start" "$hermes_start")"
printf 'rss\tpeak, %s-turn one-shot (KiB)\thermes %s\thermes-agent %s\tratio %sx\n' \
  "$turns" "$hermes_rss20" "$agent_rss20" "$(ratio "$agent_rss20" "$hermes_rss20")"
printf 'rss\tpeak, 0-turn one-shot (KiB)\thermes %s\thermes-agent %s\n' "$hermes_rss0" "$agent_rss0"
# The floor: hermes's figures over the floor's, and the floor's own ratio
# against hermes-agent (the most any such program reaches in this sitting).
printf 'floor\tper iteration, median of the pairs'"'"' differences / %s (us)\tfloor %s\thermes/floor %s\thermes-agent/floor %sx\n' \
  "$turns" "$floor_iter" "$(ratio2 "$hermes_iter" "$floor_iter")" \
  "$(ratio "$agent_iter" "$floor_iter")"
printf 'floor\t0-turn one-shot, fresh home (us)\tfloor %s\thermes/floor %s\n' \
  "$floor_start" "$(ratio2 "$hermes_start" "$floor_start")"
# The plain program on the same packages: hermes over it, and its ratio.
printf 'plain\tper iteration, median of the pairs'"'"' differences / %s (us)\tplain %s\thermes/plain %s\thermes-agent/plain %sx\n' \
  "$turns" "$plain_iter" "$(ratio2 "$hermes_iter" "$plain_iter")" \
  "$(ratio "$agent_iter" "$plain_iter")"
printf 'plain\t0-turn one-shot, fresh home (us)\tplain %s\thermes/plain %s\n' \
  "$plain_start" "$(ratio2 "$hermes_start" "$plain_start")"
