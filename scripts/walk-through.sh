#!/usr/bin/env bash
# The console's walk-through in actions and seconds (benches/walk_through.rs), first with
# the UI as it was before issue 37 (WALK_BEFORE, default the commit before its first
# change), then with today's. A dev-profile gateway serves ui/dist from disk, so the old
# UI is built from git into a scratch directory and put in ui/dist for the first run;
# today's is put back whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${WALK_BEFORE:-04ebac7^}
scratch=$(mktemp -d)
trap 'rm -rf ui/dist && mv "$scratch/dist-now" ui/dist 2>/dev/null; rm -rf "$scratch"' EXIT
npm --prefix ui ci --silent && npm --prefix ui run build --silent
cp -a ui/dist "$scratch/dist-now"
git archive "$before" ui | tar -x -C "$scratch"
npm --prefix "$scratch/ui" ci --silent
npm --prefix "$scratch/ui" run build --silent
rm -rf ui/dist && cp -a "$scratch/ui/dist" ui/dist
echo "UI before: $(git log -1 --format='%h %s' "$before" | cut -c1-90)"
LEADGATE_WALK=before cargo bench --locked --profile dev --bench walk_through
rm -rf ui/dist && cp -a "$scratch/dist-now" ui/dist
echo "UI after: $(git log -1 --format='%h %s' HEAD | cut -c1-90)"
LEADGATE_WALK=after cargo bench --locked --profile dev --bench walk_through
