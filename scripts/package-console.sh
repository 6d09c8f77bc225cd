#!/usr/bin/env bash
# Builds the console's .deb with the Tauri bundler (src-tauri/tauri.conf.json, `bundle`):
#   /usr/bin/leadgate-console, /usr/share/applications/Leadgate Console.desktop and the icon;
#   Depends: WebKitGTK 4.1 and GTK 3, as the bundler computes them.
#
#   scripts/package-console.sh [--debug] [--version V] [--out DIR]
#
# Without --debug it makes the release build first (`npx tauri build`, `make package-console`).
# With --debug it bundles the debug binary that `cargo build`/`cargo test` already made
# (`npx tauri bundle --debug`: no compiling; the real-window test does this). Copies the .deb
# to DIR (default: $CARGO_TARGET_DIR/debian) under Debian's name,
# leadgate-console_<version>_<arch>.deb, and prints that path on its last line.
#
# The AppImage is not built: Tauri's AppImage step downloads linuxdeploy and its plugins
# from GitHub at build time, which these machines cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."

debug="" version="" out=""
while (($#)); do
  case "$1" in
    --debug) debug=1; shift ;;
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

target="${CARGO_TARGET_DIR:-target}"
[ -d node_modules/@tauri-apps/cli ] || npm ci --no-audit --no-fund >&2
if [ -z "$version" ]; then
  version=$(python3 -c 'import json; print(json.load(open("src-tauri/tauri.conf.json"))["version"])')
fi
config=$(printf '{"version":"%s"}' "$version")

start=$(date +%s)
if [ -n "$debug" ]; then
  profile=debug
  [ -x "$target/debug/leadgate-console" ] || {
    echo "no $target/debug/leadgate-console: build the console first (cargo build -p leadgate-console)" >&2
    exit 1
  }
  # The bundler writes into the binary it packages (its bundle type): it gets a copy in a
  # target directory of its own, so a console that is running from the shared one (the
  # other real-window tests, run beside this) is never "Text file busy".
  private=$(mktemp -d)
  trap 'rm -rf "$private"' EXIT
  mkdir -p "$private/debug"
  cp "$target/debug/leadgate-console" "$private/debug/"
  target="$private"
  CARGO_TARGET_DIR="$private" npx --no-install tauri bundle --debug --bundles deb --config "$config" >&2
else
  profile=release
  # beforeBuildCommand builds ui/ first.
  [ -d ui/node_modules ] || npm --prefix ui ci --no-audit --no-fund >&2
  npx --no-install tauri build --bundles deb --config "$config" >&2
fi

arch=$(dpkg --print-architecture)
built="$target/$profile/bundle/deb/Leadgate Console_${version}_${arch}.deb"
[ -f "$built" ] || { echo "the bundler made no $built" >&2; exit 1; }
out="${out:-$target/debian}"
mkdir -p "$out"
deb="$out/leadgate-console_${version}_${arch}.deb"
cp "$built" "$deb"
echo "console .deb ($profile): $(du -h "$deb" | cut -f1) in $(( $(date +%s) - start )) s" >&2
echo "$deb"
