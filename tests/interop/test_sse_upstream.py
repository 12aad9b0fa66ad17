"""Junction fronting @modelcontextprotocol/server-everything over the legacy
HTTP+SSE transport (2024-11-05): `mcp-server-everything sse` on
127.0.0.1:PORT, mounted as `everything` with `url = ".../sse"` and
`transport = "sse"`, as a `shared` and as a `per_session` mount (every test
runs for both). The gateway GETs `/sse`, is told `event: endpoint` (a
relative `/message?sessionId=...`), POSTs its JSON-RPC messages there and
reads the server's messages as `event: message` on the stream.

The client is the official Python `mcp` 2.x `Client` (Streamable HTTP to the
gateway), declaring sampling, elicitation and roots (test_relay's `Peer`), so
server-everything lists its capability-dependent tools.

Evidence is taken from what really arrives: at the client (callbacks,
notifications, results), and at the upstream, whose log says which SSE
sessions it opened and closed ("Client Connected:  <id>", "Client
Disconnected:  <id>"), and where a preload (`request_recorder.cjs`, written
next to the test's files) logs every HTTP request it receives, with the
headers the mount configures. The tools `toggle-subscriber-updates` and
`toggle-simulated-logging` answer with the upstream session id they ran in:
that tells which SSE session served which client.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from conftest import EverythingHttp, Gateway, everything_entry, free_port, loopback_preload, node_bin, toml_str
from test_relay import FORM_ANSWER, Peer, connect, dump, first_text, list_all_resources, list_all_tools, text_of, two_sessions_get_only_their_own, wait_until

pytestmark = [
    pytest.mark.anyio,
    # The gateway speaks 2025-11-25, where resources/subscribe is current.
    pytest.mark.filterwarnings(r"ignore:resources/(un)?subscribe is removed as of 2026-07-28"),
    pytest.mark.filterwarnings(r"ignore:The logging capability is deprecated as of 2026-07-28"),
]

MOUNT = "everything"
TOOL_PREFIX = f"{MOUNT}__"
URI_PREFIX = f"{MOUNT}+"

TEST_TIMEOUT_S = 120.0  # one whole test body
TICK_S = 5.0  # server-everything's resource update period
SESSION_CLOSE_S = 10.0  # until a per-session upstream's SSE session is closed after its client left
NOTICE_DEATH_S = 15.0  # until the gateway reports a mount whose server was killed as not ready
COME_BACK_S = 30.0  # until it reports the mount ready again once the server is back

CAPABILITY_TOOLS = ("trigger-sampling-request", "trigger-elicitation-request", "trigger-url-elicitation", "get-roots-list")
PLAIN_TOOLS = (
    "echo",
    "get-sum",
    "trigger-long-running-operation",
    "toggle-subscriber-updates",
    "toggle-simulated-logging",
    "gzip-file-as-resource",
)

# Sent on every request to the upstream (the mount's `headers`).
PROBE_HEADER = "X-Junction-Probe"
PROBE_VALUE = f"sse-probe-{uuid.uuid4().hex[:12]}"
AUTH_VALUE = f"Bearer sse-token-{uuid.uuid4().hex[:12]}"

CONNECTED_RE = re.compile(r"Client Connected:\s+([0-9a-f-]{36})")
DISCONNECTED_RE = re.compile(r"Client Disconnected:\s+([0-9a-f-]{36})")
TOOL_SESSION_RE = re.compile(r"(Started|Stopped) simulated .*?for session ([0-9a-f-]{36})")
REQUEST_MARK = "JUNCTION-REQUEST "

# Preload: one line on stderr per HTTP request the server receives, with the
# headers the test configures (node's http module is the same object for
# require() and import, so the ESM server uses the patched prototype).
REQUEST_RECORDER_SOURCE = """\
const http = require('http');
const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (event, req, ...rest) {
  if (event === 'request') {
    process.stderr.write('%s' + JSON.stringify({
      method: req.method,
      url: req.url,
      probe: req.headers['x-junction-probe'] ?? null,
      authorization: req.headers['authorization'] ?? null,
    }) + '\\n');
  }
  return emit.call(this, event, req, ...rest);
};
""" % REQUEST_MARK


# ------------------------------------------------------------------ upstream


@dataclass
class EverythingSse(EverythingHttp):
    """`mcp-server-everything sse` on 127.0.0.1:PORT (SSE stream at /sse,
    messages POSTed to /message?sessionId=...)."""

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse"

    @classmethod
    def start_sse(cls, scratch: Path, index: int, port: int | None = None) -> EverythingSse:
        port = port if port is not None else free_port()
        log_path = scratch / f"everything-sse-{index}.log"
        recorder = scratch / "request_recorder.cjs"
        if not recorder.is_file():
            recorder.write_text(REQUEST_RECORDER_SOURCE)
        preload = loopback_preload(scratch)
        env = {**os.environ, "PORT": str(port), "NODE_OPTIONS": f'--require "{preload}" --require "{recorder}"'}
        with open(log_path, "wb") as sink:
            proc = subprocess.Popen(
                [node_bin(), str(everything_entry()), "sse"],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=str(scratch),
                env=env,
            )
        return cls(proc=proc, port=port, log_path=log_path)

    def connected(self) -> list[str]:
        """Upstream SSE session ids opened so far, in order."""
        return CONNECTED_RE.findall(self.log())

    def disconnected(self) -> list[str]:
        return DISCONNECTED_RE.findall(self.log())

    def requests(self) -> list[dict[str, Any]]:
        """Every HTTP request the server received (method, url, recorded headers)."""
        out = []
        for line in self.log().splitlines():
            if line.startswith(REQUEST_MARK):
                out.append(json.loads(line[len(REQUEST_MARK) :]))
        return out

    def posts_from(self, session_id: str) -> int:
        return sum(1 for r in self.requests() if r["method"] == "POST" and f"sessionId={session_id}" in r["url"])


@pytest.fixture
def start_everything_sse(tmp_path: Path) -> Iterator:
    """Factory: start_everything_sse(port=None) -> listening EverythingSse. Stops every one it started."""
    started: list[EverythingSse] = []

    def start(port: int | None = None) -> EverythingSse:
        server = EverythingSse.start_sse(tmp_path, len(started), port)
        started.append(server)
        server.wait_listening()
        return server

    yield start

    problems: list[str] = []
    for server in started:
        problems.extend(server.stop())
        print(f"---- server-everything (SSE) pid {server.proc.pid} port {server.port} exit {server.proc.returncode}, output:")
        print(server.log()[-20000:])
    if problems:
        pytest.fail("teardown: " + "; ".join(problems))


def sse_config(url: str, isolation: str, *, extra: str = "") -> str:
    headers = f"{{ {toml_str(PROBE_HEADER)} = {toml_str(PROBE_VALUE)}, Authorization = {toml_str(AUTH_VALUE)} }}"
    return (
        "[server]\n"
        'listen = "127.0.0.1:0"\n'
        "\n"
        f"[mounts.{MOUNT}]\n"
        f"url = {toml_str(url)}\n"
        'transport = "sse"\n'
        f"isolation = {toml_str(isolation)}\n"
        f"headers = {headers}\n"
        f"{extra}"
    )


@dataclass
class Target:
    gateway: Gateway
    upstream: EverythingSse
    isolation: str

    @property
    def url(self) -> str:
        return self.gateway.mcp_url

    @property
    def shared(self) -> bool:
        return self.isolation == "shared"


# `start_everything_sse` before `start_gateway`: teardown runs in reverse, so
# the gateway stops before its upstream does.
@pytest.fixture
def target(start_everything_sse, start_gateway, isolation: str, monkeypatch) -> Target:
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    upstream = start_everything_sse()
    return Target(start_gateway(sse_config(upstream.sse_url, isolation)), upstream, isolation)


async def mount_status(gateway: Gateway) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        resp = await http.get(f"{gateway.base_url}/status.json")
    assert resp.status_code == 200, f"/status.json: {resp.status_code} {resp.text[:500]}"
    mounts = [m for m in resp.json()["mounts"] if m["name"] == MOUNT]
    assert len(mounts) == 1, resp.text[:2000]
    return mounts[0]


def tool_session(result: types.CallToolResult) -> tuple[str, str]:
    """('Started' | 'Stopped', upstream session id) from a toggle tool's answer."""
    m = TOOL_SESSION_RE.search(text_of(result))
    assert m, f"no session id in the toggle's answer: {dump(result)}"
    return m.group(1), m.group(2)


# ----------------------------------------------------------- listing, echo


async def test_tools_listed_under_the_namespace_and_echo(target: Target) -> None:
    """The mount runs on the SSE transport (status), its tools are listed
    under the namespace, the capability-dependent ones included (the
    upstream SSE session was initialized with the client's capabilities),
    and `echo` round-trips: the message reaches the server as a POST to the
    endpoint its SSE stream named, and its answer comes back on the stream."""
    marker = f"sse-echo-{uuid.uuid4().hex[:10]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        status = await mount_status(target.gateway)
        assert status["transport"] == "sse" and status["health"] == "ready", status
        async with connect(target.url, Peer("A")) as c:
            names = {t.name for t in await list_all_tools(c)}
            bare = sorted(n for n in names if not n.startswith(TOOL_PREFIX))
            assert not bare, f"un-namespaced tools listed: {bare}"
            missing = [TOOL_PREFIX + t for t in PLAIN_TOOLS + CAPABILITY_TOOLS if TOOL_PREFIX + t not in names]
            assert not missing, f"not listed for a client declaring sampling/elicitation/roots: {missing}; listed: {sorted(names)}"

            sessions_before = set(target.upstream.connected())
            result = await c.call_tool(f"{TOOL_PREFIX}echo", {"message": marker})
            assert not result.is_error, dump(result)
            assert text_of(result) == f"Echo: {marker}", dump(result)

    sessions = target.upstream.connected()
    assert sessions, f"the upstream saw no SSE session:\n{target.upstream.log()[-3000:]}"
    gets = [r for r in target.upstream.requests() if r["method"] == "GET"]
    assert gets and all(r["url"].startswith("/sse") for r in gets), gets
    assert all(target.upstream.posts_from(s) > 0 for s in sessions), (
        f"an SSE session the gateway opened got no POST at its endpoint: {sessions}; requests {target.upstream.requests()}"
    )
    if target.shared:
        assert set(sessions) == sessions_before, f"shared: a new SSE session opened for the call: {sessions_before} -> {sessions}"


async def test_mount_headers_reach_the_stream_and_every_post(target: Target) -> None:
    """The mount's `headers` go with the SSE `GET` and with every message
    `POST`, and the server received nothing without them."""
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, Peer("A")) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}get-sum", {"a": 20, "b": 22})
            assert not result.is_error and "42" in text_of(result), dump(result)
    requests = target.upstream.requests()
    methods = {r["method"] for r in requests}
    assert {"GET", "POST"} <= methods, f"expected the SSE GET and message POSTs, got {requests}"
    wrong = [r for r in requests if r["probe"] != PROBE_VALUE or r["authorization"] != AUTH_VALUE]
    assert not wrong, f"requests without the mount's headers ({PROBE_HEADER}={PROBE_VALUE}, Authorization): {wrong}"


# ------------------------------------------------------------------ progress


async def test_progress_arrives_with_the_clients_token(target: Target) -> None:
    """`trigger-long-running-operation` sends progress on the SSE stream
    under the token the gateway gave the upstream; the client receives each
    step under its own token. With a callback the Python client uses its
    request id as the token and calls the callback only for that exact
    token; with a token of its own choosing (a string) the notifications on
    the wire must carry exactly that string."""
    peer = Peer("A")
    got: list[tuple[float, float | None]] = []
    token = f"sse-progress-{uuid.uuid4().hex[:10]}"

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        got.append((progress, total))

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            first = await c.call_tool(
                f"{TOOL_PREFIX}trigger-long-running-operation", {"duration": 1.5, "steps": 3}, progress_callback=on_progress
            )
            assert not first.is_error, dump(first)
            assert "Long running operation completed. Duration: 1.5 seconds, Steps: 3." in text_of(first), dump(first)
            await wait_until(lambda: len(got) >= 3, 5)
            assert sorted(got) == [(1, 3), (2, 3), (3, 3)], f"the call's progress callback got {got}; on the wire: {peer.progress()}"

            second = await c.call_tool(
                f"{TOOL_PREFIX}trigger-long-running-operation", {"duration": 1, "steps": 2}, meta={"progressToken": token}
            )
            assert not second.is_error, dump(second)
            await wait_until(lambda: len([p for p in peer.progress() if p.total == 2]) >= 2, 5)

    wire = peer.progress()
    mine = [p for p in wire if p.progress_token == token]
    assert sorted((p.progress, p.total) for p in mine) == [(1, 2), (2, 2)], (
        f"progress under the client's token {token!r}: {mine}; all progress on the wire: {wire}"
    )
    first_tokens = {p.progress_token for p in wire if p.total == 3}
    assert len(first_tokens) == 1 and token not in first_tokens, f"first call's progress tokens: {first_tokens}"
    assert len(wire) == 5, f"expected 5 progress notifications, got {wire}"


# ----------------------------------------------- server-to-client requests


async def test_sampling_and_elicitation_reach_the_client(target: Target) -> None:
    """The upstream's `sampling/createMessage` (sent on its SSE stream during
    the call) reaches this client's callback with the tool's prompt and
    maxTokens, and the client's answer (POSTed back by the gateway) is in the
    tool's result. Likewise a form `elicitation/create`."""
    peer = Peer("A")
    prompt = f"sse-sampling-{uuid.uuid4().hex[:10]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}trigger-sampling-request", {"prompt": prompt, "maxTokens": 7})
            assert not result.is_error, dump(result)
            assert len(peer.sampling) == 1, f"sampling callback ran {len(peer.sampling)} times; result {dump(result)}"
            assert prompt in first_text(peer.sampling[0]), dump(peer.sampling[0])
            assert peer.sampling[0].max_tokens == 7, dump(peer.sampling[0])
            assert peer.sampled_text in text_of(result), f"the client's sampling answer is not in the result: {dump(result)}"

            result = await c.call_tool(f"{TOOL_PREFIX}trigger-elicitation-request", {})
            assert not result.is_error, dump(result)
            forms = [e for e in peer.elicitations if isinstance(e, types.ElicitRequestFormParams)]
            assert len(forms) == 1, f"form elicitations seen: {peer.elicitations}; result {dump(result)}"
            text = text_of(result)
            assert f"- Name: {FORM_ANSWER['name']}" in text and f"- Email: {FORM_ANSWER['email']}" in text, text


async def test_roots_reach_the_tool(target: Target) -> None:
    """`get-roots-list` shows the roots this client answered `roots/list`
    with (asked over the SSE stream, answered by a POST)."""
    peer = Peer("A")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}get-roots-list", {})
            assert not result.is_error, dump(result)
    assert peer.roots_calls >= 1, f"roots/list never reached the client; result {dump(result)}"
    text = text_of(result)
    assert "Current MCP Roots (1 total)" in text and peer.root_uri in text, f"the client's roots are not in the result: {text}"


# ------------------------------------------------------ resources, prompts


async def test_resource_read_and_prompt_get(target: Target) -> None:
    """Resources are listed under the namespace and a namespaced URI reads
    back the upstream's document, under the same namespaced URI; prompts are
    listed under the namespace and `prompts/get` renders the argument."""
    arch = f"{URI_PREFIX}demo://resource/static/document/architecture.md"
    city = f"Junction-{uuid.uuid4().hex[:6]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, Peer("A")) as c:
            uris = [str(r.uri) for r in await list_all_resources(c)]
            bare = [u for u in uris if not u.startswith(URI_PREFIX)]
            assert not bare, f"un-namespaced resource URIs: {bare}"
            assert arch in uris, uris

            read = await c.read_resource(arch)
            assert len(read.contents) == 1, dump(read)
            content = read.contents[0]
            assert str(content.uri) == arch, f"read {arch} answered content uri {content.uri}"
            assert isinstance(content, types.TextResourceContents), dump(read)
            assert content.text.startswith("# Everything Server – Architecture"), content.text[:200]

            prompts = (await c.list_prompts()).prompts
            names = [p.name for p in prompts]
            assert f"{TOOL_PREFIX}args-prompt" in names and all(n.startswith(TOOL_PREFIX) for n in names), names
            rendered = await c.get_prompt(f"{TOOL_PREFIX}args-prompt", {"city": city})
            texts = [m.content.text for m in rendered.messages if isinstance(m.content, types.TextContent)]
            assert texts == [f"What's weather in {city}?"], dump(rendered)


async def test_resource_subscription_updates(target: Target) -> None:
    """A subscription to a namespaced URI reaches the upstream session (which
    acknowledges it with a log message) and, once `toggle-subscriber-updates`
    runs, the server's `notifications/resources/updated` (on its SSE stream)
    reaches the client under the namespaced URI, for that URI only; after
    unsubscribing, no more."""
    u1 = f"{URI_PREFIX}demo://resource/dynamic/text/1"
    peer = Peer("A")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            await c.subscribe_resource(u1)
            result = await c.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
            state, session = tool_session(result)
            assert state == "Started", dump(result)
            try:
                arrived = await wait_until(lambda: u1 in peer.updated_uris(), 2 * TICK_S + 3)
                assert arrived, f"no resources/updated for {u1}; notifications: {[dump(n) for n in peer.notifications]}"
                assert set(peer.updated_uris()) == {u1}, peer.updated_uris()
                await c.unsubscribe_resource(u1)
                await anyio.sleep(0.5)  # an update already on its way may still land
                before = len(peer.updated_uris())
                await anyio.sleep(TICK_S + 1.5)
                late = peer.updated_uris()[before:]
                assert not late, f"unsubscribed from {u1} but still got updates: {late}"
            finally:
                await c.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
    assert session in target.upstream.connected(), f"the toggle ran in session {session}, unknown to the upstream's log"


# ----------------------------------------------------------------- isolation


async def test_sessions_follow_isolation(target: Target) -> None:
    """Two clients call the mount. `toggle-subscriber-updates` is a per-SSE-
    session switch that answers with its session id.

    per_session: each client gets an SSE session of its own, opened for it
    (A's and B's toggles both start, in two new sessions, and status counts
    two more upstream sessions); each is closed once its client leaves.
    shared: both run in the one SSE session the gateway opened at start (B's
    toggle stops what A's started), and no session opens or closes."""
    a, b = Peer("A"), Peer("B")
    upstream = target.upstream
    with anyio.fail_after(TEST_TIMEOUT_S):
        # A client that only lists: discovery for this capability profile,
        # without a per-session upstream.
        async with connect(target.url, Peer("warm")) as warm:
            await list_all_tools(warm)
        baseline = set(upstream.connected())
        gauge_before = (await mount_status(target.gateway))["upstream_sessions"]
        async with connect(target.url, a) as ca, connect(target.url, b) as cb:
            state_a, session_a = tool_session(await ca.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {}))
            state_b, session_b = tool_session(await cb.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {}))
            new = set(upstream.connected()) - baseline
            gauge_during = (await mount_status(target.gateway))["upstream_sessions"]
            if target.shared:
                assert (state_a, state_b) == ("Started", "Stopped"), (state_a, state_b)
                assert session_a == session_b and session_a in baseline, (session_a, session_b, baseline)
                assert not new, f"shared: SSE sessions opened for the clients: {new}"
                assert gauge_during == gauge_before, (gauge_before, gauge_during)
            else:
                assert (state_a, state_b) == ("Started", "Started"), (state_a, state_b)
                assert session_a != session_b, f"per_session: A and B ran in one SSE session {session_a}"
                assert new == {session_a, session_b}, f"per_session: new SSE sessions {new}, the tools ran in {session_a}, {session_b}"
                assert upstream.posts_from(session_a) > 0 and upstream.posts_from(session_b) > 0
                assert gauge_during == gauge_before + 2, f"upstream_sessions {gauge_before} -> {gauge_during}"
                # Back off, so nothing is left running in them.
                await ca.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
                await cb.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})

        if target.shared:
            await anyio.sleep(2)
            assert not (set(upstream.disconnected()) & baseline), f"shared session closed: {upstream.disconnected()}"
        else:
            closed = await wait_until(lambda: {session_a, session_b} <= set(upstream.disconnected()), SESSION_CLOSE_S)
            assert closed, (
                f"per_session: the clients left but their SSE sessions {session_a}, {session_b} are still open "
                f"{SESSION_CLOSE_S}s later (closed: {upstream.disconnected()})"
            )
            assert not (set(upstream.disconnected()) & baseline), f"discovery session closed: {upstream.disconnected()}"


# ------------------------------------------------------ two clients at once


async def test_concurrent_clients_get_only_their_own(target: Target) -> None:
    """Two client sessions on the mount at the same time.

    Progress: both run `trigger-long-running-operation` at once with
    different step counts (A 4, B 5); both clients number their requests
    alike, so their own tokens may well be equal. Each gets exactly its own.

    Sampling: A calls `trigger-sampling-request` and holds its sampling
    request in its callback while B calls the same tool. Neither client may
    see the other's prompt or get the other's answer. per_session: each
    upstream SSE session has one client, so B's request reaches B. shared:
    one SSE stream carries both calls' server requests and nothing on it
    says which call B's belongs to (as over stdio): the gateway refuses it
    (ambiguous is refused, never guessed), which the tool reports in B's
    result."""
    await two_sessions_get_only_their_own(target.url, ambiguous_refused=target.shared)


# ------------------------------------------------------------------- restart

FAST_SUPERVISION = (
    "\n[supervision]\n"
    'restart_backoff = "250ms"\n'
    'restart_backoff_max = "2s"\n'
    "crash_loop_restarts = 50\n"
    'down_retry = "2s"\n'
)


async def test_a_killed_sse_server_comes_back(start_everything_sse, start_gateway, isolation: str, monkeypatch) -> None:
    """server-everything is killed (SIGKILL) during a call: the call fails at
    once, as a tool error naming the mount; the gateway sees the SSE stream
    end and reports the mount not ready; a call meanwhile fails at once, as
    a tool error naming the mount. Another server-everything on the same
    port: the gateway reconnects (a new SSE session on the new server), the
    mount is ready again with a restart counted, and the same client
    session's next call works there. shared: the subscription the client
    held is renewed on the new session (updates flow from the new server)."""
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    first = start_everything_sse()
    gateway = start_gateway(sse_config(first.sse_url, isolation, extra=FAST_SUPERVISION))
    u1 = f"{URI_PREFIX}demo://resource/dynamic/text/3"
    peer = Peer("A")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(gateway.mcp_url, peer) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}echo", {"message": "before"})
            assert text_of(result) == "Echo: before", dump(result)
            await c.subscribe_resource(u1)
            restarts_before = (await mount_status(gateway))["restarts"]

            # A call in flight when the server dies (it has shown progress).
            steps: list[float] = []
            in_flight: dict[str, types.CallToolResult] = {}

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                steps.append(progress)

            async def long_call() -> None:
                in_flight["result"] = await c.call_tool(
                    f"{TOOL_PREFIX}trigger-long-running-operation", {"duration": 60, "steps": 60}, progress_callback=on_progress
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(long_call)
                assert await wait_until(lambda: bool(steps), 10), "the long call showed no progress within 10 s"
                first.proc.kill()
                first.proc.wait(10)
                with anyio.move_on_after(10):
                    await wait_until(lambda: "result" in in_flight, 10)
                if "result" not in in_flight:
                    tg.cancel_scope.cancel()
            assert "result" in in_flight, "the call in flight when the SSE server died did not end within 10 s"
            failed = in_flight["result"]
            assert failed.is_error and MOUNT in text_of(failed), f"expected a tool error naming the mount: {dump(failed)}"
            assert len(steps) < 60, steps

            async def not_ready() -> bool:
                return (await mount_status(gateway))["health"] in ("degraded", "down")

            noticed = await wait_until(not_ready, NOTICE_DEATH_S)
            assert noticed, f"the SSE server died but the mount is still {await mount_status(gateway)} after {NOTICE_DEATH_S}s"

            with anyio.move_on_after(10) as slow:
                down = await c.call_tool(f"{TOOL_PREFIX}echo", {"message": "while down"})
            assert not slow.cancelled_caught, "a call to the mount whose server is gone did not fail within 10 s"
            assert down.is_error and MOUNT in text_of(down), f"expected a tool error naming the mount: {dump(down)}"

            second = start_everything_sse(port=first.port)

            async def ready() -> bool:
                return (await mount_status(gateway))["health"] == "ready"

            back = await wait_until(ready, COME_BACK_S)
            status = await mount_status(gateway)
            assert back, f"the server is back but the mount is {status} after {COME_BACK_S}s"
            assert status["restarts"] > restarts_before, status

            result = await c.call_tool(f"{TOOL_PREFIX}echo", {"message": "after"})
            assert not result.is_error and text_of(result) == "Echo: after", dump(result)
            assert second.connected(), f"no SSE session on the new server:\n{second.log()[-3000:]}"
            assert any(second.posts_from(s) > 0 for s in second.connected()), second.requests()

            if isolation == "shared":
                toggled = await c.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
                state, session = tool_session(toggled)
                assert state == "Started" and session in second.connected(), dump(toggled)
                try:
                    renewed = await wait_until(lambda: u1 in peer.updated_uris(), 2 * TICK_S + 3)
                    assert renewed, (
                        f"the subscription to {u1} was not renewed on the new SSE session: no update; "
                        f"requests to the new server: {second.requests()}"
                    )
                finally:
                    await c.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
