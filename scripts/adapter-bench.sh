#!/usr/bin/env bash
# What each adapter costs at run time (issues 41, 42; BENCHMARKS.md
# "Adapters: idle RSS and messages per second"): the conformance kit's
# `NAME::measure` (gateway/tests/conformance_kit/measure.rs) on a release
# `hermes` serving one platform against its peer on 127.0.0.1.
#
#   scripts/adapter-bench.sh [PLATFORM...]      default: the platforms whose
#                                               peers need no extra server
#   HERMES_EXE=path/to/hermes                   the build measured (default:
#       target/x86_64-unknown-linux-musl/release/hermes, the amd64 package's)
#   HERMES_MEASURE_MESSAGES=N (100), HERMES_MEASURE_SETTLE_SECS=S (5)
#
# Prints one tab-separated line per platform: idle RSS and peak RSS (KiB),
# messages, users, seconds, messages per second. Not run by .ci/run: a
# figure, not a check (CPU time on a shared machine is noise).
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${HERMES_EXE:-target/x86_64-unknown-linux-musl/release/hermes}
[ -x "$exe" ] || { echo "adapter-bench: no executable at $exe (build it, or set HERMES_EXE)" >&2; exit 1; }
exe=$(realpath "$exe")
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(telegram slack whatsapp signal discord)
nice -n 10 cargo test -q --locked -p hermes-gateway --test all --no-run
printf 'platform\tidle RSS KiB\tpeak RSS KiB\tmessages\tusers\tseconds\tmessages/s\n'
for p in "${platforms[@]}"; do
  line=$(HERMES_CONFORMANCE_EXE=$exe cargo test -q --locked -p hermes-gateway \
    --test all "conformance::$p::measure" -- --exact --ignored --nocapture 2>/dev/null | grep -P '^measure\t') \
    || { printf '%s\tfailed\n' "$p"; continue; }
  awk -F'\t' '{ printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", $2, $4, $6, $8, $10, $12, $14 }' <<<"$line"
done
