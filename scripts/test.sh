#!/usr/bin/env bash
# The test command: installs test peers, builds, runs the Rust tests, then the
# Python interop tests and the MCP conformance suite against the built gateway.
# Exits non-zero if any stage fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

stage() { printf '\n==> %s\n' "$*" >&2; }

stage "install test dependencies"
scripts/install-test-deps.sh

stage "cargo build --bins"
cargo build --bins

stage "cargo test"
cargo test

# The fuzz crate compiles json_guard.rs by path and builds catalogs by
# hand; it is outside the main build, so only this keeps it compiling.
stage "fuzz targets compile (cargo check, fuzz/)"
cargo check --manifest-path fuzz/Cargo.toml --bins

stage "interop tests (pytest tests/interop)"
JUNCTION_BIN="$ROOT/target/debug/junction" \
    .cache/venv/bin/python -m pytest tests/interop -q

stage "conformance (tests/conformance/run.sh: MCP conformance suite, fixture direct vs through the gateway)"
JUNCTION_BIN="$ROOT/target/debug/junction" \
    tests/conformance/run.sh
