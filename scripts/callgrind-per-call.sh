#!/usr/bin/env bash
# Instructions the gateway spends per proxied call, counted by callgrind:
# the bench fixture on a shared Streamable HTTP mount, the gateway under
# `valgrind --tool=callgrind`, `bench load --concurrency 1` for DURATION
# seconds. Prints "calls instructions". Run it for 2 s and 10 s and take
# (I10 - I2) / (n10 - n2), the marginal cost per call, which start-up and
# session set-up do not weigh on. Compare two builds by alternating runs.
#
#   scripts/callgrind-per-call.sh BINDIR DURATION
#
# BINDIR holds a release `junction` and `bench` (target/release and
# target/release/examples after `cargo build --release --example bench
# --bin junction`). Loopback only; every process it starts is stopped by
# its pid, every wait is bounded.
set -euo pipefail
bin=${1:?BINDIR}
duration=${2:?DURATION}
work=$(mktemp -d)
cleanup() {
    [[ -n "${gateway:-}" ]] && kill "$gateway" 2>/dev/null || true
    [[ -n "${fixture:-}" ]] && kill "$fixture" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$bin/bench" fixture --http 127.0.0.1:0 2> "$work/fixture.log" &
fixture=$!
for _ in $(seq 1 100); do grep -q listening "$work/fixture.log" && break; sleep 0.1; done
fixture_addr=$(sed -n 's/.*listening on //p' "$work/fixture.log")
[[ -n "$fixture_addr" ]] || { echo "the fixture did not start" >&2; exit 1; }

port=$((44000 + RANDOM % 900))
cat > "$work/junction.toml" <<TOML
[server]
listen = "127.0.0.1:$port"

[mounts.bench]
url = "http://$fixture_addr/mcp"
TOML
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    "$bin/junction" --config "$work/junction.toml" > "$work/junction.log" 2>&1 &
gateway=$!
ready=
for _ in $(seq 1 600); do
    if curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null | grep -q 200; then
        ready=1
        break
    fi
    sleep 0.2
done
[[ -n "$ready" ]] || { echo "the gateway did not get ready" >&2; exit 1; }

load=$("$bin/bench" load --addr "127.0.0.1:$port" --tool bench__echo --concurrency 1 --duration "$duration")
kill -INT "$gateway"
wait "$gateway" 2>/dev/null || true
gateway=
calls=$(awk '{print $1}' <<< "$load")
instructions=$(grep -m1 -E '^(summary|totals):' "$work/callgrind.out" | awk '{print $2}')
echo "$calls $instructions"
