"""URL elicitation, its completion, and an upstream's cancel, through the gateway.

The upstream is fixtures/elicit_server.py, a server on the Python `mcp` 2.3
SDK, mounted as `elicit` over stdio and over Streamable HTTP (stateful, so it
sends what belongs to no request on its session's GET stream), each as a
`shared` and as a `per_session` mount: every test runs for the four
combinations. Its tools: `open_url` (URL-mode `elicitation/create` related to
the call, then, once accepted, `notifications/elicitation/complete` *not*
related to it), `complete` (only that unrelated notification, for any id),
`needs_browser` (fails with -32042 listing one URL elicitation) and
`ask_then_give_up` (a sampling request it abandons after a timeout, which
makes the SDK send `notifications/cancelled` for it).

The clients are the official Python `mcp` 2.3 `Client`, declaring sampling
and elicitation (form and URL). `notifications/cancelled` never reaches the
SDK's `message_handler` (its dispatcher applies it and swallows it), and a
cancel for an id not in flight vanishes silently, so each client's
dispatcher is tapped: every notification it receives is recorded raw, as
the gateway wrote it, before the SDK looks at it.

What is asserted (ARCHITECTURE.md "Routing what upstreams send", src/upstream/
handler.rs): a `notifications/elicitation/complete` is routed by its
elicitation id alone, to the session the elicitation was relayed to (as an
`elicitation/create`, or listed in a -32042 error's data) and to nobody
else; an id no session was given reaches nobody. An upstream's cancel of
its request to a client reaches that client under the id the client saw.
"Nothing arrived" is only ever asserted after a positive control has
arrived that was sent later to the same downstream session and, wherever
one upstream session could have sent both, by that same upstream session.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import LOOPBACK_V4_HEX, Gateway, free_port, tcp_listeners, toml_str
from test_relay import Target, connect, dump, text_of, wait_until

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "elicit_server.py"
MOUNT = "elicit"
TEST_TIMEOUT_S = 60.0  # one whole test body
ARRIVAL_S = 5.0  # how long a notification may take to arrive
START_TIMEOUT_S = 20.0  # the HTTP fixture, until it listens
STOP_TIMEOUT_S = 10.0
SAMPLING_HOLD_S = 10.0  # how long a client sits on a sampling request before answering
GIVE_UP_S = 0.5  # how long the upstream waits for that answer
URL_ELICITATION_REQUIRED = -32042
COMPLETE = "notifications/elicitation/complete"
CANCELLED = "notifications/cancelled"

COMBOS = [("stdio", "shared"), ("stdio", "per_session"), ("http", "shared"), ("http", "per_session")]


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def start_elicit_http(tmp_path: Path) -> Iterator:
    """Factory: start_elicit_http() -> the MCP URL of a listening fixture
    (`elicit_server.py http PORT`). Stops every one it started, by pid."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start() -> str:
        port = free_port()
        log = tmp_path / f"elicit-http-{len(started)}.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, str(FIXTURE), "http", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=str(tmp_path),
            )
        started.append((proc, log))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (listeners := tcp_listeners(port)):
            if proc.poll() is not None:
                pytest.fail(f"elicit fixture exited with {proc.returncode}: {log.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"elicit fixture not listening on 127.0.0.1:{port} within {START_TIMEOUT_S}s")
            time.sleep(0.1)
        assert listeners == [LOOPBACK_V4_HEX], f"elicit fixture listens beyond 127.0.0.1: {listeners}"
        return f"http://127.0.0.1:{port}/mcp"

    yield start

    problems: list[str] = []
    for proc, log in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                problems.append(f"elicit fixture pid {proc.pid} ignored SIGTERM; sent SIGKILL")
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        print(f"---- elicit fixture (HTTP) pid {proc.pid} exit {proc.returncode}, output:\n{log.read_text(errors='replace')}")
    if problems:
        pytest.fail("teardown: " + "; ".join(problems))


def mount_config(transport: str, isolation: str, url: str | None) -> str:
    head = f'[server]\nlisten = "127.0.0.1:0"\n\n[mounts.{MOUNT}]\n'
    if transport == "stdio":
        upstream = f"command = {toml_str(sys.executable)}\nargs = [{toml_str(str(FIXTURE))}, \"stdio\"]\n"
    else:
        assert url is not None
        upstream = f"url = {toml_str(url)}\n"
    return head + upstream + f"isolation = {toml_str(isolation)}\n"


# `start_elicit_http` before `start_gateway`: teardown runs in reverse, so the
# gateway stops before its HTTP upstream does.
@pytest.fixture(params=COMBOS, ids=[f"{t}-{i}" for t, i in COMBOS])
def target(request, start_elicit_http, start_gateway, monkeypatch) -> Target:
    # The gateway's debug lines ("elicitation/complete for an unknown
    # elicitation", ...) are the evidence when a test here fails.
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    transport, isolation = request.param
    url = start_elicit_http() if transport == "http" else None
    # The fixture's HTTP process is stopped by its own factory, not through the target.
    return Target(start_gateway(mount_config(transport, isolation, url)), transport, isolation, None)


# -------------------------------------------------------------------- client


class Watcher:
    """One downstream client's callbacks, and every notification it received, raw.

    Elicitations are accepted at once. A sampling request is held for up to
    `SAMPLING_HOLD_S` (the upstream is expected to give up first); its id, as
    this client received it, is recorded, and so is its being interrupted
    (the SDK's dispatcher cancels the callback when a `notifications/cancelled`
    naming that id arrives)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.elicitations: list[Any] = []
        self.sampling_ids: list[types.RequestId] = []
        self.interrupted: list[types.RequestId] = []
        self.raw: list[tuple[str, dict[str, Any]]] = []
        self.stream_errors: list[Exception] = []

    async def _elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.elicitations.append(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="decline")

    async def _sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling_ids.append(context.request_id)
        try:
            await anyio.sleep(SAMPLING_HOLD_S)
        except anyio.get_cancelled_exc_class():
            self.interrupted.append(context.request_id)
            raise
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="too late"), model="junction-interop"
        )

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.stream_errors.append(message)

    def callbacks(self) -> dict[str, Any]:
        return dict(sampling_callback=self._sampling, elicitation_callback=self._elicitation, message_handler=self._message)

    def tap(self, client: Client) -> None:
        """Record every notification the client's dispatcher receives, before the SDK handles it."""
        dispatcher = client.session._dispatcher  # noqa: SLF001 - no public hook sees notifications/cancelled
        original = dispatcher._dispatch_notification  # noqa: SLF001

        def spy(msg: Any, *args: Any, **kwargs: Any) -> Any:
            self.raw.append((msg.method, dict(msg.params or {})))
            return original(msg, *args, **kwargs)

        dispatcher._dispatch_notification = spy  # noqa: SLF001

    def completes(self) -> list[Any]:
        """The elicitation ids of every elicitation/complete received, in order."""
        return [params.get("elicitationId") for method, params in self.raw if method == COMPLETE]

    def cancels(self) -> list[dict[str, Any]]:
        return [params for method, params in self.raw if method == CANCELLED]

    def seen(self) -> str:
        return f"{self.label} received {[m for m, _ in self.raw]}; stream errors {self.stream_errors}"


@asynccontextmanager
async def watched(url: str, watcher: Watcher) -> AsyncIterator[Client]:
    async with connect(url, watcher) as client:  # type: ignore[arg-type] - duck-typed Peer
        watcher.tap(client)
        yield client


def fresh_id(what: str) -> str:
    return f"junction-{what}-{uuid.uuid4().hex[:12]}"


def url_for(elicitation_id: str) -> str:
    # Never fetched: the client only accepts.
    return f"https://example.com/junction/{elicitation_id}?mode=url&n=1"


async def open_url(c: Client, watcher: Watcher, elicitation_id: str) -> None:
    """`open_url`, and waits until this client has the completion for it."""
    result = await c.call_tool(f"{MOUNT}__open_url", {"elicitation_id": elicitation_id, "url": url_for(elicitation_id)})
    assert not result.is_error and text_of(result) == f"accept {elicitation_id}", dump(result)
    arrived = await wait_until(lambda: elicitation_id in watcher.completes(), ARRIVAL_S)
    assert arrived, f"no elicitation/complete for {elicitation_id} at {watcher.label}; {watcher.seen()}"


async def complete(c: Client, elicitation_id: str) -> None:
    result = await c.call_tool(f"{MOUNT}__complete", {"elicitation_id": elicitation_id})
    assert not result.is_error and text_of(result) == "sent", dump(result)


def debug_lines(gateway: Gateway, needle: str) -> list[str]:
    return [line.strip() for line in gateway.log().splitlines() if needle in line][-20:]


# ---------------------------------------------------------------- the tests


async def test_url_elicitation_and_its_completion_reach_the_caller_only(target: Target) -> None:
    """A calls `open_url(X)`: A's elicitation callback gets the URL-mode
    request with X and the url exactly as the upstream sent them, accepts,
    and the upstream's later, unrelated `elicitation/complete` for X reaches
    A (the gateway routes it by the id it saw in the request it relayed).
    B, connected to the same mount throughout, gets no completion but its
    own: its own `open_url`, after A's, is the positive control (on a shared
    mount the same upstream session and stream as A's)."""
    a, b = Watcher("A"), Watcher("B")
    x, xb = fresh_id("a"), fresh_id("b")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with watched(target.url, a) as ca, watched(target.url, b) as cb:
            await open_url(ca, a, x)
            urls = [e for e in a.elicitations if isinstance(e, types.ElicitRequestURLParams)]
            assert len(urls) == 1 and len(a.elicitations) == 1, f"A's elicitations: {a.elicitations}"
            assert (urls[0].elicitation_id, urls[0].url) == (x, url_for(x)), dump(urls[0])
            assert urls[0].message == f"Open {url_for(x)} to continue", dump(urls[0])

            await open_url(cb, b, xb)  # positive control for B
            assert a.completes() == [x], f"A: expected exactly its own completion; {a.seen()}"
            assert b.completes() == [xb], f"B got a completion for A's elicitation {x}; {b.seen()}"
            assert [e.elicitation_id for e in b.elicitations] == [xb], f"B's elicitations: {b.elicitations}"


async def test_completion_for_an_unknown_elicitation_reaches_nobody(target: Target) -> None:
    """A and B each call `complete(Z)` for an id no session was ever given:
    the upstream's `elicitation/complete` for Z goes to nobody (never
    broadcast, never to the only caller in flight). Positive controls: A's
    and B's own `open_url`, after, whose completions travel the same way."""
    a, b = Watcher("A"), Watcher("B")
    z, za, zb = fresh_id("nobody"), fresh_id("a"), fresh_id("b")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with watched(target.url, a) as ca, watched(target.url, b) as cb:
            await complete(ca, z)
            await complete(cb, z)
            await open_url(ca, a, za)
            await open_url(cb, b, zb)
            gateway = debug_lines(target.gateway, "elicitation/complete")
            assert a.completes() == [za], f"A got a completion for the unknown id {z}; {a.seen()}; gateway: {gateway}"
            assert b.completes() == [zb], f"B got a completion for the unknown id {z}; {b.seen()}; gateway: {gateway}"


async def test_required_elicitation_error_and_its_completion(target: Target) -> None:
    """A calls `needs_browser(Y, url)`: A's call fails with the upstream's
    -32042, code, message and data unchanged (data lists the one URL
    elicitation, with Y and the url). Then B calls `complete(Y)`.

    B never gets the completion for Y (positive control: B's own `open_url`
    after it). Nor does A, from B's call, on a per_session mount: there B's
    call reaches B's own upstream session, which never told anyone about Y
    (positive control: A's own `open_url`, after).

    The completion reaches the session the -32042 was for. On a shared mount
    the one upstream session sent the -32042 to A, so B's `complete(Y)`
    completes A's elicitation: A gets it. On a per_session mount A's own
    upstream session sends it when A calls `complete(Y)`: A gets it then.
    This needs the gateway to remember the ids listed in a -32042 error's
    data as the failing caller's, as it does for an `elicitation/create`."""
    a, b = Watcher("A"), Watcher("B")
    y, ya, yb = fresh_id("required"), fresh_id("a"), fresh_id("b")
    url = url_for(y)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with watched(target.url, a) as ca, watched(target.url, b) as cb:
            with pytest.raises(MCPError) as failed:
                await ca.call_tool(f"{MOUNT}__needs_browser", {"elicitation_id": y, "url": url})
            error = failed.value.error
            assert error.code == URL_ELICITATION_REQUIRED, dump(error)
            assert error.message == "URL elicitation required", dump(error)
            assert error.data == {
                "elicitations": [{"mode": "url", "message": f"Open {url} first", "url": url, "elicitationId": y}]
            }, dump(error)
            assert not a.elicitations, f"an error, not a request: A's elicitation callback ran: {a.elicitations}"

            await complete(cb, y)
            await open_url(cb, b, yb)  # positive control for B
            assert b.completes() == [yb], f"B got the completion of A's required elicitation {y}; {b.seen()}"
            await open_url(ca, a, ya)  # positive control for A
            if target.shared:
                # Sent before both controls: it has had the time they took.
                arrived = await wait_until(lambda: y in a.completes(), ARRIVAL_S)
            else:
                assert y not in a.completes(), f"B's upstream session completed {y} at A, which it never told; {a.seen()}"
                await complete(ca, y)
                arrived = await wait_until(lambda: y in a.completes(), ARRIVAL_S)
            assert arrived, (
                f"the completion of the elicitation listed in the -32042 that A got never reached A; {a.seen()}; "
                f"gateway: {debug_lines(target.gateway, 'elicitation/complete')}"
            )
            assert sorted(a.completes()) == sorted([y, ya]), f"A: {a.seen()}"


async def test_upstream_cancel_reaches_the_client_under_its_id(target: Target) -> None:
    """A calls `ask_then_give_up`: A's sampling callback gets the upstream's
    request and sits on it; the upstream gives up after 0.5 s and sends
    `notifications/cancelled` for its request. A must receive a cancel naming
    the id A's request arrived under (the gateway's downstream id, never the
    upstream's own: the fixture pings first, so its id is never the small
    one a fresh session's first request gets), which interrupts A's callback;
    the tool answers that it timed out. B gets no cancel: positive control,
    B then runs the same and gets exactly one cancel, for its own request."""
    a, b = Watcher("A"), Watcher("B")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with watched(target.url, a) as ca, watched(target.url, b) as cb:
            for c, w in ((ca, a), (cb, b)):
                result = await c.call_tool(f"{MOUNT}__ask_then_give_up", {"timeout_s": GIVE_UP_S})
                assert not result.is_error and text_of(result) == f"timed out after {GIVE_UP_S}s", dump(result)
                assert len(w.sampling_ids) == 1, f"{w.label}'s sampling callback ran for {w.sampling_ids}"
                arrived = await wait_until(lambda w=w: bool(w.cancels()) and bool(w.interrupted), ARRIVAL_S)
                assert arrived, f"{w.label}: cancels {w.cancels()}, callback interrupted for {w.interrupted}; {w.seen()}"
                cancel = w.cancels()[0]
                assert cancel.get("requestId") == w.sampling_ids[0] and type(cancel["requestId"]) is type(w.sampling_ids[0]), (
                    f"{w.label}'s sampling request arrived as id {w.sampling_ids[0]!r}, the cancel names {cancel!r}"
                )
                assert w.interrupted == w.sampling_ids, f"{w.label}: interrupted {w.interrupted}"
            assert len(a.cancels()) == 1, f"A got B's cancel too: {a.cancels()}"
            assert len(b.cancels()) == 1, f"B got A's cancel: {b.cancels()}"


# ------------------------------------------------- a session asleep meanwhile

HIBERNATE_AFTER = "300ms"  # short, so A sleeps within the test
SLEEP_WAIT_S = 10.0  # how long A may take to fall asleep
PROTOCOL = "2025-11-25"
SSE_JSON = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def asleep_count(http: httpx.AsyncClient, gateway: Gateway) -> int:
    """`junction_downstream_sessions_asleep` from `/metrics`."""
    metrics = (await http.get(f"{gateway.base_url}/metrics")).text
    for line in metrics.splitlines():
        if line.startswith("junction_downstream_sessions_asleep "):
            return int(float(line.split()[1]))
    return 0


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a POST's answer, JSON or SSE."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return [response.json()]


async def test_completion_reaches_a_session_that_slept_meanwhile(start_gateway) -> None:
    """A (a raw client without a GET stream, so it may sleep) calls
    `needs_browser(Y)` on a shared mount and gets the -32042; while it is
    "in the browser" its session falls asleep. B then calls `complete(Y)`:
    the upstream's completion is A's. It reaches A when A comes back (its
    GET wakes it), as it would have on A's next GET had A stayed awake,
    although the peer of A's request that got the -32042 died with A's
    sleep. Positive control that the completion was handled while A slept:
    B's own `open_url` after it, on the same upstream session and stream."""
    config = mount_config("stdio", "shared", None).replace(
        "[server]\n", f'[server]\nsession_hibernate_after = "{HIBERNATE_AFTER}"\n', 1
    )
    gateway = start_gateway(config)
    url = gateway.mcp_url
    b = Watcher("B")
    y, yb = fresh_id("asleep"), fresh_id("b")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(trust_env=False, timeout=ARRIVAL_S * 2) as http:
            initialize = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {"elicitation": {"form": {}, "url": {}}},
                    "clientInfo": {"name": "sleeper", "version": "1"},
                },
            }
            opened = await http.post(url, json=initialize, headers=SSE_JSON)
            assert opened.status_code == 200, opened.text
            session = opened.headers["mcp-session-id"]
            headers = {**SSE_JSON, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(url, json=initialized, headers=headers)).status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": f"{MOUNT}__needs_browser", "arguments": {"elicitation_id": y, "url": url_for(y)}},
            }
            failed = await http.post(url, json=call, headers=headers)
            answers = [m for m in messages_of(failed) if m.get("id") == 2]
            assert answers and answers[0].get("error", {}).get("code") == URL_ELICITATION_REQUIRED, failed.text

            async def one_asleep() -> bool:
                return await asleep_count(http, gateway) == 1

            slept = await wait_until(one_asleep, SLEEP_WAIT_S)
            assert slept, f"A never fell asleep within {SLEEP_WAIT_S}s"

            async with watched(url, b) as cb:
                await complete(cb, y)
                await open_url(cb, b, yb)  # positive control: handled after Y's
            assert b.completes() == [yb], f"B got A's completion {y}; {b.seen()}"
            assert await asleep_count(http, gateway) == 1, "A woke before its GET: the test no longer tests sleep"

            seen = ""
            get_headers = {"accept": "text/event-stream", "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
            try:
                with anyio.fail_after(ARRIVAL_S):
                    async with http.stream("GET", url, headers=get_headers) as stream:
                        assert stream.status_code == 200, await stream.aread()
                        async for chunk in stream.aiter_text():
                            seen += chunk
                            if y in seen:
                                break
            except TimeoutError:
                pass
            gateway_lines = debug_lines(gateway, "elicitation/complete") + debug_lines(gateway, "notification")
            assert COMPLETE in seen and y in seen, f"A's GET after waking: {seen!r}; gateway: {gateway_lines}"
