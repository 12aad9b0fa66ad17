#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time and prints a summary.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz
# --locked`). No network, no listener: the targets are pure functions.
#
# Environment:
#   FUZZ_TARGETS        targets to run, space-separated (default: all)
#   FUZZ_SANITIZER      none (default) or address; the code under test is
#                       safe Rust, so the default buys more execs per second
#   FUZZ_BUILD_TIMEOUT  seconds the build may take (default 1800)
#
# Each target starts from its seeds in fuzz/corpus/<target>/ (never written
# to) and grows fuzz/work/<target>/ (git-ignored), so a later run resumes
# from what an earlier one found. A crash stops that target and leaves its
# input in fuzz/artifacts/<target>/; the script goes on with the next target
# and exits 1 at the end. Logs: fuzz/logs/<target>.log, summary:
# fuzz/logs/summary.txt.
set -euo pipefail

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2
    exit 2
fi
sanitizer=${FUZZ_SANITIZER:-none}
build_timeout=${FUZZ_BUILD_TIMEOUT:-1800}
targets=${FUZZ_TARGETS:-"jsonrpc_message rewrite_names page"}
# On top of the fuzzing time: start-up, loading the corpus, and the rebuild
# `cargo fuzz run` makes first if the sources changed since the build step.
run_slack=$((build_timeout + 60))

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 2
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "the nightly toolchain is missing: rustup toolchain install nightly" >&2
    exit 2
fi

mkdir -p fuzz/logs
echo "building fuzz targets (sanitizer: $sanitizer)"
timeout -k 30 "$build_timeout" cargo +nightly fuzz build -s "$sanitizer" >fuzz/logs/build.log 2>&1 || {
    tail -n 40 fuzz/logs/build.log >&2
    echo "fuzz build failed; see fuzz/logs/build.log" >&2
    exit 2
}

# The value after `key:` in a libFuzzer final-stats line.
final_stat() { grep -o "^stat::$1: *[0-9]*" "$2" | grep -o '[0-9]*$' | tail -n 1 || true; }
# The last `name: N` on a libFuzzer status line (`#1234 ... cov: 56 ft: 78`).
last_field() { grep -oE "(^| )$1: [0-9][^ ]*" "$2" | tail -n 1 | awk '{print $NF}' || true; }

summary=fuzz/logs/summary.txt
printf '%-16s %8s %12s %8s %6s %7s %12s  %s\n' \
    target seconds execs exec/s cov ft corpus result >"$summary"
failed=0
for target in $targets; do
    log=fuzz/logs/$target.log
    mkdir -p "fuzz/work/$target" "fuzz/artifacts/$target"
    echo "fuzzing $target for ${seconds}s"
    started=$(date +%s)
    status=0
    timeout -k 30 $((seconds + run_slack)) \
        cargo +nightly fuzz run -s "$sanitizer" "$target" \
        "$root/fuzz/work/$target" "$root/fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    elapsed=$(($(date +%s) - started))

    execs=$(final_stat number_of_executed_units "$log")
    rate=$(final_stat average_exec_per_sec "$log")
    crash=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -n 1 | cut -d' ' -f5 || true)
    if [[ -n $crash ]]; then
        result="CRASH $crash"
        failed=1
    elif ((status == 124 || status == 137)); then
        result="TIMED OUT (killed after $((seconds + run_slack))s)"
        failed=1
    elif ((status != 0)); then
        result="FAILED (exit $status, see $log)"
        failed=1
    else
        result=ok
    fi
    printf '%-16s %8s %12s %8s %6s %7s %12s  %s\n' "$target" "$elapsed" "${execs:-?}" \
        "${rate:-?}" "$(last_field cov "$log")" "$(last_field ft "$log")" "$(last_field corp "$log")" \
        "$result" >>"$summary"
    if [[ -n $crash ]]; then
        grep -m 1 -A 3 'panicked at' "$log" | sed 's/^/    /' >>"$summary" || true
    fi
done

echo
cat "$summary"
exit "$failed"
