#!/usr/bin/env bash
# Sizes (and, with `rss`, peak memory) of what the board builds produce, one
# tab-separated line per artefact, for BENCHMARKS.md and for budget checks:
#
#   scripts/board-sizes.sh            every hermes binary built so far + firmware
#   scripts/board-sizes.sh firmware   only the firmware example
#   scripts/board-sizes.sh rss        also a 20-tool-turn one-shot's peak RSS
#                                     per target (qemu-user for foreign ones)
#
# Output lines (fields separated by tabs):
#   hermes   <target>  bytes=<stripped file size>  glibc=<newest GLIBC_ symbol version needed>
#   rss      <target>  kib=<max resident set size>  exit=<status>  (rss mode; under
#            qemu-user this is qemu's RSS: guest memory + qemu + its translation cache)
#   firmware <target>  flash=<text+data bytes>  ram=<data+bss bytes>  (static; stack comes on top)
# Reads existing build outputs only; build them first (.ci/cross does).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}

# Each target's runner (from .cargo/config.toml) and where the armv7, armv6
# and riscv64 builds lie.
. scripts/lib/targets.sh

firmware() {
  local elf=core/firmware/target/thumbv7em-none-eabihf/release/hermes-firmware-demo
  [ -f "$elf" ] || { echo "no firmware build at $elf (cd core/firmware && cargo build --release)" >&2; return 1; }
  # Berkeley format: text (code + rodata + vectors: flash), data (flash and RAM), bss (RAM).
  arm-none-eabi-size "$elf" | awk -v t=thumbv7em-none-eabihf 'NR == 2 {
    printf "firmware\t%s\tflash=%d\tram=%d\n", t, $1 + $2, $2 + $3 }'
}

if [ "$mode" = firmware ]; then
  firmware
  exit 0
fi

host=$(rustc -vV | sed -n 's/^host: //p')
declare -A exe=([$host]=target/release/hermes)
for dir in target/*-linux-*/release "$std_from_source_dir"/*-linux-*/release; do
  t=${dir%/release}
  t=${t##*/}
  [ -f "$dir/hermes" ] && exe[$t]=$dir/hermes
done

for t in $(printf '%s\n' "${!exe[@]}" | sort); do
  f=${exe[$t]}
  [ -f "$f" ] || continue
  bytes=$(stat -c %s "$f")
  # The newest glibc symbol version the binary needs: the oldest distro it runs on.
  glibc=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 || true)
  # Packed relocations (the arm builds) need 2.36 whatever the symbols say.
  if readelf -V -W "$f" 2>/dev/null | grep -q GLIBC_ABI_DT_RELR; then
    glibc="$(printf '%s\nGLIBC_2.36\n' "$glibc" | sort -Vu | tail -1) (DT_RELR)"
  fi
  printf 'hermes\t%s\tbytes=%s\tglibc=%s\n' "$t" "$bytes" "${glibc:-static}"
done

if [ "$mode" = rss ]; then
  home=$(mktemp -d)
  trap 'kill "$provider_pid" 2>/dev/null || true; rm -rf "$home"' EXIT
  cargo build -q --locked -p hermes-tests --example fake_provider
  target/debug/examples/fake_provider 20 >"$home/url" &
  provider_pid=$!
  for _ in $(seq 100); do [ -s "$home/url" ] && break; sleep 0.1; done
  for t in $(printf '%s\n' "${!exe[@]}" | sort); do
    f=${exe[$t]}
    [ -f "$f" ] || continue
    for run in 1 2 3; do
      rm -rf "$home/h" && mkdir "$home/h"
      # shellcheck disable=SC2046 # the runner is a command line
      HERMES_HOME=$home/h HERMES_BASE_URL=$(cat "$home/url") HERMES_MODEL=fake \
        /usr/bin/time -v $(runner_of "$t") "$f" -Q -z "do 20 things" --toolsets todo \
        2>&1 >/dev/null | awk -v t="$t" '/Maximum resident/ { kib = $NF } /Exit status/ { status = $NF }
          END { printf "rss\t%s\tkib=%d\texit=%s\n", t, kib, status; exit status != 0 }'
    done
  done
fi

if [ -f core/firmware/target/thumbv7em-none-eabihf/release/hermes-firmware-demo ]; then
  firmware
fi
