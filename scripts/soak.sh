#!/usr/bin/env bash
# Junction's soak test, one command: builds the gateway and the soak example
# (debug by default, so overflow checks and debug assertions are on;
# SOAK_PROFILE=release for a release build), then runs it. It stops by
# itself: SECONDS of soak plus, typically, a few seconds of set-up,
# settling and shutdown (each wait is bounded). Loopback only; every
# process it starts is stopped by its pid.
#
#   scripts/soak.sh                         # 120 s
#   scripts/soak.sh 60                      # 60 s
#   scripts/soak.sh 60 --sessions 48 --seed 42
#                                           # options: target/debug/examples/soak --help
#
# Exit 0: passed. 1: a lost response, a mismatched answer, a leaked process,
# a panic or a failed gateway exit (see the report). 2: could not set up.
# What the soak does and checks: the top of examples/soak.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=120
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    seconds=$1
    shift
fi
if ! [[ $seconds =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "soak.sh: SECONDS must be a number, not ${seconds@Q}" >&2
    exit 2
fi

case "${SOAK_PROFILE:-debug}" in
    debug) flags=() dir=debug ;;
    release) flags=(--release) dir=release ;;
    *)
        echo "soak.sh: SOAK_PROFILE must be debug or release" >&2
        exit 2
        ;;
esac
target=${CARGO_TARGET_DIR:-target}

cargo build ${flags[@]+"${flags[@]}"} --quiet --example soak --bin junction

exec "$target/$dir/examples/soak" --junction "$target/$dir/junction" --duration "$seconds" "$@"
