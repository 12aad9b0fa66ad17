#!/usr/bin/env bash
# Junction's load benchmark, one command: builds the gateway and the bench
# example in release mode, then runs every scenario in one process tree
# (the bench starts and stops, by pid, each fixture and gateway it needs).
#
#   scripts/bench.sh                              # everything (~4 minutes after the build)
#   scripts/bench.sh --only call-http,list        # some scenarios
#   scripts/bench.sh --duration 2 --sessions 1000 # a quick pass
#
# Figures and what they mean: BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet --example bench --bin junction

# Idle-session and concurrency runs want more descriptors than the usual
# soft limit of 1024; stay within the hard limit.
hard=$(ulimit -Hn)
want=65536
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then want=$hard; fi
ulimit -n "$want" 2>/dev/null || true

exec target/release/examples/bench --junction target/release/junction "$@"
