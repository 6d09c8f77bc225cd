#!/usr/bin/env bash
# Installs those of the Debian packages named after WHAT that are not installed yet
# (quick when all are): `scripts/apt-install-missing.sh "the console" pkg1 pkg2 …`.
set -euo pipefail
what="$1"; shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "== installing Debian packages for $what: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
