#!/usr/bin/env bash
# Builds the .deb of `leadgate` from packaging/deb/ with dpkg-deb (no cargo-deb: nothing to
# compile first, and the package's layout is all in packaging/deb/):
#   /usr/bin/leadgate (stripped), /lib/systemd/system/leadgate.service,
#   /etc/leadgate/leadgate.toml and /etc/default/leadgate (conffiles),
#   /usr/share/doc/leadgate/; the maintainer scripts make the `leadgate` system user and
#   /var/lib/leadgate. Depends: from dpkg-shlibdeps on the binary, and adduser.
#
#   scripts/package-deb.sh [--binary PATH] [--version V] [--out DIR] [--compress xz|zstd|gzip|none]
#
# Without --binary it builds the release binary (`make package`); the packaging test
# (tests/ecosystem.rs) passes its own debug binary, a test version and --compress none,
# to stay within seconds. Prints the path of the .deb on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

binary="" version="" out="" compress=xz
while (($#)); do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --compress) compress="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

target="${CARGO_TARGET_DIR:-target}"
if [ -z "$binary" ]; then
  # The web console's UI is embedded in the release binary: built first.
  [ -d ui/node_modules ] || npm --prefix ui ci --no-audit --no-fund >&2
  npm --prefix ui run build >&2
  cargo build --release --locked --bin leadgate >&2
  binary="$target/release/leadgate"
fi
[ -x "$binary" ] || { echo "no executable at $binary" >&2; exit 1; }
if [ -z "$version" ]; then
  version=$(awk -F'"' '/^\[package\]/ {p=1} p && /^version *=/ {print $2; exit}' Cargo.toml)
fi
out="${out:-$target/debian}"
arch=$(dpkg --print-architecture)
mkdir -p "$out"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
src=packaging/deb
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/leadgate" \
  "$root/etc/default" "$root/usr/share/doc/leadgate"
strip --strip-unneeded -o "$root/usr/bin/leadgate" "$binary"
chmod 0755 "$root/usr/bin/leadgate"
install -m 0644 "$src/leadgate.service" "$root/lib/systemd/system/leadgate.service"
install -m 0644 "$src/leadgate.toml" "$root/etc/leadgate/leadgate.toml"
install -m 0644 "$src/default" "$root/etc/default/leadgate"
install -m 0644 "$src/README.Debian" "$src/copyright" "$root/usr/share/doc/leadgate/"
install -m 0755 "$src/postinst" "$src/prerm" "$src/postrm" "$root/DEBIAN/"
printf '/etc/leadgate/leadgate.toml\n/etc/default/leadgate\n' >"$root/DEBIAN/conffiles"

# The shared libraries' package dependencies, as debhelper would compute them.
mkdir -p "$stage/src/debian"
printf 'Source: leadgate\n\nPackage: leadgate\nArchitecture: any\n' >"$stage/src/debian/control"
shlibs=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/leadgate" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "dpkg-shlibdeps found no dependencies for $binary" >&2; exit 1; }

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: leadgate
Version: $version
Architecture: $arch
Maintainer: The Leadgate authors <leadgate@localhost>
Installed-Size: $size
Depends: $shlibs, adduser
Section: net
Priority: optional
Description: idempotency gateway between lead sources and CRMs
 Leadgate journals every lead delivery, derives a stable operation id from the
 event, claims it atomically in a shared operations database (SQLite or
 PostgreSQL) and lets one worker own every CRM call and retry (Bitrix24,
 amoCRM/Kommo, HTTP CRMs): one lead produces exactly one CRM result, and what
 no machine may guess goes to a person with the full timeline.
 .
 This package runs "leadgate serve" as the system user leadgate
 (leadgate.service, not enabled on install), reads /etc/leadgate/leadgate.toml
 and keeps its SQLite database in /var/lib/leadgate.
CONTROL
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print0 | sed -z 's|^\./||' |
  sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"

deb="$out/leadgate_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >&2
echo "$deb"
