"""Clients of the older HTTP+SSE transport (2024-11-05) against the
gateway's `GET /sse` endpoint (`[server] sse_path`, src/http/sse_endpoint.rs):
the stream's first event, `endpoint`, names `/sse?sessionId=ID`; the client
posts its messages there (answered 202) and reads every answer and every
server message on the stream. Closing the stream ends the session.

The peers are real clients of that transport: the Python SDK 2.x
(`mcp.client.sse.sse_client` under `mcp.Client`), the Python SDK 1.x (in
`.cache/venv-mcp1`, as a subprocess: tests/interop/older/sse_client_1x.py)
and the TypeScript SDK's `SSEClientTransport` (the copy the conformance
fixture installs, run by Node: tests/interop/older/sse_client_ts.cjs).

The upstreams are the gateway's own demo server, mounted as `demo` (shared)
and `private` (per session), and server-everything (stdio, shared) where an
elicitation is needed. Each test ends by checking that the client's leaving
took its session away (`/status.json` `downstream_sessions` back to 0)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from conftest import Gateway, ROOT, everything_stdio_command, lone_error, node_bin, toml_str
from test_relay import FORM_ANSWER, Peer, dump, first_text, list_all_tools, text_of, wait_until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(r"ignore:The logging capability is deprecated as of 2026-07-28"),
]

OLDER = Path(__file__).parent / "older"
OLD_PYTHON = ROOT / ".cache" / "venv-mcp1" / "bin" / "python"
TS_SDK = ROOT / ".cache" / "conformance-fixture" / "node_modules" / "@modelcontextprotocol" / "sdk"

CALL_TIMEOUT_S = 30.0  # one MCP request
TEST_TIMEOUT_S = 90.0  # one whole test body
ARRIVAL_S = 5.0  # how long a notification may take to arrive
SESSION_GONE_S = 10.0  # how long the gateway may take to end a session whose stream closed
SUBPROCESS_TIMEOUT_S = 90.0

ENDPOINT_RE = re.compile(r"^/sse\?sessionId=([A-Za-z0-9_-]+)$")
DEMO_TOOLS = {"echo", "add", "counter", "remember", "recall", "pid", "slow", "log", "toggle_bonus"}


# ------------------------------------------------------------------ helpers


def demo_config(*, everything: bool = False) -> str:
    """`demo` (shared) and `private` (per session): the gateway's own demo
    server, the embedded default config's two mounts; with `everything`,
    server-everything over stdio (shared) too."""
    text = (
        "[server]\n"
        'listen = "127.0.0.1:0"\n'
        "\n"
        "[mounts.demo]\n"
        'command = "${JUNCTION_EXE}"\n'
        'args = ["demo-server"]\n'
        'isolation = "shared"\n'
        "\n"
        "[mounts.private]\n"
        'command = "${JUNCTION_EXE}"\n'
        'args = ["demo-server"]\n'
        'isolation = "per_session"\n'
    )
    if everything:
        command, args = everything_stdio_command()
        text += (
            "\n[mounts.everything]\n"
            f"command = {toml_str(command)}\n"
            f"args = [{', '.join(toml_str(a) for a in args)}]\n"
            'isolation = "shared"\n'
        )
    return text


def sse_url(gateway: Gateway) -> str:
    return f"{gateway.base_url}/sse"


async def downstream_sessions(gateway: Gateway) -> int:
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        resp = await http.get(f"{gateway.base_url}/status.json")
    assert resp.status_code == 200, f"/status.json: {resp.status_code} {resp.text[:500]}"
    return resp.json()["downstream_sessions"]


async def assert_sessions_end(gateway: Gateway) -> None:
    """Every client has left: the gateway must hold no session within SESSION_GONE_S."""

    async def none_left() -> bool:
        return await downstream_sessions(gateway) == 0

    assert await wait_until(none_left, SESSION_GONE_S), (
        f"{await downstream_sessions(gateway)} downstream session(s) left {SESSION_GONE_S}s after every SSE client closed its stream"
    )


@asynccontextmanager
async def connect_sse(url: str, peer: Peer | None = None, *, mode: str = "legacy") -> AsyncIterator[Client]:
    """`mcp.Client` over `mcp.client.sse.sse_client(url)`."""
    callbacks = peer.callbacks() if peer is not None else {}
    transport = sse_client(url, timeout=CALL_TIMEOUT_S, sse_read_timeout=CALL_TIMEOUT_S * 2)
    try:
        async with Client(transport, mode=mode, read_timeout_seconds=CALL_TIMEOUT_S, **callbacks) as client:
            yield client
    except BaseExceptionGroup as group:
        inner = lone_error(group)
        if inner is None:
            raise
        raise inner from None


def run_client(command: list[str]) -> dict[str, Any]:
    """Runs a client script that prints one JSON line last; returns it."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{command[:2]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_demo_tools_listed(names: list[str] | set[str]) -> None:
    for mount in ("demo", "private"):
        missing = sorted(f"{mount}__{t}" for t in DEMO_TOOLS if f"{mount}__{t}" not in names)
        assert not missing, f"not listed over SSE: {missing}; listed: {sorted(names)}"
    unprefixed = sorted(n for n in names if "__" not in n)
    assert not unprefixed, f"tools listed without a mount's namespace: {unprefixed}"


# ------------------------------------------------------- the wire, by hand


async def test_the_stream_names_where_to_post_and_carries_the_answers(start_gateway) -> None:
    """By hand, with httpx: the first event is `endpoint` naming
    `/sse?sessionId=ID`; a post there is answered 202 and its answer comes on
    the stream as a `message` event; posts without a session, or for one
    that does not exist, are refused; the stream's end ends the session."""
    gateway = start_gateway(demo_config())
    url = sse_url(gateway)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(CALL_TIMEOUT_S)) as http:
            async with http.stream("GET", url, headers={"Accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200, f"GET /sse: {stream.status_code} {(await stream.aread())[:500]!r}"
                assert stream.headers["content-type"].startswith("text/event-stream"), stream.headers
                events = sse_events(stream)
                kind, data = await anext(events)
                assert kind == "endpoint", f"first event {kind!r} {data!r}, expected `endpoint`"
                m = ENDPOINT_RE.match(data)
                assert m, f"the endpoint event names {data!r}, expected /sse?sessionId=ID"
                post_url = f"{gateway.base_url}{data}"

                refused = await http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "ping"})
                assert refused.status_code == 400, f"a post without sessionId: {refused.status_code} {refused.text[:300]}"
                refused = await http.post(f"{url}?sessionId={uuid.uuid4().hex}", json={"jsonrpc": "2.0", "id": 0, "method": "ping"})
                assert refused.status_code == 404, f"a post for an unknown session: {refused.status_code} {refused.text[:300]}"

                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2024-11-05",
                        "capabilities": {},
                        "clientInfo": {"name": "junction-interop-raw", "version": "0"},
                    },
                }
                resp = await http.post(post_url, json=init)
                assert resp.status_code == 202, f"initialize: {resp.status_code} {resp.text[:300]}"
                kind, data = await anext(events)
                answer = json.loads(data)
                assert kind == "message" and answer.get("id") == 1, f"{kind!r} {data[:500]}"
                assert answer["result"]["protocolVersion"] == "2024-11-05", data[:500]
                assert answer["result"]["serverInfo"]["name"] == "junction", data[:500]

                resp = await http.post(post_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                assert resp.status_code == 202, f"notifications/initialized: {resp.status_code} {resp.text[:300]}"
                call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "demo__add", "arguments": {"a": 20, "b": 22}}}
                resp = await http.post(post_url, json=call)
                assert resp.status_code == 202, f"tools/call: {resp.status_code} {resp.text[:300]}"
                kind, data = await anext(events)
                answer = json.loads(data)
                assert kind == "message" and answer.get("id") == 2, f"{kind!r} {data[:500]}"
                assert answer["result"]["content"][0]["text"] == "42", data[:500]
                assert await downstream_sessions(gateway) == 1
        # The stream is closed: the session is gone, and so is its endpoint.
        await assert_sessions_end(gateway)
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            gone = await http.post(post_url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert gone.status_code == 404, f"a post for a closed stream's session: {gone.status_code} {gone.text[:300]}"


async def test_a_ping_before_initialize_is_answered_on_the_stream(start_gateway) -> None:
    """2024-11-05 lets a client ping before `initialize` was answered. The
    post is the transport's (202); the answer, a result or a JSON-RPC
    error, comes on the stream, never as the post's HTTP status: the older
    SDKs give up on a post answered 4xx."""
    gateway = start_gateway(demo_config())
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(CALL_TIMEOUT_S)) as http:
            async with http.stream("GET", sse_url(gateway), headers={"Accept": "text/event-stream"}) as stream:
                events = sse_events(stream)
                kind, data = await anext(events)
                assert kind == "endpoint", (kind, data)
                resp = await http.post(f"{gateway.base_url}{data}", json={"jsonrpc": "2.0", "id": 7, "method": "ping"})
                assert resp.status_code == 202, f"ping before initialize: {resp.status_code} {resp.text[:300]}"
                kind, data = await anext(events)
                answer = json.loads(data)
                assert kind == "message" and answer.get("id") == 7, f"{kind!r} {data[:500]}"
        await assert_sessions_end(gateway)


async def sse_events(stream: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) of each event on `stream`; comments (keep-alives) skipped."""
    kind, data = "message", []
    async for line in stream.aiter_lines():
        if line == "":
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


# ------------------------------------------------------------ Python SDK 2.x


async def test_python_sdk_2x_over_sse(start_gateway) -> None:
    """`mcp.Client(sse_client(url))`, initialize handshake: both mounts'
    namespaced tools, a call, an unknown tool's error; the session goes
    when the client leaves."""
    gateway = start_gateway(demo_config())
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect_sse(sse_url(gateway)) as c:
            assert c.session.server_info is not None and c.session.server_info.name == "junction", c.session.server_info
            names = {t.name for t in await list_all_tools(c)}
            assert_demo_tools_listed(names)

            result = await c.call_tool("demo__add", {"a": 2, "b": 3})
            assert not result.is_error and text_of(result) == "5", dump(result)
            assert result.structured_content == {"sum": 5}, dump(result)
            marker = f"echo-{uuid.uuid4().hex[:8]}"
            result = await c.call_tool("private__echo", {"message": marker})
            assert text_of(result) == marker, dump(result)

            with pytest.raises(MCPError) as refused:
                await c.call_tool("demo__no_such_tool", {})
            assert refused.value.error.code == types.INVALID_PARAMS, dump(refused.value.error)
            with pytest.raises(MCPError) as refused:
                await c.call_tool("nomount__echo", {"message": "x"})
            assert refused.value.error.code == types.INVALID_PARAMS, dump(refused.value.error)

            # The session survives its errors.
            result = await c.call_tool("demo__echo", {"message": marker})
            assert text_of(result) == marker, dump(result)
            assert await downstream_sessions(gateway) == 1
        await assert_sessions_end(gateway)


async def test_python_sdk_2x_default_auto_mode_over_sse(start_gateway) -> None:
    """`mcp.Client`'s default mode, `auto`, first probes `server/discover`
    and falls back to `initialize` on any JSON-RPC error. Over this
    transport the probe's error must come on the stream (the post answered
    202), as from any older-transport server: a post answered 4xx makes the
    SDK's writer give up, and the connection is dead."""
    gateway = start_gateway(demo_config())
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect_sse(sse_url(gateway), mode="auto") as c:
            assert c.session.initialize_result is not None, "auto mode should have fallen back to initialize"
            result = await c.call_tool("demo__add", {"a": 1, "b": 1})
            assert text_of(result) == "2", dump(result)
        await assert_sessions_end(gateway)


async def test_server_requests_and_notifications_reach_the_sse_client(start_gateway) -> None:
    """What a tool sends the client mid-call rides the event stream, and the
    client's answers (posted) reach the tool: sampling (shared and
    per-session mounts), a form elicitation (server-everything), roots,
    progress, logging."""
    gateway = start_gateway(demo_config(everything=True))
    peer = Peer("sse")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect_sse(sse_url(gateway), peer) as c:
            names = {t.name for t in await list_all_tools(c)}
            for name in ("demo__ask_model", "private__ask_model", "everything__trigger-elicitation-request"):
                assert name in names, f"{name} not listed to a client declaring sampling and elicitation: {sorted(names)}"

            # sampling/createMessage, from a shared and from a per-session upstream
            for n, tool in enumerate(("demo__ask_model", "private__ask_model"), start=1):
                prompt = f"prompt-{uuid.uuid4().hex[:8]}"
                result = await c.call_tool(tool, {"prompt": prompt})
                assert not result.is_error, dump(result)
                assert len(peer.sampling) == n, f"sampling callback ran {len(peer.sampling)} times; {dump(result)}"
                assert first_text(peer.sampling[-1]) == prompt, dump(peer.sampling[-1])
                assert text_of(result) == f"junction-interop said: {peer.sampled_text}", dump(result)

            # elicitation/create (form)
            result = await c.call_tool("everything__trigger-elicitation-request", {})
            assert not result.is_error, dump(result)
            assert len(peer.elicitations) == 1, f"elicitations seen: {peer.elicitations}; {dump(result)}"
            assert f"- Name: {FORM_ANSWER['name']}" in text_of(result), dump(result)

            # roots/list
            result = await c.call_tool("private__roots", {})
            assert not result.is_error, dump(result)
            assert peer.root_uri in text_of(result), f"the client's roots are not in the result: {dump(result)}"

            # progress, to the caller's callback
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            result = await c.call_tool("demo__slow", {"steps": 3, "delay_ms": 50}, progress_callback=on_progress)
            assert text_of(result) == "done after 3 steps", dump(result)
            assert await wait_until(lambda: len(progress) >= 3, ARRIVAL_S), progress
            assert progress == [1, 2, 3], progress

            # notifications/message
            marker = f"log-{uuid.uuid4().hex[:8]}"
            result = await c.call_tool("private__log", {"level": "warning", "data": {"marker": marker}})
            assert text_of(result) == "logged", dump(result)
            assert await wait_until(lambda: any(marker in str(p.data) for p in peer.logs), ARRIVAL_S), (
                f"the log message never arrived; logs: {[p.data for p in peer.logs]}"
            )
            assert not peer.stream_errors, f"the client could not parse what it was sent: {peer.stream_errors}"
        await assert_sessions_end(gateway)


async def test_list_changes_ride_the_stream_to_the_sessions_affected(start_gateway) -> None:
    """A message from no request of the client's (a list change another
    client's call caused) comes on its event stream: a shared mount's
    change reaches both clients, a per-session mount's only its own."""
    gateway = start_gateway(demo_config())
    a, b = Peer("A"), Peer("B")

    def tool_changes(peer: Peer) -> int:
        return len(peer.of(types.ToolListChangedNotification))

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect_sse(sse_url(gateway), a) as ca, connect_sse(sse_url(gateway), b) as cb:
            assert "demo__bonus" not in {t.name for t in await list_all_tools(cb)}
            result = await ca.call_tool("demo__toggle_bonus", {})
            assert text_of(result) == "bonus on", dump(result)
            assert await wait_until(lambda: tool_changes(b) == 1, ARRIVAL_S), (
                f"B never heard of the shared mount's tool list change: {b.notifications}"
            )
            assert await wait_until(lambda: tool_changes(a) == 1, ARRIVAL_S), a.notifications
            assert "demo__bonus" in {t.name for t in await list_all_tools(cb)}

            # A's own per-session upstream: A hears, B must not ...
            result = await ca.call_tool("private__toggle_bonus", {})
            assert text_of(result) == "bonus on", dump(result)
            assert await wait_until(lambda: tool_changes(a) == 2, ARRIVAL_S), a.notifications
            # ... as shown by a change B hears after it.
            result = await cb.call_tool("demo__toggle_bonus", {})
            assert text_of(result) == "bonus off", dump(result)
            assert await wait_until(lambda: tool_changes(b) >= 2, ARRIVAL_S), b.notifications
            assert await wait_until(lambda: tool_changes(a) == 3, ARRIVAL_S), a.notifications
            await anyio.sleep(0.2)
            assert tool_changes(b) == 2, f"B heard A's per-session list change: {b.notifications}"
            assert not a.stream_errors and not b.stream_errors, (a.stream_errors, b.stream_errors)
        await assert_sessions_end(gateway)


async def test_each_sse_client_has_its_own_per_session_upstream(start_gateway) -> None:
    """Two SSE clients at once: the per-session mount keeps state per client
    (neither sees the other's note), the shared mount one state for both."""
    gateway = start_gateway(demo_config())
    key = f"k-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect_sse(sse_url(gateway)) as ca, connect_sse(sse_url(gateway)) as cb:
            assert await downstream_sessions(gateway) == 2
            pid_a = text_of(await ca.call_tool("private__pid", {}))
            pid_b = text_of(await cb.call_tool("private__pid", {}))
            assert pid_a != pid_b, f"both SSE clients reached the same per-session upstream process ({pid_a})"

            await ca.call_tool("private__remember", {"key": key, "value": "from-A"})
            result = await cb.call_tool("private__recall", {"key": key})
            assert result.is_error, f"B recalled A's per-session note: {dump(result)}"
            await cb.call_tool("private__remember", {"key": key, "value": "from-B"})
            assert text_of(await ca.call_tool("private__recall", {"key": key})) == "from-A"
            assert text_of(await cb.call_tool("private__recall", {"key": key})) == "from-B"

            # The shared mount: one process, one state.
            await ca.call_tool("demo__remember", {"key": key, "value": "shared"})
            assert text_of(await cb.call_tool("demo__recall", {"key": key})) == "shared"
            assert text_of(await ca.call_tool("demo__pid", {})) == text_of(await cb.call_tool("demo__pid", {}))
        await assert_sessions_end(gateway)


# ------------------------------------------------------------ Python SDK 1.x


async def test_python_sdk_1x_over_sse(start_gateway) -> None:
    """The Python SDK 1.x's `sse_client`: the same surface, plus progress,
    sampling and logging, and no event it cannot parse."""
    assert OLD_PYTHON.exists(), f"{OLD_PYTHON} missing: run scripts/install-test-deps.sh"
    gateway = start_gateway(demo_config())
    seen = await anyio.to_thread.run_sync(run_client, [str(OLD_PYTHON), str(OLDER / "sse_client_1x.py"), sse_url(gateway)])
    assert seen["version"] == "2025-06-18", seen
    assert seen["server"] == "junction", seen
    assert_demo_tools_listed(seen["tools"])
    assert seen["add"] == {"is_error": False, "text": ["42"]}, seen
    assert seen["unknown"].get("code") == types.INVALID_PARAMS, seen
    assert seen["slow"] == {"is_error": False, "text": ["done after 3 steps"]}, seen
    assert seen["progress"] == [1, 2, 3], seen
    assert seen["sampling"] == ["what is 1x?"], seen
    assert seen["ask"]["text"] == [f"junction-1x said: {seen['ask']['sampled']}"], seen
    assert seen["log"] == {"is_error": False, "text": ["logged"]}, seen
    assert {"from": "1x"} in seen["logs"], seen
    assert seen["recall"] == {"is_error": False, "text": ["one-x"]}, seen
    assert seen["errors"] == [], f"the client could not parse what it was sent: {seen['errors']}"
    await assert_sessions_end(gateway)


# -------------------------------------------------------------- TypeScript SDK


async def test_typescript_sdk_sse_client_transport(start_gateway) -> None:
    """The TypeScript SDK's `SSEClientTransport`: tools, a call, an unknown
    tool's error, a sampling round trip."""
    if not (TS_SDK / "package.json").is_file():
        pytest.fail(f"{TS_SDK} missing: run scripts/install-test-deps.sh")
    gateway = start_gateway(demo_config())
    command = [node_bin(), str(OLDER / "sse_client_ts.cjs"), str(TS_SDK), sse_url(gateway)]
    seen = await anyio.to_thread.run_sync(run_client, command)
    assert seen["server"] == "junction", seen
    assert_demo_tools_listed(seen["tools"])
    assert seen["add"] == {"isError": False, "text": ["42"]}, seen
    assert seen["unknown"].get("code") == types.INVALID_PARAMS, seen
    assert seen["sampling"] == ["what is ts?"], seen
    assert seen["ask"]["text"] == [f"junction-ts said: {seen['ask']['sampled']}"], seen
    assert seen["errors"] == [], seen
    await assert_sessions_end(gateway)

