#!/usr/bin/env bash
# Installs a hermes .deb into a scratch root and checks it the way a board
# user's system would see it (issue 18):
#
#   scripts/deb-check.sh target/debian/hermes_0.1.0-1_arm64.deb
#
# 0. The preinst refuses an ARMv6 CPU and names the build that runs there.
# 1. `dpkg --root=SCRATCH --force-script-chrootless -i`: the real dpkg runs
#    the package's real maintainer scripts with DPKG_ROOT=SCRATCH, so
#    systemd-sysusers and systemd-tmpfiles create the hermes user, the state
#    directory and the config link inside the scratch root. The machine's own
#    /etc, /usr and dpkg database are not touched.
# 2. Checks files, modes, owners, the user, the conffiles.
# 3. `systemd-analyze verify --root=SCRATCH` on the installed unit.
# 4. Starts the service's own command lines (ExecStartPre, ExecStart, read
#    from the installed unit) with the unit's environment and EnvironmentFile,
#    as the unit's user id: unconfigured, the check must refuse and say why;
#    with a bot token for a loopback Telegram stub, the gateway must pass its
#    check, poll getUpdates, and stop cleanly on SIGTERM. Foreign
#    architectures run under qemu-user. (PID 1 here is not systemd, so this
#    is the unit's commands and credentials, not systemd's sandboxing.)
# 5. `dpkg --purge`: the program and the conffiles go, the sessions stay.
set -euo pipefail
deb=$(realpath "$1")
fail() { echo "deb-check: $deb: $*" >&2; exit 1; }

command -v systemd-analyze >/dev/null || fail "systemd-analyze missing: apt-get install systemd"
arch=$(dpkg-deb --field "$deb" Architecture)
[ "$(dpkg-deb --field "$deb" Package)" = hermes ] || fail "package is not named hermes"
# The runner of the architecture's static build (.cargo/config.toml), the
# packages CI makes. (A glibc package, cargo-deb's `arm` or `board`
# variant, checked on another architecture also needs its sysroot:
# QEMU_LD_PREFIX=/usr/arm-linux-gnueabihf, which qemu-user reads.)
. "$(dirname "$0")/lib/targets.sh"
case $arch in
  amd64) machine="X86-64"; target=x86_64-unknown-linux-musl ;;
  arm64) machine="AArch64"; target=aarch64-unknown-linux-musl ;;
  armhf) machine="ARM"; target=armv7-unknown-linux-musleabihf ;;
  *) fail "unexpected architecture $arch" ;;
esac
runner=()
if [ "$arch" != "$(dpkg --print-architecture)" ]; then
  read -r -a runner < <(runner_of "$target") || true
  [ ${#runner[@]} -gt 0 ] || fail "no runner for $target in .cargo/config.toml"
fi

root=$(mktemp -d /tmp/hermes-deb-root.XXXXXX)
# The service user must reach its home inside the scratch root.
chmod 0755 "$root"
stub_pid=
gateway_pid=
cleanup() {
  [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null || true
  [ -n "$stub_pid" ] && kill "$stub_pid" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT

# --- 0. where it may not install --------------------------------------------
# The preinst refuses an ARMv6 CPU (the armhf build is ARMv7: it would die
# with "Illegal instruction" there) and names the build that runs; an ARMv7
# one it lets through. `uname` is the one thing it asks, so a `uname` that
# answers for a Pi Zero plays the board.
control=$root/control
dpkg-deb -e "$deb" "$control"
[ -x "$control/preinst" ] || fail "no preinst"
mkdir -p "$root/fake-uname"
for cpu in armv6l armv7l; do
  printf '#!/bin/sh\necho %s\n' "$cpu" >"$root/fake-uname/uname"
  chmod 755 "$root/fake-uname/uname"
  if out=$(PATH="$root/fake-uname:$PATH" "$control/preinst" install 2>&1); then
    [ "$cpu" = armv7l ] || fail "preinst let an $cpu CPU install: $out"
  else
    [ "$cpu" = armv6l ] || fail "preinst refused an $cpu CPU: $out"
    grep -q "arm-unknown-linux-musleabihf" <<<"$out" ||
      fail "preinst refused $cpu without naming the ARMv6 build: $out"
  fi
done
rm -rf "$control" "$root/fake-uname"

# --- 1. install -----------------------------------------------------------
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
# The Depends (libc6, systemd) are the host's, not the scratch root's.
dpkg --root="$root" --force-script-chrootless --force-depends --force-architecture \
  -i "$deb" >"$root/dpkg.log" 2>&1 || { cat "$root/dpkg.log" >&2; fail "dpkg -i failed"; }
status=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' hermes)
[ "$status" = "install ok installed" ] || fail "dpkg status: $status"

# --- 2. what landed where ------------------------------------------------------
mode() { stat -c '%a %u %g' "$root$1"; }
[ "$(mode /usr/bin/hermes)" = "755 0 0" ] || fail "/usr/bin/hermes: $(mode /usr/bin/hermes)"
readelf -h "$root/usr/bin/hermes" | grep -q "Machine:.*$machine" ||
  fail "/usr/bin/hermes is not a $machine binary"
# A static build (every package CI makes; issue 39) is a static PIE: no
# program interpreter, ELF type DYN (ASLR), relative relocations packed,
# and a Depends without libc6. A glibc build (cargo-deb's `arm` variant)
# needs no newer glibc than its Depends promises.
if ! readelf -l -W "$root/usr/bin/hermes" | grep -q 'INTERP'; then
  readelf -h "$root/usr/bin/hermes" | grep -q 'Type:.*DYN' ||
    fail "/usr/bin/hermes is static but not position-independent (no ASLR)"
  readelf -d -W "$root/usr/bin/hermes" | grep -q '(RELR)' ||
    fail "/usr/bin/hermes is static without packed relocations (DT_RELR)"
  ! dpkg-deb --field "$deb" Depends | grep -q libc6 ||
    fail "/usr/bin/hermes is static, yet the package depends on libc6"
else
  promised=$(dpkg-deb --field "$deb" Depends | sed -n 's/.*libc6 (>= \([0-9.]*\)).*/\1/p')
  [ -n "$promised" ] || fail "a dynamic /usr/bin/hermes, and Depends names no libc6 version"
  needed=$(readelf -V -W "$root/usr/bin/hermes" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
  # Packed relative relocations (DT_RELR) need 2.36: the loader of an
  # older glibc refuses such a binary.
  if readelf -V -W "$root/usr/bin/hermes" | grep -q 'GLIBC_ABI_DT_RELR'; then
    needed=$(printf '%s\n2.36\n' "$needed" | sort -V | tail -1)
  fi
  [ "$(printf '%s\n%s\n' "$needed" "$promised" | sort -V | tail -1)" = "$promised" ] ||
    fail "/usr/bin/hermes needs glibc $needed, the package promises libc6 >= $promised"
  # The arm glibc packages are linked with packed relative relocations
  # (.cargo/config.toml): a table of a few KB, no 24-byte entry per
  # relocation, and the version that makes an older loader refuse the binary.
  if [ "$machine" != "X86-64" ]; then
    readelf -d -W "$root/usr/bin/hermes" | grep -q '(RELR)' ||
      fail "/usr/bin/hermes ($machine) has no packed relocations (DT_RELR)"
    readelf -V -W "$root/usr/bin/hermes" | grep -q 'GLIBC_ABI_DT_RELR' ||
      fail "/usr/bin/hermes ($machine) packs relocations without naming GLIBC_ABI_DT_RELR"
  fi
fi
[ "$(mode /etc/hermes/gateway.env)" = "600 0 0" ] ||
  fail "secrets file /etc/hermes/gateway.env: $(mode /etc/hermes/gateway.env), want 600 root"
[ "$(mode /etc/hermes/config.toml)" = "644 0 0" ] || fail "/etc/hermes/config.toml: $(mode /etc/hermes/config.toml)"
user=$(grep '^hermes:' "$root/etc/passwd") || fail "no hermes user in the root's /etc/passwd"
IFS=: read -r _ _ uid gid _ home shell <<<"$user"
[ "$uid" -gt 0 ] && [ "$uid" -lt 1000 ] || fail "hermes uid $uid is not a system uid"
[ "$home" = /var/lib/hermes ] || fail "hermes home is $home"
[ "$shell" = /usr/sbin/nologin ] || fail "hermes shell is $shell"
grep -q "^hermes:x:$gid:" "$root/etc/group" || fail "no hermes group $gid"
[ "$(mode /var/lib/hermes)" = "750 $uid $gid" ] || fail "/var/lib/hermes: $(mode /var/lib/hermes)"
[ "$(mode /var/lib/hermes/workspace)" = "750 $uid $gid" ] ||
  fail "/var/lib/hermes/workspace: $(mode /var/lib/hermes/workspace)"
[ "$(readlink "$root/var/lib/hermes/config.toml")" = ../../../etc/hermes/config.toml ] ||
  fail "/var/lib/hermes/config.toml is not the link to /etc/hermes/config.toml"
conffiles=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Conffiles}' hermes)
for f in /etc/hermes/config.toml /etc/hermes/gateway.env; do
  grep -q " $f " <<<"$conffiles " || fail "$f is not a conffile"
done

# --- 3. the unit -------------------------------------------------------------
unit=$root/usr/lib/systemd/system/hermes-gateway.service
[ -f "$unit" ] || fail "no hermes-gateway.service"
# The unit's dependencies (sysinit.target, network-online.target, …) come
# from the systemd package the hermes package depends on: take the host's.
cp -n /usr/lib/systemd/system/*.target "$root/usr/lib/systemd/system/"
verify=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$root" \
  /usr/lib/systemd/system/hermes-gateway.service 2>&1) || fail "systemd-analyze verify: $verify"
# verify only warns about some mistakes; none is acceptable.
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"
key() { sed -n "s/^$1=//p" "$unit"; }
[ "$(key User)" = hermes ] || fail "unit does not run as hermes"
# (README, "The gateway as a service": waits for the network, starts after a
# local PostgreSQL, restarts on failure.)
for k in NoNewPrivileges=yes ProtectSystem=strict ReadWritePaths=/var/lib/hermes \
  Environment=HERMES_HOME=/var/lib/hermes EnvironmentFile=/etc/hermes/gateway.env \
  Wants=network-online.target "After=network-online.target postgresql.service" \
  Restart=on-failure; do
  grep -qx "$k" "$unit" || fail "unit lacks $k"
done

# --- 4. start the service's commands -----------------------------------------
# A loopback Telegram Bot API stub: getMe answers (for its one token; any
# other is refused, 401, as Telegram does), getUpdates holds briefly and
# returns nothing; every method called is logged. It also lists one model at
# /v1/models: `gateway run --check` asks the provider too (only a warning
# when it does not answer).
stub_log=$root/stub.log
python3 - "$stub_log" >"$root/stub.port" 2>"$root/stub.err" <<'EOF' &
import http.server, json, sys, time
log = open(sys.argv[1], "a", buffering=1)
TOKEN = "123456789:AAHdeb-check-token-for-a-loopback-stub"
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        method = self.path.rsplit("/", 1)[-1]
        log.write(method + "\n")
        if self.path == "/v1/models":
            self.answer({"object": "list", "data": [{"id": "hermes3", "object": "model"}]})
            return
        if not self.path.startswith("/bot" + TOKEN + "/"):
            self.answer({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
            return
        result = {"id": 1, "is_bot": True, "first_name": "hermes", "username": "hermes_bot"} \
            if method == "getMe" else []
        if method == "getUpdates":
            time.sleep(0.2)
        self.answer({"ok": True, "result": result})
    def answer(self, value, status=200):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
stub_pid=$!
for _ in $(seq 100); do [ -s "$root/stub.port" ] && break; sleep 0.1; done
[ -s "$root/stub.port" ] || fail "the Telegram stub did not start: $(cat "$root/stub.err")"
port=$(cat "$root/stub.port")

# The unit's environment: Environment=, then EnvironmentFile= (read as root).
unit_env() {
  service_env=(env -i PATH=/usr/bin:/bin "$(key Environment)")
  while IFS= read -r line; do
    case $line in '' | '#'*) continue ;; esac
    service_env+=("$line")
  done <"$root$(key EnvironmentFile)"
  # The installed paths, seen from outside the scratch root.
  service_env=("${service_env[@]//=\/var\/lib\/hermes/=$root/var/lib/hermes}")
  # qemu-user does not emulate Landlock, and the gateway refuses to serve an
  # unconfined terminal: under emulation the terminal is left out (natively
  # the default toolsets run, sandbox included).
  if [ ${#runner[@]} -gt 0 ]; then
    # (No `delegate`: the `board` variant, which a board owner may build,
    # leaves it out — README "Boards".)
    service_env+=(HERMES_TOOLSETS=file,web,memory,todo)
  fi
}
as_service() {
  setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "${service_env[@]}" "$@"
}
cmdline() {
  local c
  c=$(key "$1")
  c=${c/#\/usr\/bin\/hermes/$root/usr/bin/hermes}
  echo "$c"
}
[ "$(key WorkingDirectory)" = /var/lib/hermes/workspace ] || fail "unexpected WorkingDirectory"
cd "$root/var/lib/hermes/workspace" # WorkingDirectory=

# As installed (nothing configured), the service refuses to start and says why.
unit_env
# shellcheck disable=SC2046
if check_out=$(as_service "${runner[@]}" $(cmdline ExecStartPre) 2>&1); then
  fail "ExecStartPre accepted an unconfigured gateway: $check_out"
fi
grep -q "no platform is enabled" <<<"$check_out" || fail "unhelpful refusal: $check_out"

cat >>"$root/etc/hermes/gateway.env" <<EOF
TELEGRAM_BOT_TOKEN=123456789:AAHdeb-check-token-for-a-loopback-stub
TELEGRAM_API_URL=http://127.0.0.1:$port
TELEGRAM_ALLOWED_USERS=42
HERMES_BASE_URL=http://127.0.0.1:$port/v1
EOF
unit_env
# A wrong token is found before the service starts: --check asks Telegram
# (getMe) and exits 2 naming the variable, instead of `run` failing over and
# over under Restart=on-failure.
wrong_env=("${service_env[@]}" TELEGRAM_BOT_TOKEN=123456789:AAHdeb-check-not-the-token-of-the-stub)
check_rc=0
# shellcheck disable=SC2046
check_out=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "${wrong_env[@]}" \
  "${runner[@]}" $(cmdline ExecStartPre) 2>&1) || check_rc=$?
[ "$check_rc" = 2 ] || fail "a wrong token: --check exited $check_rc, not 2: $check_out"
grep -q TELEGRAM_BOT_TOKEN <<<"$check_out" || fail "the wrong token is not named: $check_out"
# shellcheck disable=SC2046 # the unit's command line, split like systemd does for these simple ones
check_out=$(as_service "${runner[@]}" $(cmdline ExecStartPre) 2>&1) ||
  fail "ExecStartPre failed: $check_out"
grep -q telegram <<<"$check_out" || fail "gateway --check did not see telegram: $check_out"
# Not through the function: $! must be the gateway itself, for SIGTERM.
# shellcheck disable=SC2046
setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "${service_env[@]}" \
  "${runner[@]}" $(cmdline ExecStart) >"$root/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 300); do
  grep -q getUpdates "$stub_log" 2>/dev/null && break
  kill -0 "$gateway_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q getUpdates "$stub_log" 2>/dev/null ||
  fail "the gateway never polled Telegram: $(cat "$root/gateway.log")"
[ -f "$root/var/lib/hermes/state.db" ] || fail "no state.db in HERMES_HOME"
[ "$(stat -c %u "$root/var/lib/hermes/state.db")" = "$uid" ] || fail "state.db not owned by hermes"
kill -TERM "$gateway_pid"
stop_deadline=$((SECONDS + 15)) # TimeoutStopSec=
while kill -0 "$gateway_pid" 2>/dev/null && [ $SECONDS -lt $stop_deadline ]; do sleep 0.1; done
if kill -0 "$gateway_pid" 2>/dev/null; then fail "the gateway ignored SIGTERM for 15 s"; fi
wait "$gateway_pid" && rc=0 || rc=$?
gateway_pid=
[ "$rc" = 0 ] || fail "the gateway exited with $rc on SIGTERM: $(cat "$root/gateway.log")"

# --- 5. removal keeps the users' sessions ----------------------------------------
dpkg --root="$root" --force-script-chrootless --purge hermes >>"$root/dpkg.log" 2>&1 ||
  { cat "$root/dpkg.log" >&2; fail "dpkg --purge failed"; }
[ ! -e "$root/usr/bin/hermes" ] || fail "purge left /usr/bin/hermes"
[ ! -e "$root/etc/hermes/gateway.env" ] || fail "purge left the secrets file"
[ -f "$root/var/lib/hermes/state.db" ] || fail "purge deleted the sessions in /var/lib/hermes"

echo "deb-check: $(basename "$deb"): installed, verified, refused unconfigured, started, stopped, purged ($arch${runner:+, under ${runner[0]}})"
