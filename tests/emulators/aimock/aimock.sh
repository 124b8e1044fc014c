#!/usr/bin/env sh
# Manage the pinned @copilotkit/aimock LLM API emulator used by the
# hermes-runtime client tests. The Rust tests start their own instance on a
# free port; this script is for CI set-up and for poking at it by hand.
#
#   ./aimock.sh install            npm ci (exact versions from package-lock.json)
#   ./aimock.sh start [port]       start in the background (default port 4010), loopback only
#   ./aimock.sh stop               stop the instance started by `start`
#   ./aimock.sh status             print the URL if running
set -eu
cd "$(dirname "$0")"
PIDFILE=.aimock.pid
CLI=node_modules/@copilotkit/aimock/dist/cli.js

case "${1:-}" in
  install)
    npm ci --no-audit --no-fund
    ;;
  start)
    PORT="${2:-4010}"
    if [ ! -f "$CLI" ]; then
      echo "aimock is not installed: run '$0 install' first" >&2
      exit 1
    fi
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "already running (pid $(cat "$PIDFILE"))" >&2
      exit 1
    fi
    node "$CLI" --host 127.0.0.1 --port "$PORT" --fixtures fixtures --log-level info > .aimock.log 2>&1 &
    echo $! > "$PIDFILE"
    i=0
    until grep -q "listening on" .aimock.log 2>/dev/null; do
      i=$((i + 1))
      if [ "$i" -gt 100 ] || ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "aimock failed to start:" >&2
        cat .aimock.log >&2
        exit 1
      fi
      sleep 0.1
    done
    grep -o "http://[0-9.:]*" .aimock.log | head -n 1
    ;;
  stop)
    if [ -f "$PIDFILE" ]; then
      kill "$(cat "$PIDFILE")" 2>/dev/null || true
      rm -f "$PIDFILE"
    fi
    ;;
  status)
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      grep -o "http://[0-9.:]*" .aimock.log | head -n 1
    else
      echo "not running" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 install|start [port]|stop|status" >&2
    exit 2
    ;;
esac
