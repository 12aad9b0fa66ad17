"""Clients of protocol versions before 2025-11-25, as deployed agents still
are: the Python SDK 1.12 (2025-06-18), in a venv of its own
(`.cache/venv-mcp1`, run as a subprocess), against the gateway fronting
server-everything. Such a client parses every SSE event's data as a
message; the gateway must not send it 2025-11-25's priming events (an id
and empty data), which it reports as parse errors to the application."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import everything_config

ROOT = Path(__file__).resolve().parents[2]
OLD_PYTHON = ROOT / ".cache" / "venv-mcp1" / "bin" / "python"
CLIENT = Path(__file__).parent / "older" / "client_1x.py"


def run_old_client(url: str, tool: str, arguments: dict) -> dict:
    assert OLD_PYTHON.exists(), f"{OLD_PYTHON} missing: run scripts/install-test-deps.sh"
    done = subprocess.run(
        [str(OLD_PYTHON), str(CLIENT), url, tool, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, f"the 1.x client failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isolation", ["shared", "per_session"])
def test_a_python_sdk_1x_client_gets_no_event_it_cannot_parse(start_gateway, isolation: str) -> None:
    gateway = start_gateway(everything_config(isolation))
    seen = run_old_client(
        gateway.mcp_url,
        "everything__trigger-long-running-operation",
        {"duration": 0.3, "steps": 3},
    )
    assert seen["version"] == "2025-06-18", seen
    assert "everything__echo" in seen["tools"], seen
    assert seen["is_error"] is not True, seen
    assert seen["progress"] == [1, 2, 3], seen
    assert seen["errors"] == [], f"the client could not parse what it was sent: {seen['errors']}"
