"""Tasks through hand-written upstreams (fixtures/tasks_server.py).

An upstream that answers HTTP with `application/json`: rmcp's HTTP client
parses such an answer itself, and its model (the later SEP-2663 tasks)
drops a tool's `execution` and a 2025-11-25 `tasks/get` answer's `ttl` and
`pollInterval`. The gateway posts the requests whose answers it needs
verbatim itself (src/upstream/raw_post.rs); the fields must arrive intact.

A stdio upstream that reports a task's progress after its
`CreateTaskResult`: the progress token of a task-augmented request stays
valid until the task ends, so that progress must reach the client under
its own token.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from conftest import python_http_fixture, toml_str
from test_relay import (
    Peer,
    connect,
    dump,
    list_all_tools,
    list_tasks,
    raw_request,
    task_result,
    text_of,
    wait_until,
)

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "tasks_server.py"
TTL_MS, POLL_MS = 45_000, 150  # as the fixture sets them


@pytest.fixture
def json_upstream(tmp_path: Path) -> Iterator[str]:
    with python_http_fixture(FIXTURE, ["http", "{port}"], tmp_path / "json-tasks.log") as url:
        yield url


@pytest.mark.parametrize("isolation", ["shared", "per_session"])
async def test_json_answers_keep_task_fields(json_upstream: str, start_gateway, isolation: str) -> None:
    gateway = start_gateway(
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.calc]\nurl = {toml_str(json_upstream)}\nisolation = {toml_str(isolation)}\n"
    )
    with anyio.fail_after(60):
        async with connect(gateway.mcp_url, Peer("A")) as c:
            tools = {t.name: t for t in await list_all_tools(c)}
            add = tools["calc__add"]
            assert add.execution is not None and add.execution.task_support == "optional", dump(add)

            plain = await c.call_tool("calc__add", {"a": 1, "b": 2})
            assert text_of(plain) == "3", dump(plain)

            raw = await raw_request(c, "tools/call", {"name": "calc__add", "arguments": {"a": 2, "b": 5}, "task": {"ttl": 1000}})
            task = types.CreateTaskResult.model_validate(raw).task
            assert task.task_id.startswith("calc/"), raw
            assert (task.ttl, task.poll_interval) == (TTL_MS, POLL_MS), raw

            got = await c.session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.task_id)), types.GetTaskResult
            )
            assert (got.task_id, got.ttl, got.poll_interval) == (task.task_id, TTL_MS, POLL_MS), dump(got)
            assert [t.task_id for t in await list_tasks(c)] == [task.task_id]

            result = await task_result(c, task.task_id)
            assert text_of(result) == "7", dump(result)
            related = (result.meta or {}).get("io.modelcontextprotocol/related-task", {})
            assert related.get("taskId") == task.task_id, dump(result)


@pytest.mark.parametrize("isolation", ["shared", "per_session"])
async def test_task_progress_after_its_creation_reaches_the_client(start_gateway, isolation: str) -> None:
    gateway = start_gateway(
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.calc]\ncommand = {toml_str(sys.executable)}\n"
        f"args = [{toml_str(str(FIXTURE))}, \"stdio\"]\nisolation = {toml_str(isolation)}\n"
    )
    peer = Peer("A")
    with anyio.fail_after(60):
        async with connect(gateway.mcp_url, peer) as c:
            raw = await raw_request(
                c,
                "tools/call",
                {
                    "name": "calc__add",
                    "arguments": {"a": 3, "b": 4},
                    "task": {"ttl": 1000},
                    "_meta": {"progressToken": "token-of-A"},
                },
            )
            task = types.CreateTaskResult.model_validate(raw).task
            result = await task_result(c, task.task_id)
            assert text_of(result) == "7", dump(result)

            def mine() -> list[float]:
                return [p.progress for p in peer.progress() if p.progress_token == "token-of-A"]

            assert await wait_until(lambda: len(mine()) == 2, 5), f"progress seen: {[dump(p) for p in peer.progress()]}"
            assert mine() == [1, 2]


async def test_task_tools_a_session_upstream_reveals_keep_execution(start_gateway) -> None:
    """A per-session upstream that lists a task tool only after its
    `list_changed` (none of the gateway's catalogs had one before): the
    session's `tools/list` must still carry the tool's `execution`, or the
    client calls it without `task` and a task-required tool refuses."""
    gateway = start_gateway(
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.calc]\ncommand = {toml_str(sys.executable)}\n"
        f'args = [{toml_str(str(FIXTURE))}, "stdio-hidden"]\nisolation = "per_session"\n'
    )
    peer = Peer("A")
    with anyio.fail_after(60):
        async with connect(gateway.mcp_url, peer) as c:
            assert [t.name for t in await list_all_tools(c)] == ["calc__reveal"]
            revealed = await c.call_tool("calc__reveal", {})
            assert text_of(revealed) == "revealed", dump(revealed)
            assert await wait_until(lambda: len(peer.of(types.ToolListChangedNotification)) >= 1, 10), "no tools/list_changed"
            tools = {t.name: t for t in await list_all_tools(c)}
            add = tools["calc__add"]
            assert add.execution is not None and add.execution.task_support == "optional", dump(add)
