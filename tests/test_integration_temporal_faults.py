"""bridge.integrations.temporal under faults, against a real Temporal dev server and the real
Tasks server: a worker SIGKILLed mid-task resumed on another worker (one execution), an MCP
server restart surfaced as lost, an in-flight crash surfaced as an unknown outcome and never
resent, and an answer given from the bridge's CLI or its console reaching the waiting workflow
once; and a worker SIGKILLed while a call waits for an input asked before any task (MRTR),
the workflow resumed on another worker with the input listed and answered once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle

from bridge._ledger.store import Ledger
from bridge.integrations.temporal import (
    ANSWER_UPDATE,
    PENDING_INPUTS_QUERY,
    InputAnswer,
    OutcomeKind,
    PendingInput,
)
from tests.support.bridging import wait_until
from tests.support.console import base_url, console_process
from tests.support.postgres import fresh_database
from tests.support.processes import REPO_ROOT, ServerProcess
from tests.support.temporal_dev import TemporalDevServer
from tests.support.temporal_workflows import TASK_QUEUE, BridgedCallWorkflow, CallSpec
from tests.test_console_http import csrf_of

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
PRINCIPAL = "acme"
RESULT_TIMEOUT_S = 120
CONSOLE_TOKEN = "acme-console-token-temporal-0123"


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    try:
        server = TemporalDevServer(tmp_path_factory.mktemp("temporal"))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture
def tasks_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A Tasks server of the test's own (one test restarts it), counting its side effects."""
    effects = tmp_path / "effects.log"
    server = ServerProcess("tests.servers.tasks_server", args=["--effects-file", str(effects)])
    server.effects_path = effects  # type: ignore[attr-defined]
    server.start(timeout=120)
    try:
        yield server
    finally:
        server.stop()


class WorkerProcess:
    """``python -m tests.support.temporal_worker`` (its own bridge on the shared ledger)."""

    def __init__(
        self, temporal: TemporalDevServer, db: Path | str, url: str, queue: str, logs: Path
    ) -> None:
        self.args = [
            sys.executable, "-m", "tests.support.temporal_worker",
            "--target", temporal.target, "--task-queue", queue, "--db", str(db), "--mcp-url", url,
        ]  # fmt: skip
        self.log = logs / f"worker-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *extra: str) -> WorkerProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [*self.args, *extra], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 120) -> None:
        import time

        deadline = time.monotonic() + timeout
        while "READY" not in self.log.read_text():
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"worker not ready:\n{self.log.read_text()}"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def tasks_in(db: Path | str) -> list[object]:
    ledger = Ledger.open(db)
    try:
        return list(ledger.for_principal(PRINCIPAL).reads.list_tasks())
    finally:
        ledger.close()


def effects(server: ServerProcess, line: str) -> int:
    path: Path = server.effects_path  # type: ignore[attr-defined]
    return path.read_text().splitlines().count(line) if path.exists() else 0


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """The workers' shared ledger: a SQLite file, or a fresh database on the suite's
    PostgreSQL (each worker process then joins its replicas, leasing the handles it polls)."""
    if request.param == "sqlite":
        yield tmp_path / "ledger.db"
        return
    with fresh_database(request.getfixturevalue("postgres_admin_url")) as url:
        yield url


def replica(db: Path | str, name: str) -> list[str]:
    return [] if isinstance(db, Path) else ["--replica", name]


async def test_a_worker_killed_mid_task_is_resumed_by_another_on_the_same_handle(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
    ledger_url: Path | str,
) -> None:
    db, queue = ledger_url, f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}"
    key = f"kill-{uuid.uuid4().hex[:6]}"
    first = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path)
    first.start(*replica(db, "w1"))
    workers.append(first)
    first.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "record_effect", {"key": key, "seconds": 3}, heartbeat_timeout_s=2)
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"kill-{uuid.uuid4().hex}", task_queue=queue
    )
    (task,) = await wait_until(lambda: tasks_in(db), timeout=60, what="the handle recorded")
    first.kill()  # SIGKILL while the task runs and its watch is held by this worker
    second = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path)
    second.start(*replica(db, "w2"))  # on PostgreSQL: takes the handle once w1's lease lapsed
    workers.append(second)
    outcome = await handle.result(rpc_timeout=None)
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"done {key}"
    assert outcome.task_ref == task.ref  # type: ignore[attr-defined]  # the same handle
    assert effects(tasks_server, f"effect {key}") == 1
    assert len(tasks_in(db)) == 1


async def test_an_mcp_server_restart_surfaces_as_lost_never_success(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    db, queue = tmp_path / "ledger.db", f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}"
    worker = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path).start()
    workers.append(worker)
    worker.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "wait_forever", {"seconds": 60})
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"lost-{uuid.uuid4().hex}", task_queue=queue
    )
    await wait_until(lambda: tasks_in(db), timeout=60, what="the handle recorded")
    tasks_server.restart(timeout=120)  # its in-memory tasks are gone: tasks/get says -32602
    outcome = await handle.result(rpc_timeout=None)
    assert outcome.kind is OutcomeKind.LOST and not outcome.succeeded
    assert outcome.result is None and outcome.detail is not None
    assert outcome.detail.startswith("not_found")


async def test_an_in_flight_crash_is_an_unknown_outcome_and_never_resent(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    db, queue, key = tmp_path / "ledger.db", f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}", "k3"
    # Dies once the server answered tools/call with a task, before the handle is recorded.
    first = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path).start(
        "--crash", "before_handle"
    )
    workers.append(first)
    first.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "record_effect", {"key": key}, start_timeout_s=5)
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"unknown-{uuid.uuid4().hex}", task_queue=queue
    )
    await wait_until(first.died, timeout=60, what="the worker's crash")
    second = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path).start()
    workers.append(second)
    outcome = await handle.result(rpc_timeout=None)
    assert outcome.kind is OutcomeKind.UNKNOWN and not outcome.succeeded
    await wait_until(lambda: effects(tasks_server, f"effect {key}"), timeout=30, what="the run")
    assert effects(tasks_server, f"effect {key}") == 1  # it ran once: the retry sent nothing
    assert tasks_in(db) == []  # no handle was ever recorded for it


async def test_an_answer_from_the_bridge_cli_reaches_the_waiting_workflow(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    db, queue, key = tmp_path / "ledger.db", f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}", "pay-cli"
    worker = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path).start()
    workers.append(worker)
    worker.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "approve_payment", {"amount": 7, "payment_key": key})
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"cli-{uuid.uuid4().hex}", task_queue=queue
    )

    async def asked() -> list[PendingInput]:
        return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

    (pending,) = await wait_until(asked, timeout=60, what="the approval asked")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": [{"name": "tasks", "url": tasks_server.url}]}))
    done = subprocess.run(
        [
            sys.executable, "-m", "bridge.cli", "--db", str(db), "--principal", PRINCIPAL,
            "answer", pending.task_ref, pending.input_ref, "--accept", "approve=true",
            "--mcp-config", str(config),
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = await handle.result(rpc_timeout=None)
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"approved {key}"
    assert effects(tasks_server, f"payment {key} 7") == 1


async def test_an_answer_from_the_console_reaches_the_waiting_workflow_once(
    temporal: TemporalDevServer,
    tasks_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    """The operator answers in the console (a `bridge console` process on the worker's
    ledger): the watch sees the answer, the workflow completes, the payment is made once, and a
    second post finds the request answered and sends nothing."""
    db, queue, key = tmp_path / "ledger.db", f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}", "pay-web"
    worker = WorkerProcess(temporal, db, tasks_server.url, queue, tmp_path).start()
    workers.append(worker)
    worker.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "approve_payment", {"amount": 9, "payment_key": key})
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"web-{uuid.uuid4().hex}", task_queue=queue
    )

    async def asked() -> list[PendingInput]:
        return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

    (pending,) = await wait_until(asked, timeout=60, what="the approval asked")
    (task,) = tasks_in(db)
    run_ref = task.run_ref  # type: ignore[attr-defined]
    path = f"/runs/{run_ref}/inputs/{pending.task_ref}/{pending.input_ref}/answer"
    tokens = {PRINCIPAL: CONSOLE_TOKEN}
    with (
        console_process(tmp_path, db, tokens, mcp_servers={"tasks": tasks_server.url}) as proc,
        httpx.Client(
            base_url=base_url(proc), headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"}
        ) as http,
    ):
        inbox = http.get("/inbox").text
        assert f"Approve payment {key} of 9?" in inbox
        form = {"csrf": csrf_of(inbox), "action": "accept", "f.approve": "true"}
        answered = http.post(path, data=form)
        assert answered.status_code == 303, answered.text
        assert "done=answered" in answered.headers["location"]
        outcome = await handle.result(rpc_timeout=None)
        again = http.post(path, data=form)
        assert again.status_code == 409 and "not waiting for an answer" in again.text
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"approved {key}"
    assert effects(tasks_server, f"payment {key} 9") == 1
    assert await asked() == []
    history = json.loads((await handle.fetch_history()).to_json())
    answers = [e for e in history["events"] if "bridge.answer_input" in json.dumps(e)]
    assert answers == []  # answered through the bridge: no update, no answer activity


@pytest.fixture
def mrtr_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The real Tasks server that asks (MRTR) before it creates the task, counting runs."""
    path = tmp_path / "mrtr-effects.log"
    server = ServerProcess("tests.servers.mrtr_tasks_server", args=["--effects-file", str(path)])
    server.effects_path = path  # type: ignore[attr-defined]
    server.start(timeout=120)
    try:
        yield server
    finally:
        server.stop()


async def _watch_started(handle: WorkflowHandle[Any, Any]) -> bool:
    """The workflow's one pending activity (the MRTR watch) is running on a worker."""
    described = await handle.describe()
    pending = described.raw_description.pending_activities
    return any(
        a.activity_type.name == "bridge.watch_call"
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for a in pending
    )


@pytest.mark.parametrize("answer_by", ["update", "cli"])
async def test_a_worker_killed_while_an_mrtr_input_waits_is_resumed_and_answered_once(
    answer_by: str,
    temporal: TemporalDevServer,
    mrtr_server: ServerProcess,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    db, queue, rows = tmp_path / "ledger.db", f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}", 61
    first = WorkerProcess(temporal, db, mrtr_server.url, queue, tmp_path).start()
    workers.append(first)
    first.wait_ready()
    client = await Client.connect(temporal.target)
    spec = CallSpec("tasks", "approved_export", {"rows": rows}, heartbeat_timeout_s=2)
    handle = await client.start_workflow(
        BridgedCallWorkflow.run, spec, id=f"mrtr-kill-{uuid.uuid4().hex}", task_queue=queue
    )

    async def asked() -> list[PendingInput]:
        return await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])

    (before,) = await wait_until(asked, timeout=60, what="the input asked before any task")
    await wait_until(lambda: _watch_started(handle), timeout=60, what="the watch running")
    first.kill()  # SIGKILL while its watch waits for the answer
    second = WorkerProcess(temporal, db, mrtr_server.url, queue, tmp_path).start()
    workers.append(second)
    second.wait_ready()
    # The workflow, replayed on the second worker, lists the same input once.
    assert await wait_until(asked, timeout=60, what="the query answered") == [before]
    assert before.op_ref is not None and before.task_ref is None
    assert [r.ref for r in _pending_in_ledger(db)] == [before.input_ref]  # and in the bridge
    if answer_by == "update":
        delivery = await handle.execute_update(
            ANSWER_UPDATE, InputAnswer(before.input_ref, content={}), result_type=str
        )
        assert delivery == "retried"
    else:
        done = subprocess.run(
            [
                sys.executable, "-m", "bridge.cli", "--db", str(db), "--principal", PRINCIPAL,
                "answer", before.op_ref, before.input_ref, "--content", "{}",
                "--mcp-config", str(_mcp_config(tmp_path, mrtr_server)), "--json",
            ],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["delivery"] == "retried"
    outcome = await handle.result(rpc_timeout=None)
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.text == f"exported {rows} rows"
    assert outcome.op_ref == before.op_ref
    assert await asked() == []
    assert effects(mrtr_server, f"export {rows}") == 1  # one execution on the server
    ledger = Ledger.open(db)
    try:
        reads = ledger.for_principal(PRINCIPAL).reads
        (dispatch,) = reads.list_dispatches()
        (task,) = reads.list_tasks()
        answers = [e for e in reads.events(task.run_ref) if e.type == "call.input_answered"]
    finally:
        ledger.close()
    assert dispatch.task_ref == task.ref == outcome.task_ref
    assert len(answers) == 1  # answered once


def _mcp_config(tmp_path: Path, server: ServerProcess) -> Path:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": [{"name": "tasks", "url": server.url}]}))
    return config


def _pending_in_ledger(db: Path) -> list[Any]:
    ledger = Ledger.open(db)
    try:
        return list(ledger.for_principal(PRINCIPAL).rounds.pending_call_inputs())
    finally:
        ledger.close()
