"""Junction's connections to a real HTTP upstream,
@modelcontextprotocol/server-everything (`streamableHttp`, Node), seen from
the gateway's open sockets (`/proc/PID/fd` and `/proc/net/tcp`).

Node closes an idle keep-alive connection after 5 s. The gateway must let go
of its end then (close the socket), not keep it in CLOSE_WAIT until the next
request to that upstream.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import Gateway, everything_http_config, python_http_fixture, tcp_sockets, toml_str
from test_relay import wait_until

pytestmark = pytest.mark.anyio

MOUNT = "everything"
CALL_TIMEOUT_S = 30.0
CONCURRENT_CALLS = 8
SERVER_CLOSE_WAIT_S = 30.0  # until the server has closed some idle connection (Node: 5 s)
LET_GO_WITHIN_S = 15.0  # then, until the gateway holds none in CLOSE_WAIT (its sweep: every 5 s)

TCP_STATES = {"01": "ESTABLISHED", "08": "CLOSE_WAIT"}


def sockets_to(pid: int, port: int) -> dict[int, str]:
    """The TCP sockets process `pid` holds open to 127.0.0.1:`port`: inode -> state name."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    found: dict[int, str] = {}
    for cols in tcp_sockets():
        if len(cols) < 10:
            continue
        remote_port = int(cols[2].rpartition(":")[2], 16)
        inode = int(cols[9])
        if remote_port == port and inode in inodes:
            found[inode] = TCP_STATES.get(cols[3], cols[3])
    return found


async def test_idle_connections_the_upstream_closed_are_let_go(start_everything_http, start_gateway) -> None:
    upstream = start_everything_http()
    gw: Gateway = start_gateway(everything_http_config(upstream.mcp_url, "shared", MOUNT))
    pid = gw.proc.pid

    with anyio.fail_after(CALL_TIMEOUT_S):
        async with Client(gw.mcp_url, mode="auto", read_timeout_seconds=CALL_TIMEOUT_S) as client:
            # Calls at once, so that the gateway holds several connections.
            async with anyio.create_task_group() as calls:
                for n in range(CONCURRENT_CALLS):
                    calls.start_soon(client.call_tool, f"{MOUNT}__echo", {"message": f"call {n}"})

    after_calls = sockets_to(pid, upstream.port)
    assert len(after_calls) >= 2, f"the gateway's sockets to the upstream after the calls: {after_calls}"

    # The upstream closes idle connections on its own schedule; the gateway
    # sees that as some socket of after_calls no longer ESTABLISHED.
    def server_closed_some() -> bool:
        now = sockets_to(pid, upstream.port)
        return any(now.get(inode) != "ESTABLISHED" for inode in after_calls)

    assert await wait_until(server_closed_some, SERVER_CLOSE_WAIT_S), (
        f"the upstream closed none of the gateway's idle connections in {SERVER_CLOSE_WAIT_S}s: "
        f"{sockets_to(pid, upstream.port)}"
    )

    def none_in_close_wait() -> bool:
        return "CLOSE_WAIT" not in sockets_to(pid, upstream.port).values()

    assert await wait_until(none_in_close_wait, LET_GO_WITHIN_S), (
        f"the gateway still holds connections the upstream closed, {LET_GO_WITHIN_S}s on: "
        f"{sockets_to(pid, upstream.port)}"
    )


HOLDING = Path(__file__).parent / "fixtures" / "holding_server.py"
READS = 24  # more than rmcp's default of 16 requests at once per upstream session


@pytest.fixture
def holding_upstream(tmp_path: Path) -> Iterator[str]:
    # Killed outright: uvicorn would wait for the requests it holds.
    with python_http_fixture(HOLDING, ["{port}"], tmp_path / "holding.log", graceful=False) as url:
        yield url


async def test_slow_requests_do_not_queue_the_shared_upstream_session(holding_upstream: str, start_gateway) -> None:
    """A shared mount's upstream answers with JSON, so each request holds its
    POST for its whole run: many slow requests at once must all reach the
    upstream, not wait in a small hidden queue in front of it (which would
    hold every other request of every client on the mount too)."""
    gateway = start_gateway(f'[server]\nlisten = "127.0.0.1:0"\n\n[mounts.slow]\nurl = {toml_str(holding_upstream)}\n')
    with anyio.fail_after(60):
        async with Client(gateway.mcp_url, mode="auto") as c:
            held_now = 0

            async def read() -> None:
                result = await c.read_resource("slow+held://thing")
                assert result.contents[0].text == "let go"

            async with anyio.create_task_group() as group:
                for _ in range(READS):
                    group.start_soon(read)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    held_now = int((await c.call_tool("slow__held", {})).content[0].text)
                    if held_now == READS:
                        break
                    await anyio.sleep(0.1)
                await c.call_tool("slow__release", {})
            assert held_now == READS, f"only {held_now} of {READS} reads reached the upstream at once"


@pytest.mark.parametrize("isolation", ["shared", "per_session"])
async def test_an_upstream_that_never_answers_holds_no_request(holding_upstream: str, start_gateway, isolation: str) -> None:
    """`logging/setLevel` and `resources/subscribe` reach the upstream and
    are bounded by the mount's request timeout like every other request: an
    upstream that never answers them does not hold the client's request
    (setLevel answers; subscribe fails with the gateway's timeout)."""
    gateway = start_gateway(
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.slow]\nurl = {toml_str(holding_upstream)}\nisolation = {toml_str(isolation)}\n"
        'timeouts = { request = "1s" }\n'
    )
    with anyio.fail_after(30):
        async with Client(gateway.mcp_url, mode="auto") as c:
            # A per-session upstream is opened by the first request to it.
            assert (await c.call_tool("slow__held", {})).content[0].text == "0"
            await c.set_logging_level("debug")
            with pytest.raises(MCPError, match="mount slow timed out: the upstream did not answer within 1s"):
                await c.subscribe_resource("slow+held://thing")
