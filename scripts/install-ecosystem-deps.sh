#!/usr/bin/env bash
# What tests/ecosystem.rs needs, installed only when missing (quick when all are):
#  - promtool, to check and unit-test examples/grafana/leadgate-alerts.yml. It is taken from
#    Debian's `prometheus` package, unpacked under /var/tmp (the package itself is not
#    installed: its postinst would start a Prometheus server). Its path is printed by
#    `scripts/install-ecosystem-deps.sh --promtool`.
#  - what building, installing and checking the .deb takes: dpkg-dev (dpkg-shlibdeps),
#    binutils (strip, objdump), adduser (the package's postinst), systemd's systemd-analyze
#    (`verify` works without systemd as PID 1) and util-linux's runuser.
# `make test` (through `unit`) calls it; `make package` calls it with --packaging (no promtool).
set -euo pipefail
cd "$(dirname "$0")/.."

# Whatever version Debian's archive has (bookworm: 2.42); unpacked once, then reused.
dir=/var/tmp/leadgate-promtool
promtool="$dir/usr/bin/promtool"

if [ "${1:-}" = "--promtool" ]; then
  echo "$promtool"
  exit 0
fi

scripts/apt-install-missing.sh "the packaging test" dpkg-dev binutils adduser systemd util-linux
# `make package` needs only those.
[ "${1:-}" = "--packaging" ] && exit 0

if ! "$promtool" --version >/dev/null 2>&1; then
  echo "== unpacking promtool from Debian's prometheus package into $dir"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"   # apt's download user (_apt) writes here
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  if ! (cd "$work" && apt-get download -qq prometheus 2>/dev/null); then
    $sudo apt-get update -qq
    (cd "$work" && apt-get download -qq prometheus)
  fi
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$dir.tmp" ./usr/bin/promtool
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  "$promtool" --version | head -1
fi
