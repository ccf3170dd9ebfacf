"""The bridge against the TypeScript peers people run: a Tasks server on the official SDK v2
(`@modelcontextprotocol/server`) with `@modelcontextprotocol/ext-tasks`, and the MCP
Inspector CLI in front of ``bridge gateway``. Installed from ``tests/interop/ts``'s lockfile
(:mod:`tests.support.ts_interop`); skipped only where ``node`` is not installed.

The server logs every request it receives, checked against ext-tasks' own schemas, with the
headers it came with, when it came, and the ``pollIntervalMs`` each poll was told: the tests
read the wire from the server's side. Each ``@compat`` test is a row of
``docs/compatibility.md`` (:mod:`tests.support.compat`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bridge import (
    Bridge,
    BridgeSettings,
    InlineResult,
    McpServerConfig,
    RejectedCall,
    TaskPending,
    TaskSettled,
    WaitMode,
    events as ev,
)
from bridge._config import SchedulerConfig
from bridge._errors import InputAlreadyAnswered, InvalidTaskResponse
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, LostReason, TaskStatus
from bridge._mcp.wire.shapes import RELATED_TASK_IDS_META_KEY
from bridge._run import Run
from bridge.gateway._config import GatewayConfigError, parse_gateway_config
from bridge.gateway._identity import OPERATION_ID_META_KEY
from tests.support.bridging import FAST, wait_until
from tests.support.builders import new_run
from tests.support.compat import DOC, compat, last_outcome, rendered, rows, table_in_doc
from tests.support.processes import REPO_ROOT, ServerProcess
from tests.support.ts_interop import (
    TS_DIR,
    TsTasksServer,
    WireLog,
    ensure_installed,
    node_bin,
    node_missing,
)

pytestmark = pytest.mark.anyio

PRINCIPAL = "acme"
DEADLINE_S = 20
SERVER = "TypeScript SDK server + ext-tasks"
INSPECTOR = "MCP Inspector CLI (through `bridge gateway`)"
TS_CLIENT = "TypeScript SDK client (through `bridge gateway`)"
CAPS_META_KEY = "io.modelcontextprotocol/clientCapabilities"
# The server's clock stamps a request when it arrives; the bridge counts an interval from the
# reply it read: a poll may arrive this much "early" by the server's clock, never more.
SLACK_MS = 25
# The poll scheduler as shipped (it honours pollIntervalMs as asked), with quick retries.
DETACH = WaitMode.DETACH  # the handle comes back at once; the test waits on it
AS_SHIPPED = SchedulerConfig(backoff_base_ms=50, backoff_max_ms=300, unreachable_grace_ms=300)


@pytest.fixture(scope="module")
def ts_peers() -> None:
    missing = node_missing()
    if missing is not None:
        pytest.skip(missing)
    ensure_installed()  # a failed install fails the tests: node is there


@pytest.fixture(scope="module")
def ts_server(ts_peers: None) -> Iterator[TsTasksServer]:
    with TsTasksServer() as server:
        yield server


@asynccontextmanager
async def opened(
    db: Path,
    url: str,
    *,
    name: str = "ts",
    scheduler: SchedulerConfig = AS_SHIPPED,
    servers: list[McpServerConfig] | None = None,
) -> AsyncIterator[Bridge]:
    settings = BridgeSettings(
        ledger_url=str(db),
        principals=[PRINCIPAL],
        mcp_servers=servers or [McpServerConfig(name=name, url=url)],
        scheduler=scheduler,
    )
    async with Bridge.open(settings) as bridge:
        yield bridge


async def served(bridge: Bridge) -> Run:
    suffix = os.urandom(6).hex()
    return await bridge.register_served_run(
        PRINCIPAL, response_id=f"resp_{suffix}", session_id=f"hsess{suffix}", harness_id="chrn_ts"
    )


def assert_clean_wire(wire: WireLog) -> int:
    """Every shape the bridge sent passed ext-tasks' schema; every ``tasks/*`` request carried
    ``Mcp-Method`` and ``Mcp-Name`` naming its task. Returns how many ``tasks/*`` requests
    that was (counted server-side)."""
    assert wire.schema_problems() == []
    assert wire.header_problems() == []
    return len(wire.tasks_requests())


@pytest.fixture(autouse=True)
def wire_checked_after_each_test() -> Iterator[None]:
    """Whatever a test asserts, what the bridge sent during it to any TypeScript server must
    pass ext-tasks' schemas and carry ``Mcp-Name`` on every ``tasks/*`` request: a refused
    shape fails the test (the server only logs it)."""
    since_ms = int(time.time() * 1000)
    yield
    for server in TsTasksServer.started:
        wire = server.wire().after(since_ms)
        problems = wire.schema_problems() + wire.header_problems()
        assert problems == [], f"{server.url}: {problems}"


async def server_stats(run: Run) -> dict[str, Any]:
    step = await run.call_tool("ts", "stats", {})
    assert isinstance(step, InlineResult)
    stats: dict[str, Any] = step.result["structuredContent"]
    return stats


# -- the TypeScript SDK server ----------------------------------------------------------------
@compat(
    SERVER,
    "task handle created; every `tasks/get` waits the `pollIntervalMs` the last reply gave, "
    "which changes on the way (and `ttlMs` with it); completed result read",
)
async def test_task_is_polled_at_the_interval_the_server_asks(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    args = {"steps": 4, "step_ms": 300, "poll_ms": 200, "poll_ms_later": 400}
    args |= {"ttl_ms": 60_000, "ttl_ms_later": 90_000}
    async with opened(tmp_path / "ledger.db", ts_server.url) as bridge:
        run = await served(bridge)
        step = await run.call_tool("ts", "report", args, wait=WaitMode.WAIT, wait_deadline_s=20)
        assert isinstance(step, TaskSettled) and step.task.status is TaskStatus.COMPLETED
        assert step.text() == "report of 4 steps"
    task = step.task
    assert (task.poll_interval_ms, task.ttl_ms) == (400, 90_000)  # the values last given

    wire = ts_server.wire()
    (created,) = wire.of_kind("created", task.task_id)
    replies = wire.of_kind("reply", task.task_id)
    gets = wire.about(task.task_id, "tasks/get")
    assert len(gets) == len(replies) >= 3
    asked = [created["pollIntervalMs"]] + [r["pollIntervalMs"] for r in replies[:-1]]
    assert {200, 400} <= set(asked)
    times = [created["at_ms"]] + [g["at_ms"] for g in gets]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= ms - SLACK_MS for gap, ms in zip(gaps, asked, strict=True)), (gaps, asked)
    # Honoured, not just respected: about when asked (jitter adds up to 10%, a loaded machine
    # more), never at the bridge's own 1 s default for a server that names no interval.
    assert statistics.median(g / ms for g, ms in zip(gaps, asked, strict=True)) < 2.0
    assert assert_clean_wire(wire) >= len(gets)  # each of them carried Mcp-Name


@compat(
    SERVER,
    "`input_required` with two `inputRequests` keys: each answered once by a partial "
    "`tasks/update` (the task stays `input_required` between), counted server-side; completed",
)
async def test_each_input_request_is_answered_exactly_once(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    async with opened(tmp_path / "ledger.db", ts_server.url) as bridge:
        run = await served(bridge)
        step = await run.call_tool("ts", "approve", {"amount": 7, "questions": 2}, wait=DETACH)
        assert isinstance(step, TaskPending)
        task_id = step.task.task_id

        async def both_asked() -> Any:
            pending = await run.pending_inputs()
            return pending if len(pending) == 2 else None

        first, second = await wait_until(both_asked, timeout=DEADLINE_S)
        assert first.input_ref != second.input_ref and first.method == "elicitation/create"
        await first.accept({"approve": True})
        with pytest.raises(InputAlreadyAnswered):
            await first.accept({"approve": True})
        (update,) = ts_server.wire().about(task_id, "tasks/update")
        # A partial answer: the server keeps asking the other key, and the bridge waits.
        await wait_until(
            lambda: [
                r
                for r in ts_server.wire().of_kind("reply", task_id)
                if r["at_ms"] > update["at_ms"] and r["status"] == "input_required"
            ],
            timeout=DEADLINE_S,
        )
        assert [i.input_ref for i in await run.pending_inputs()] == [second.input_ref]
        await second.accept({"approve": True})
        (done,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
        assert done.status is TaskStatus.COMPLETED
        assert done.result["content"][0]["text"] == "approved 7"
        stats = await server_stats(run)
        events = [e.type for e in await collect_events(run)]
    assert stats["answers"][task_id] == 2 and stats["ignored_answers"][task_id] == 0
    updates = ts_server.wire().about(task_id, "tasks/update")
    keys = [key for u in updates for key in u["params"]["inputResponses"]]
    assert len(updates) == 2 and len(set(keys)) == 2  # one key per update, none twice
    assert {u["headers"]["mcp-name"] for u in updates} == {task_id}
    assert events.count("task.input_required") == 2 and events.count("task.input_answered") == 2
    assert_clean_wire(ts_server.wire())


async def collect_events(run: Run) -> list[ev.BridgeEvent]:
    """The run's events so far (its log is read, then the live part is left)."""
    seen: list[ev.BridgeEvent] = []
    with anyio.move_on_after(0.5):
        async for event in run.subscribe():
            seen.append(event)
    return seen


@compat(SERVER, "`tasks/cancel` acknowledged, then the `cancelled` status observed by polling")
async def test_cancel_is_sent_once_and_observed(ts_server: TsTasksServer, tmp_path: Path) -> None:
    async with opened(tmp_path / "ledger.db", ts_server.url) as bridge:
        run = await served(bridge)
        step = await run.call_tool("ts", "wait_for_cancel", {}, wait=DETACH)
        assert isinstance(step, TaskPending)
        assert await run.cancel_task(step.task.ref)
        (done,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
        assert done.status is TaskStatus.CANCELLED
        stats = await server_stats(run)
    assert stats["cancels"][done.task_id] == 1
    (cancel,) = ts_server.wire().about(done.task_id, "tasks/cancel")
    assert cancel["headers"]["mcp-name"] == done.task_id
    assert_clean_wire(ts_server.wire())


@compat(
    SERVER,
    "a `failed` task (JSON-RPC error kept), a completed task whose result has `isError`, "
    "an inline `isError` result: each reported as an error, none as success",
)
async def test_failed_and_is_error_results_stay_errors(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    async with opened(tmp_path / "ledger.db", ts_server.url) as bridge:
        run = await served(bridge)
        waited = {"wait": WaitMode.WAIT, "wait_deadline_s": DEADLINE_S}
        failed = await run.call_tool("ts", "fail", {"mode": "failed"}, **waited)  # type: ignore[arg-type]
        is_error = await run.call_tool("ts", "fail", {"mode": "is_error"}, **waited)  # type: ignore[arg-type]
        inline = await run.call_tool("ts", "fail_inline", {})
    assert isinstance(failed, TaskSettled) and failed.task.status is TaskStatus.FAILED
    assert failed.task.error == {"code": -32603, "message": "the report job crashed"}
    assert failed.to_call_tool_result().is_error
    assert isinstance(is_error, TaskSettled) and is_error.task.status is TaskStatus.COMPLETED
    assert is_error.to_call_tool_result().is_error and is_error.text() == "quota exceeded"
    assert isinstance(inline, InlineResult) and inline.is_error
    assert_clean_wire(ts_server.wire())


@compat(
    SERVER,
    "a task-only tool called without the Tasks declaration: the SDK's `-32021` "
    "(`requiredCapabilities`) becomes a rejected call, never a task or a result",
)
async def test_missing_capability_is_a_rejected_call(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    async with opened(tmp_path / "ledger.db", ts_server.url) as bridge:
        run = await served(bridge)
        refused = await bridge._requester.call_tool(
            PRINCIPAL, run.ref, "ts", "task_only", {}, declare_tasks=False
        )
        declared = await run.call_tool(
            "ts", "task_only", {}, wait=WaitMode.WAIT, wait_deadline_s=DEADLINE_S
        )
    assert isinstance(refused, RejectedCall) and refused.missing_tasks_capability
    assert refused.code == -32021
    assert isinstance(declared, TaskSettled) and declared.text() == "task only"


@compat(
    SERVER,
    "server restarted (its tasks were in memory): the next `tasks/get` gets `-32602` and the "
    "handle is reported lost (`task.lost`), never completed",
)
@pytest.mark.e2e
async def test_server_restart_loses_the_task(ts_peers: None, tmp_path: Path) -> None:
    with TsTasksServer() as server:
        async with opened(tmp_path / "ledger.db", server.url, scheduler=FAST) as bridge:
            run = await served(bridge)
            step = await run.call_tool("ts", "wait_for_cancel", {"poll_ms": 100}, wait=DETACH)
            assert isinstance(step, TaskPending)
            task_id = step.task.task_id
            await wait_until(lambda: server.wire().about(task_id, "tasks/get"), timeout=DEADLINE_S)
            await anyio.to_thread.run_sync(server.restart)
            (lost,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
            events = await collect_events(run)
    assert lost.lost_reason is LostReason.NOT_FOUND and lost.status is TaskStatus.WORKING
    (event,) = [e for e in events if isinstance(e, ev.TaskLost)]
    assert event.reason is LostReason.NOT_FOUND and task_id not in event.detail
    assert not [e for e in events if isinstance(e, ev.TaskTerminal)]
    assert_clean_wire(server.wire())


@compat(
    SERVER,
    "the calling process SIGKILLed once the handle is recorded: a new bridge process resumes "
    "the handle, answers its input once, and reads the result",
)
@pytest.mark.e2e
async def test_a_new_bridge_resumes_the_handle_of_a_killed_one(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    run_ref = new_run(ledger.for_principal(PRINCIPAL)).ref
    ledger.close()
    died = subprocess.run(
        [
            *(sys.executable, "-m", "tests.support.crash_driver", "--db", str(db)),
            *("--server-url", ts_server.url, "--run-ref", run_ref, "--tool", "approve"),
            *("--args", json.dumps({"amount": 9}), "--operation-id", "ts-crash-1"),
            *("--crash", "after_handle"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]

    async with opened(db, ts_server.url, name="tasks") as bridge:  # the driver's server name
        assert bridge.last_recovery is not None and bridge.last_recovery.tasks_watched == 1
        run = bridge.run(PRINCIPAL, run_ref)
        (task,) = await run.tasks()

        async def asked() -> Any:
            return await run.pending_inputs()

        (request,) = await wait_until(asked, timeout=DEADLINE_S)
        await request.accept({"approve": True})
        (done,) = await run.wait_for([task.ref], timeout=DEADLINE_S)
    assert done.status is TaskStatus.COMPLETED
    assert done.result["content"][0]["text"] == "approved 9"
    (update,) = ts_server.wire().about(done.task_id, "tasks/update")
    assert len(update["params"]["inputResponses"]) == 1
    assert_clean_wire(ts_server.wire())


@compat(
    SERVER,
    "push: with `subscriptions/listen` naming `taskIds` served, the result arrives as a "
    "`notifications/tasks` long before the next poll; the SDK's own listen (no task ids "
    "honoured) leaves the bridge polling",
)
async def test_pushed_states_settle_the_task_before_the_next_poll(
    ts_peers: None, ts_server: TsTasksServer, tmp_path: Path
) -> None:
    # Long enough for the listen to be open before the end; the first poll would be at 8 s.
    slow_polls = {"steps": 3, "step_ms": 400, "poll_ms": 8_000}
    with TsTasksServer(push=True) as pushing:
        async with opened(tmp_path / "push.db", pushing.url) as bridge:
            run = await served(bridge)
            started = anyio.current_time()
            step = await run.call_tool("ts", "report", slow_polls, wait=DETACH)
            assert isinstance(step, TaskPending)
            (done,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
            took = anyio.current_time() - started
        wire = pushing.wire()
    assert done.status is TaskStatus.COMPLETED and took < 5.0  # before the 8 s poll was due
    assert [p["status"] for p in wire.of_kind("push", done.task_id)][-1] == "completed"
    (listen,) = [r for r in wire.requests("subscriptions/listen")]
    assert [s["name"] for s in listen["schemas"]] == ["TaskSubscriptionNotificationsV2"]
    assert_clean_wire(wire)

    # The SDK's listen router acknowledges no task ids: the bridge polls as before.
    async with opened(tmp_path / "poll.db", ts_server.url) as bridge:
        run = await served(bridge)
        step = await run.call_tool(
            "ts", "report", {"steps": 2, "step_ms": 200, "poll_ms": 150}, wait=DETACH
        )
        assert isinstance(step, TaskPending)
        task_id = step.task.task_id
        await wait_until(
            lambda: [
                r
                for r in ts_server.wire().requests("subscriptions/listen")
                if task_id in r["params"]["notifications"].get("taskIds", [])
            ],
            timeout=DEADLINE_S,
        )
        (done,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
    assert done.status is TaskStatus.COMPLETED
    assert ts_server.wire().about(task_id, "tasks/get") and not ts_server.wire().of_kind(
        "push", task_id
    )


@compat(
    SERVER,
    "the draft `io.modelcontextprotocol/relatedTaskIds` `_meta` (opt-in per server, off by "
    "default): a call names its run's earlier tasks on that same server, never another's",
)
async def test_related_task_ids_name_earlier_tasks_of_the_run_on_that_server(
    ts_server: TsTasksServer, tmp_path: Path
) -> None:
    def meta_of(wire: WireLog, text: str) -> dict[str, Any]:
        (call,) = [
            r for r in wire.requests("tools/call") if r["params"]["arguments"] == {"text": text}
        ]
        meta: dict[str, Any] = call["params"]["_meta"]
        return meta

    quick = {"steps": 1, "step_ms": 50}
    async with opened(tmp_path / "off.db", ts_server.url) as bridge:  # as shipped: off
        run = await served(bridge)
        await run.call_tool("ts", "report", quick, wait=DETACH)
        await run.call_tool("ts", "echo", {"text": "related-off"})
    assert RELATED_TASK_IDS_META_KEY not in meta_of(ts_server.wire(), "related-off")

    with TsTasksServer() as other:
        servers = [
            McpServerConfig(name="ts", url=ts_server.url, related_task_ids=True),
            McpServerConfig(name="other", url=other.url, related_task_ids=True),
        ]
        async with opened(tmp_path / "on.db", "", servers=servers) as bridge:
            run = await served(bridge)
            first = await run.call_tool("ts", "report", quick, wait=DETACH)
            await run.call_tool("ts", "echo", {"text": "related-on"})
            await run.call_tool("other", "echo", {"text": "related-elsewhere"})
        assert RELATED_TASK_IDS_META_KEY not in meta_of(other.wire(), "related-elsewhere")
    assert isinstance(first, TaskPending)
    assert meta_of(ts_server.wire(), "related-on")[RELATED_TASK_IDS_META_KEY] == [
        first.task.task_id
    ]


# -- the ADVERSARIAL mode of the TypeScript server -----------------------------------------------
@pytest.fixture(scope="module")
def adversarial_ts_server(ts_peers: None) -> Iterator[TsTasksServer]:
    """The TypeScript server with its ``adversarial_*`` tools (wire no honest server sends)."""
    with TsTasksServer(adversarial=True) as server:
        yield server


async def anomalies(run: Run) -> list[ev.Anomaly]:
    return [e for e in await collect_events(run) if isinstance(e, ev.Anomaly)]


async def answered_then_asked_again(
    server: TsTasksServer, tmp_path: Path, tool: str
) -> tuple[Run, Any, list[ev.BridgeEvent], dict[str, Any]]:
    """Call ``tool`` (one key, asked again once answered), answer it once, and wait for the
    task's end: the run, its settled task, its events and the updates the server received."""
    async with opened(tmp_path / "ledger.db", server.url) as bridge:
        run = await served(bridge)
        step = await run.call_tool("ts", tool, {"hold_ms": 2500}, wait=DETACH)
        assert isinstance(step, TaskPending)
        task_id = step.task.task_id
        (request,) = await wait_until(run.pending_inputs, timeout=DEADLINE_S)
        await request.accept({"approve": True})
        # The server shows the answered key again on the polls that follow.
        await wait_until(
            lambda: [
                r
                for r in server.wire().of_kind("reply", task_id)
                if r["status"] == "input_required"
                and r["at_ms"] > server.wire().about(task_id, "tasks/update")[0]["at_ms"]
            ],
            timeout=DEADLINE_S,
        )
        assert await run.pending_inputs() == []  # nothing asked of the host again
        (done,) = await run.wait_for([step.task.ref], timeout=DEADLINE_S)
        events = await collect_events(run)
    updates = server.wire().about(task_id, "tasks/update")
    answers = [key for u in updates for key in u["params"]["inputResponses"]]
    return run, done, events, {"answers": answers, "task_id": task_id}


@compat(
    SERVER,
    "ADVERSARIAL mode: an answered `inputRequests` key asked again with a different question: "
    "one `anomaly` (`reused_input_key`), the new question never surfaced, the key answered "
    "once (one `tasks/update`); the task's result still read",
)
async def test_a_key_reused_for_another_question_is_an_anomaly_never_a_second_answer(
    adversarial_ts_server: TsTasksServer, tmp_path: Path
) -> None:
    _, done, events, sent = await answered_then_asked_again(
        adversarial_ts_server, tmp_path, "adversarial_reused_key"
    )
    assert sent["answers"] == ["approve"]  # one tasks/update, one key, never again
    kinds = [e.kind for e in events if isinstance(e, ev.Anomaly)]
    assert kinds == ["reused_input_key"]
    (anomaly,) = [e for e in events if isinstance(e, ev.Anomaly)]
    assert anomaly.task_ref == done.ref and sent["task_id"] not in anomaly.detail
    assert [e.type for e in events].count("task.input_required") == 1
    assert done.status is TaskStatus.COMPLETED
    assert_clean_wire(adversarial_ts_server.wire())


@compat(
    SERVER,
    "ADVERSARIAL mode: an answered `inputRequests` key shown again with the same question "
    "after its `tasks/update`: not surfaced again, not answered again",
)
async def test_an_answered_key_shown_again_is_not_answered_twice(
    adversarial_ts_server: TsTasksServer, tmp_path: Path
) -> None:
    _, done, events, sent = await answered_then_asked_again(
        adversarial_ts_server, tmp_path, "adversarial_repeat_answered"
    )
    assert sent["answers"] == ["approve"]
    assert [e.type for e in events].count("task.input_required") == 1
    assert [e.type for e in events].count("task.input_answered") == 1
    assert done.status is TaskStatus.COMPLETED
    assert_clean_wire(adversarial_ts_server.wire())


@compat(
    SERVER,
    "ADVERSARIAL mode: a `resultType` no spec defines, on `tools/call` and on `tasks/get`: a "
    "typed error and an `anomaly` (`malformed_reply`), the handle kept open; never a result",
)
async def test_an_unknown_result_type_is_a_typed_anomaly_never_a_result(
    adversarial_ts_server: TsTasksServer, tmp_path: Path
) -> None:
    async with opened(tmp_path / "ledger.db", adversarial_ts_server.url) as bridge:
        run = await served(bridge)
        with anyio.fail_after(DEADLINE_S), pytest.raises(InvalidTaskResponse):  # not a hang
            await run.call_tool("ts", "adversarial_unknown_result_type", {}, operation_id="rt-1")
        call = await run.operation("rt-1")
        step = await run.call_tool("ts", "adversarial_get_result_type", {}, wait=DETACH)
        assert isinstance(step, TaskPending)
        task_id = step.task.task_id
        await wait_until(
            lambda: len(adversarial_ts_server.wire().of_kind("adversarial_reply", task_id)) >= 3,
            timeout=DEADLINE_S,
        )
        (task,) = [t for t in await run.tasks() if t.ref == step.task.ref]
        found = await anomalies(run)
    assert call is not None and call.task is None
    assert call.state is CallState.UNKNOWN  # the server may have acted; no result
    assert task.is_open and task.status is TaskStatus.WORKING and task.result is None
    kinds = [a.kind for a in found]
    assert kinds.count("malformed_reply") == 2, [
        (a.kind, a.detail) for a in found
    ]  # the call's, then the task's (once)
    assert all(task_id not in a.detail for a in found)
    assert_clean_wire(adversarial_ts_server.wire())


def test_the_wire_checks_catch_what_they_check(ts_peers: None) -> None:
    """The server-side checks can fail: requests sent by hand that ext-tasks' schemas refuse
    and a ``tasks/get`` without ``Mcp-Name`` are each reported."""
    tasks = {"extensions": {"io.modelcontextprotocol/tasks": {"unexpected": True}}}
    bad = [
        ({"method": "tasks/get", "params": {"taskId": 5}}, {}),
        ({"method": "tasks/list", "params": {}}, {"Mcp-Name": "x"}),
        ({"method": "tasks/update", "params": {"taskId": "t", "inputResponses": []}}, {}),
        (
            {
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {}, "_meta": {CAPS_META_KEY: tasks}},
            },
            {},
        ),
    ]
    with TsTasksServer() as server:
        for n, (message, headers) in enumerate(bad):
            httpx.post(
                server.url,
                json={"jsonrpc": "2.0", "id": n, **message},
                headers={"Accept": "application/json, text/event-stream", **headers},
                timeout=DEADLINE_S,
            )
        wire = server.wire()
        TsTasksServer.started.remove(server)  # its wire is bad on purpose
    refused = [p.split(" ", 1)[0] for p in wire.schema_problems()]
    assert refused == ["tasks/get", "tasks/list", "tasks/update", "tools/call"]
    assert wire.header_problems() == [
        *("tasks/get: Mcp-Method None", "tasks/get: Mcp-Name does not name the task"),
        *("tasks/list: Mcp-Method None", "tasks/list: Mcp-Name does not name the task"),
        *("tasks/update: Mcp-Method None", "tasks/update: Mcp-Name does not name the task"),
    ]


# -- the MCP Inspector CLI through bridge gateway -----------------------------------------------
GATEWAY_TOKEN = "inspector-token"
SHORT = {"steps": 2, "step_ms": 100}
# A client that sends no progressToken (the Inspector CLI) hears nothing while a call waits:
# the gateway answers "still running" after this long (50 s by default, under the 60 s the
# CLI waits); the "long" task outlasts it.
SILENT_WAIT_S = 1.2
LONG = {"steps": 3, "step_ms": 600}


@pytest.fixture(scope="module")
def gateway(
    ts_server: TsTasksServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("gateway")
    config = folder / "gateway.json"
    digest = hashlib.sha256(GATEWAY_TOKEN.encode()).hexdigest()
    config.write_text(
        json.dumps(
            {
                "mcpServers": [{"name": "ts", "url": ts_server.url}],
                "principals": {PRINCIPAL: {"token_sha256": digest}},
                "silentWaitS": SILENT_WAIT_S,
            }
        )
    )
    args = ["--config", str(config), "--db", str(folder / "ledger.db")]
    with ServerProcess("bridge.gateway", args=args) as proc:
        yield proc


def inspector(
    url: str, era: str, tool: str, arguments: dict[str, Any], home: Path, **meta: str
) -> dict[str, Any]:
    """One ``mcp-inspector --cli`` ``tools/call``: its JSON output (``meta``: the call's
    ``_meta``)."""
    server = {"type": "streamable-http", "url": url}
    server["headers"] = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}  # type: ignore[assignment]
    (home / "inspector.json").write_text(json.dumps({"mcpServers": {"gateway": server}}))
    tool_meta = ["--tool-metadata", *(f"{k}={v}" for k, v in meta.items())] if meta else []
    done = subprocess.run(
        [
            *(str(node_bin("mcp-inspector")), "--cli", "--config", str(home / "inspector.json")),
            *("--server", "gateway", "--method", "tools/call", "--tool-name", tool),
            *("--tool-args-json", json.dumps(arguments), *tool_meta),
            *("--protocol-era", era, "--format", "json", "--quiet"),
        ],
        cwd=TS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        # Its own folder for the Inspector's catalog and secrets; no keychain on CI.
        env={**os.environ, "HOME": str(home), "MCP_INSPECTOR_SECRET_STORE": "memory"},
    )
    out = done.stdout.strip() or done.stderr.strip()
    parsed: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert "result" in parsed, parsed  # the CLI accepted the gateway's answer
    return parsed["result"]  # type: ignore[no-any-return]


def text_of(result: dict[str, Any]) -> str:
    assert not result.get("isError"), result
    return "".join(c["text"] for c in result["content"] if c["type"] == "text")


@compat(
    INSPECTOR,
    "`tools/call` in both protocol eras (`--protocol-era legacy`, the CLI's default, and "
    "`modern`): inline, task-backed, and task-backed outlasting the gateway's silent-wait cap "
    '(legacy: answered "still running", then the recorded result by operation id)',
)
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_accepts_every_gateway_result(
    era: str, gateway: ServerProcess, tmp_path: Path
) -> None:
    url = gateway.url
    assert text_of(inspector(url, era, "ts__echo", {"text": "hi"}, tmp_path)) == "hi"
    assert text_of(inspector(url, era, "ts__report", SHORT, tmp_path)) == "report of 2 steps"
    long = inspector(url, era, "ts__report", LONG, tmp_path)
    if era == "modern":  # the CLI holds the gateway's handle and polls it
        assert text_of(long) == "report of 3 steps"
        return
    # Legacy: no handle on that wire, no progressToken sent; a valid answer comes in time.
    key = OPERATION_ID_META_KEY
    op_id = long["_meta"][key]
    assert long["isError"] and "still running" in long["content"][0]["text"]
    for _ in range(5):  # each call waits up to the cap again; the task ends meanwhile
        again = inspector(url, era, "ts__report", LONG, tmp_path, **{key: op_id})
        if not again.get("isError"):
            break
    assert text_of(again) == "report of 3 steps" and again["_meta"][key] == op_id


def ts_client(url: str, tool: str, arguments: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
    """One ``tools/call`` by the official TypeScript client (``client_call.mjs``): its result
    and the progress messages it heard, or its error."""
    done = subprocess.run(
        [
            *("node", str(TS_DIR / "client_call.mjs"), "--url", url, "--token", GATEWAY_TOKEN),
            *("--tool", tool, "--args", json.dumps(arguments), "--timeout-ms", str(timeout_ms)),
        ],
        cwd=TS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@compat(
    TS_CLIENT,
    "`tools/call` without the Tasks extension: an inline and a short task-backed call answered "
    "as plain results; with its request timeout (2 s) reset by progress, a task-backed call "
    "outlasting it is kept alive by the gateway's progress and returns its result; an inline "
    "call that sends nothing for longer times out (the control)",
)
def test_ts_client_waits_past_its_timeout_on_the_gateways_progress(
    gateway: ServerProcess,
) -> None:
    inline = ts_client(gateway.url, "ts__echo", {"text": "hi"}, timeout_ms=20_000)
    assert "result" in inline, inline
    assert text_of(inline["result"]) == "hi"
    short = ts_client(gateway.url, "ts__report", SHORT, timeout_ms=20_000)
    assert "result" in short, short
    assert text_of(short["result"]) == "report of 2 steps"
    # Progress comes on each status change and at least once a second: twice the margin.
    waited = ts_client(gateway.url, "ts__report", {"steps": 4, "step_ms": 900}, timeout_ms=2_000)
    assert "result" in waited, waited
    assert text_of(waited["result"]) == "report of 4 steps"
    assert any(m.startswith("working") for m in waited["progress"])  # the gateway's messages
    silent = ts_client(gateway.url, "ts__sleep_inline", {"ms": 4_000}, timeout_ms=2_000)
    assert silent.get("error", {}).get("code") == "REQUEST_TIMEOUT", silent


def test_silent_wait_caps_only_a_call_that_hears_no_progress() -> None:
    digest = hashlib.sha256(GATEWAY_TOKEN.encode()).hexdigest()
    data = {"principals": {PRINCIPAL: {"token_sha256": digest}}, "toolDeadlinesS": {"a__b": 600}}
    config = parse_gateway_config(data, [])
    assert config.silent_wait_s == 50.0  # under the 60 s the TypeScript SDK waits in silence
    assert config.deadline_for("a__b", hears_progress=False) == 50.0
    assert config.deadline_for("a__b", hears_progress=True) == 600.0
    assert config.deadline_for("x__y", hears_progress=False) == 50.0  # waitDeadlineS: 120
    short = parse_gateway_config({**data, "silentWaitS": 5}, [])
    assert short.deadline_for("a__b", hears_progress=False) == 5.0
    with pytest.raises(GatewayConfigError, match="silentWaitS"):
        parse_gateway_config({**data, "silentWaitS": 0}, [])


# -- the table ----------------------------------------------------------------------------------
def test_compatibility_table_is_rendered_from_the_tests(request: pytest.FixtureRequest) -> None:
    """``docs/compatibility.md`` holds exactly the rows the ``@compat`` tests make (rewrite it
    with ``python -m tests.support.compat``), and no row it claims passes failed last time."""
    assert table_in_doc(DOC.read_text()) == rendered()
    cache = request.config.cache
    assert cache is not None
    failed = [row.test for row in rows() if last_outcome(cache, row) == "fail"]
    assert failed == [], f"docs/compatibility.md says pass, the last run failed: {failed}"
