"""Resumption with a real client: the official Python `mcp` client loses the
connection carrying a long call's SSE stream and gets the rest of the call
back through the gateway.

A TCP proxy between the client and the gateway cuts, once, the connection
whose answer carries the call's first progress notification, right after
forwarding it. The client then does what the 2025-11-25 transport says: it
waits the `retry` the stream announced (3 s) and reconnects with `GET` and
`Last-Event-ID`. By then server-everything has finished the 2 s operation,
so the gateway must have kept the response for the client that went away,
and must replay strictly after the last event the client read: each
progress step reaches the callback exactly once, and the call returns its
result instead of failing."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from mcp import Client

from conftest import everything_config

MOUNT = "everything"
CALL_TIMEOUT_S = 30.0
TEST_TIMEOUT_S = 60.0
# Enough of the end of one chunk to find the marker split across two.
MARKER_WINDOW = 64


class CuttingProxy:
    """Forwards 127.0.0.1 TCP connections to the gateway; cuts the first one
    whose server side sends `marker`, just after forwarding that chunk."""

    def __init__(self, target_port: int, marker: bytes) -> None:
        self.target_port = target_port
        self.marker = marker
        self.cuts = 0
        self.connections = 0

    async def start(self, tasks: anyio.abc.TaskGroup) -> int:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        tasks.start_soon(listener.serve, self._relay)
        return listener.extra(anyio.abc.SocketAttribute.local_port)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        self.connections += 1
        async with client, await anyio.connect_tcp("127.0.0.1", self.target_port) as server:
            async with anyio.create_task_group() as pumps:

                async def upward() -> None:
                    async for chunk in client:
                        await server.send(chunk)
                    pumps.cancel_scope.cancel()

                async def downward() -> None:
                    tail = b""
                    async for chunk in server:
                        await client.send(chunk)
                        seen = tail + chunk
                        tail = seen[-MARKER_WINDOW:]
                        if self.cuts == 0 and self.marker in seen:
                            self.cuts += 1
                            break
                    pumps.cancel_scope.cancel()

                pumps.start_soon(upward)
                pumps.start_soon(downward)


@pytest.mark.anyio
async def test_python_client_resumes_a_dropped_call_stream(start_gateway, monkeypatch) -> None:
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    gateway = start_gateway(everything_config("shared"))
    port = int(gateway.addr.rsplit(":", 1)[1])
    steps: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append((progress, total))

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with anyio.create_task_group() as tasks:
            proxy = CuttingProxy(port, b"notifications/progress")
            proxy_port = await proxy.start(tasks)
            url = f"http://127.0.0.1:{proxy_port}/mcp"
            async with Client(url, mode="auto", read_timeout_seconds=CALL_TIMEOUT_S) as client:
                result = await client.call_tool(
                    f"{MOUNT}__trigger-long-running-operation",
                    {"duration": 2, "steps": 4},
                    progress_callback=on_progress,
                )
                # Callbacks run on tasks of their own.
                with anyio.move_on_after(5):
                    while len(steps) < 4:
                        await anyio.sleep(0.05)
            tasks.cancel_scope.cancel()

    assert proxy.cuts == 1, f"the proxy never cut the call's stream ({proxy.connections} connections)"
    assert not result.is_error, result
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert "Long running operation completed" in text, result
    assert sorted(steps) == [(1, 4), (2, 4), (3, 4), (4, 4)], f"progress seen by the callback: {steps}"
