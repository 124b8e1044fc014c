#!/usr/bin/env bash
# Packs a static build into a tarball and checks what a user unpacks
# (issue 39: every board a file; README "Boards"):
#
#   scripts/tarball.sh TARGET EXE OUTDIR [RUNNER...]
#
# writes OUTDIR/hermes-VERSION-TARGET.tar.gz and prints its path. Inside,
# one directory of the same name: `hermes` (the static executable: nothing
# else is needed on the board), README.md, and the gateway's systemd unit
# and settings file as the Debian package installs them, for whoever sets
# the service up by hand.
#
# The check unpacks the tarball into a scratch directory and runs the
# unpacked `hermes --version` (under RUNNER, qemu-user for another
# architecture): the version it prints names the file, so a tarball whose
# binary does not start is never written.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 TARGET EXE OUTDIR [RUNNER...]" >&2; exit 2; }
target=$1 exe=$2 outdir=$3
shift 3
runner=("$@")
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "tarball: $target: $*" >&2; exit 1; }

version=$("${runner[@]}" "$exe" --version) || fail "$exe --version failed"
version=${version#hermes }
case $version in
  [0-9]*.[0-9]*) ;;
  *) fail "$exe --version printed '$version'" ;;
esac
name=hermes-$version-$target

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/$name"
install -m 755 "$exe" "$work/$name/hermes"
install -m 644 "$root/README.md" "$work/$name/README.md"
install -m 644 "$root/packaging/hermes-gateway.service" "$work/$name/hermes-gateway.service"
install -m 644 "$root/packaging/config.toml" "$work/$name/config.toml"
mkdir -p "$outdir"
tarball=$(cd "$outdir" && pwd)/$name.tar.gz
# Owned by root, dated by the commit: the same build gives the same bytes.
when=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$when" \
  -cf - "$name" | gzip -n -9 >"$tarball.partial"

mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$tarball.partial"
unpacked=$work/unpacked/$name/hermes
[ -x "$unpacked" ] || fail "the tarball has no executable $name/hermes"
got=$("${runner[@]}" "$unpacked" --version) || fail "the unpacked hermes does not start"
[ "$got" = "hermes $version" ] || fail "the unpacked hermes printed '$got'"
mv "$tarball.partial" "$tarball"
echo "$tarball"
