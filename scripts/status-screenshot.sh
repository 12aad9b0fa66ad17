#!/usr/bin/env bash
# Renders the gateway's /status page in headless Chromium: starts junction on
# the embedded default config (loopback, free port), waits until ready, takes
# a phone-sized and a desktop-sized screenshot, and checks that the rendered
# page text names every mount and its health. Not part of the test command:
# it needs Debian's chromium (`apt-get install -y chromium`).
#
#   scripts/status-screenshot.sh [OUT_DIR]     (default .cache/status-screenshot)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/.cache/status-screenshot}"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[[ -x "$CHROMIUM" ]] || { echo "chromium not found: apt-get install -y chromium" >&2; exit 1; }

cd "$ROOT"
cargo build --bins -q
mkdir -p "$OUT"
LOG="$OUT/junction.log"
target/debug/junction --listen 127.0.0.1:0 2>"$LOG" &
GATEWAY=$!
PROFILE="$(mktemp -d)"
cleanup() {
    kill "$GATEWAY" 2>/dev/null || true
    wait "$GATEWAY" 2>/dev/null || true
    rm -rf "$PROFILE"
}
trap cleanup EXIT

ADDR=""
for _ in $(seq 1 100); do
    ADDR="$(grep -o 'listening on [0-9.:]*' "$LOG" | head -1 | cut -d' ' -f3 || true)"
    [[ -n "$ADDR" ]] && break
    sleep 0.1
done
[[ -n "$ADDR" ]] || { echo "gateway did not start:" >&2; cat "$LOG" >&2; exit 1; }
for _ in $(seq 1 100); do
    curl -fs "http://$ADDR/readyz" >/dev/null && break
    sleep 0.1
done

chrome() {
    timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$PROFILE" "$@"
}
chrome --window-size=390,844 --screenshot="$OUT/status-phone.png" "http://$ADDR/status" 2>/dev/null
chrome --window-size=1200,700 --screenshot="$OUT/status-desktop.png" "http://$ADDR/status" 2>/dev/null
chrome --dump-dom "http://$ADDR/status" 2>/dev/null >"$OUT/status.html"

# The page as rendered names each mount of the default config, ready.
for needle in '<b>demo</b>' '<b>private</b>' '>ready<'; do
    grep -q -- "$needle" "$OUT/status.html" || { echo "rendered page lacks $needle" >&2; exit 1; }
done
ls -l "$OUT"/status-*.png
echo "status page rendered: $OUT/status-phone.png, $OUT/status-desktop.png"
