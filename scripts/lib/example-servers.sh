# Sourced by scripts/budgets.sh and scripts/symbol-order.sh: the loopback
# servers of hermes-tests' examples (the fake provider, the quiet Bot API),
# started on demand and stopped, with every process added to `pids`, when
# the script exits. The caller sets `ex` (the examples' directory) and
# `work` (a scratch directory, removed at exit).

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts example NAME with ARGS; it prints its base URL, which lands in $url.
start_server() {
  local name=$1
  shift
  # Emptied here, not by the redirection below: that runs in the child,
  # after the loop may already have read a previous server's URL from it.
  : >"$work/$name.url"
  "$ex/$name" "$@" >>"$work/$name.url" &
  pids+=($!)
  for _ in $(seq 600); do
    [ -s "$work/$name.url" ] && break
    sleep 0.05
  done
  url=$(head -1 "$work/$name.url")
  [ -n "$url" ] || { echo "$0: $name did not start" >&2; exit 1; }
}
