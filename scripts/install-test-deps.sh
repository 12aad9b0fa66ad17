#!/usr/bin/env bash
# Installs the peers the test suite runs against, into scratch folders under
# the repository's .cache/ (gitignored). Idempotent: a second run with nothing
# changed only checks versions and returns in well under a second.
#
#   .cache/npm   npm package @modelcontextprotocol/server-everything (pinned)
#   .cache/venv  Python venv with tests/interop/requirements.txt
#
# Needs: node + npm (Node >= 20), python3 (>= 3.11) with the venv module.
# Reaches only the npm registry and PyPI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SERVER_EVERYTHING_VERSION="2026.8.31"
CACHE="$ROOT/.cache"
NPM_PREFIX="$CACHE/npm"
VENV="$CACHE/venv"
REQS="$ROOT/tests/interop/requirements.txt"

log() { printf '[install-test-deps] %s\n' "$*" >&2; }

mkdir -p "$CACHE"

# ---------------------------------------------------------------- tool checks
for tool in node npm; do
    command -v "$tool" >/dev/null 2>&1 || { log "error: '$tool' not found on PATH"; exit 1; }
done

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for cand in python3.11 python3.12 python3.13 python3; do
        if command -v "$cand" >/dev/null 2>&1 \
            && "$cand" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            PYTHON="$(command -v "$cand")"
            break
        fi
    done
fi
[[ -n "$PYTHON" ]] || { log "error: no python3 >= 3.11 with the venv module found"; exit 1; }

# ------------------------------------------------------------------------ npm
pkg_json="$NPM_PREFIX/node_modules/@modelcontextprotocol/server-everything/package.json"
have_version=""
if [[ -f "$pkg_json" ]]; then
    have_version="$(node -p "require(process.argv[1]).version" "$pkg_json" 2>/dev/null || true)"
fi
if [[ "$have_version" == "$SERVER_EVERYTHING_VERSION" ]]; then
    log "npm: @modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION already in .cache/npm"
else
    log "npm: installing @modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION into .cache/npm (had: ${have_version:-none})"
    mkdir -p "$NPM_PREFIX"
    # A package.json of its own keeps npm from walking up into the repo.
    [[ -f "$NPM_PREFIX/package.json" ]] || echo '{"name":"junction-test-peers","private":true}' >"$NPM_PREFIX/package.json"
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --no-save --loglevel=error \
        "@modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION"
    have_version="$(node -p "require(process.argv[1]).version" "$pkg_json")"
    [[ "$have_version" == "$SERVER_EVERYTHING_VERSION" ]] \
        || { log "error: installed server-everything is $have_version, wanted $SERVER_EVERYTHING_VERSION"; exit 1; }
fi

# --------------------------------------------------------------------- python
# The stamp records the interpreter and the requirements' hash; when either
# changes the venv is rebuilt from scratch.
stamp="$VENV/.junction-stamp"
want_stamp="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] \
    && "$VENV/bin/python" -c 'import mcp, pytest, httpx' 2>/dev/null; then
    log "python: .cache/venv up to date ($("$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "pytest", m.version("pytest"))'))"
else
    log "python: creating .cache/venv with $PYTHON and installing tests/interop/requirements.txt"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$REQS"
    echo "$want_stamp" >"$stamp"
    log "python: installed ($("$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "pytest", m.version("pytest"))'))"
fi

log "done"
