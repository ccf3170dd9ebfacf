"""bridge.integrations.dbos against real parts: DBOS 3.4 workers as real processes (a SQLite
and a PostgreSQL system database, the ledger beside it), the real Tasks server
(tests/servers/tasks_server.py, FastMCP + fastmcp-tasks) counting its side effects, workers
SIGKILLed mid-task and mid-send, the server restarted, and an input request answered by an
operator (the real ``bridge answer`` CLI, the real ``bridge console`` over HTTP) while the
workflow waits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from dbos import DBOSClient

from bridge import (
    Bridge,
    BridgeSettings,
    CallState,
    InputRequestView,
    Ledger,
    LostReason,
    McpServerConfig,
    TaskStatus,
)
from bridge.errors import InputAlreadyAnswered
from bridge.integrations.dbos import attach
from tests.support.console import base_url, console_process
from tests.support.postgres import fresh_database
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.e2e
P = "acme"
WORKER_DEADLINE_S = 120.0


class Backend:
    """The worker's ledger and DBOS system database, both SQLite files or both PostgreSQL."""

    def __init__(self, ledger: str, sysdb: str) -> None:
        self.ledger = ledger
        self.sysdb = sysdb

    @contextmanager
    def ledger_open(self) -> Iterator[Ledger]:
        opened = Ledger.open(self.ledger)
        try:
            yield opened
        finally:
            opened.close()

    def steps(self, workflow_id: str) -> list[dict[str, Any]]:
        client = DBOSClient(system_database_url=self.sysdb)
        try:
            return list(client.list_workflow_steps(workflow_id))
        finally:
            client.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend(str(tmp_path / "ledger.db"), f"sqlite:///{tmp_path / 'dbos-system.db'}")
        return
    admin = request.getfixturevalue("postgres_admin_url")
    with fresh_database(admin) as ledger, fresh_database(admin) as sysdb:
        yield Backend(ledger, sysdb)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    effects, methods = tmp_path / "effects.log", tmp_path / "methods.log"
    logs = ["--effects-file", str(effects), "--methods-file", str(methods)]
    proc = ServerProcess("tests.servers.tasks_server", args=logs)
    proc.effects_path = effects  # type: ignore[attr-defined]
    proc.methods_path = methods  # type: ignore[attr-defined]
    with proc:
        yield proc


def effects(server: ServerProcess) -> list[str]:
    path: Path = server.effects_path  # type: ignore[attr-defined]
    return path.read_text().splitlines() if path.exists() else []


def methods(server: ServerProcess) -> list[str]:
    """The JSON-RPC method of every request the server received, in order."""
    path: Path = server.methods_path  # type: ignore[attr-defined]
    return path.read_text().splitlines() if path.exists() else []


class Worker:
    """One DBOS worker process (tests/support/dbos_worker.py)."""

    def __init__(self, backend: Backend, server: ServerProcess, tmp: Path, wf: str) -> None:
        self.backend, self.server, self.tmp, self.workflow_id = backend, server, tmp, wf
        self.out = tmp / f"{wf}.json"

    def spawn(self, *extra: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{self.workflow_id}-{time.monotonic_ns()}.log").open("wb")
        argv = [
            *(sys.executable, "-m", "tests.support.dbos_worker"),
            *("--ledger", self.backend.ledger, "--sysdb", self.backend.sysdb),
            *("--server-url", self.server.url, "--workflow-id", self.workflow_id),
            *("--out", str(self.out), *extra),
        ]
        return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)

    def run(self, *extra: str) -> int:
        return self.spawn(*extra).wait(timeout=WORKER_DEADLINE_S)

    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.tmp.glob("*.log")))


def worker(backend: Backend, server: ServerProcess, tmp_path: Path) -> Worker:
    return Worker(backend, server, tmp_path, f"wf-{uuid.uuid4().hex[:10]}")


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Until ``check()`` is truthy (it reads the ledger), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _distinct(states: list[str]) -> list[str]:
    """Consecutive repeats dropped (a poll that saw no change)."""
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def _in_order(part: list[str], whole: list[str]) -> bool:
    """``part`` is ``whole`` with some entries left out (polls may miss a short state)."""
    remaining = iter(whole)
    return all(any(s == w for w in remaining) for s in part)


def bridge_steps(backend: Backend, workflow_id: str) -> list[dict[str, Any]]:
    return [s for s in backend.steps(workflow_id) if s["function_name"].startswith("bridge.")]


def observations(backend: Backend, workflow_id: str) -> list[dict[str, Any]]:
    """What the workflow holds of its task, step by step: the send step's, then each poll's
    (the workflow's durable sleep ``i`` comes after observation ``i``)."""
    steps = bridge_steps(backend, workflow_id)
    if not steps or steps[0]["output"] is None or steps[0]["output"]["task"] is None:
        return []
    return [steps[0]["output"]["task"]] + [s["output"] for s in steps[1:] if s["output"]]


def test_outcome_is_the_ledgers_and_steps_hold_only_what_it_recorded(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-plain", "seconds": 0.3}'
    # A checkpoint after every poll (no in-step polling): each poll is a step of its own.
    assert w.run("--start", "record_effect", args, "--poll-window-s", "0") == 0, w.logs()
    result = w.result()
    assert result["kind"] == "task_ended" and result["status"] == "completed"
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        task = tenant.reads.get_task(result["task_ref"])
        dispatch = tenant.reads.get_dispatch(result["op_ref"])
        events = tenant.reads.events(task.run_ref)
    # The workflow's outcome is the ledger's settled record, field for field.
    assert dispatch.state is CallState.TASK and dispatch.task_ref == task.ref
    assert task.status is TaskStatus.COMPLETED and task.result == result["result"]
    assert dispatch.operation_id.startswith(f"dbos:{w.workflow_id}:")
    # Every status a step holds was recorded in the ledger first; the last is the terminal one.
    steps = bridge_steps(backend, w.workflow_id)
    names = [s["function_name"] for s in steps]
    assert names[0] == "bridge.send" and set(names[1:]) <= {"bridge.poll"}  # it registers the run
    observed = [steps[0]["output"]["task"]] + [s["output"] for s in steps[1:]]
    ledger_states = [
        e.status.value
        for e in events
        if e.type in ("task.created", "task.status_changed", "task.terminal")
    ]
    assert ledger_states[-1] == "completed"
    seen = [o["status"] for o in observed]
    assert _in_order(_distinct(seen), _distinct(ledger_states)), (seen, ledger_states)
    assert seen[-1] == "completed" and not observed[-1]["open"]
    assert all(o["open"] for o in observed[:-1])
    assert all(o["task_ref"] == task.ref for o in observed)
    # Sleeps between polls are DBOS's own durable sleeps, one per poll, each the rest of the
    # server's pollIntervalMs after the poll before it was sent (the step says how long ago
    # that was): the test server asks for 50 ms (the worker's floor is 20 ms, its default
    # 1,000 ms); DBOS counts its own checkpoint before the sleep in the length. A step that
    # returned 50 ms or more after its poll was sent (a loaded machine) leaves nothing to
    # sleep: DBOS records no sleep of 0 s.
    sleeps = [s for s in backend.steps(w.workflow_id) if s["function_name"] == "DBOS.sleep"]
    since = [o["since_poll_ms"] for o in observed[:-1] if o["since_poll_ms"] < 50]
    assert len(sleeps) == len(since) and len(observed) >= 2
    assert all(o["poll_interval_ms"] == 50 for o in observed)
    slept = [s["completed_at_epoch_ms"] - s["started_at_epoch_ms"] for s in sleeps]
    assert all(ms + ago >= 49 and ms < 500 for ms, ago in zip(slept, since, strict=True)), (
        slept,
        since,
    )
    # No raw task id in anything DBOS keeps.
    assert task.task_id not in json.dumps([s["output"] for s in steps], default=str)
    assert effects(server).count("effect k-plain") == 1


def test_a_task_that_does_not_change_is_polled_inside_one_step(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    assert w.run("--start", "record_effect", '{"key": "k-one", "seconds": 0.5}') == 0, w.logs()
    result = w.result()
    assert result["status"] == "completed"
    # Polled every 50 ms while working, in the send step: one checkpoint for the call, the
    # one that holds its end; the polls are in the ledger's figures, not DBOS's steps.
    steps = backend.steps(w.workflow_id)
    assert [s["function_name"] for s in steps] == ["bridge.send"]
    assert steps[0]["output"]["task"]["status"] == "completed"
    with backend.ledger_open() as ledger:
        task = ledger.for_principal(P).reads.get_task(result["task_ref"])
    assert task.status is TaskStatus.COMPLETED and task.result == result["result"]


def test_worker_sigkilled_mid_task_is_resumed_by_dbos_recovery_on_the_same_handle(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-kill", "seconds": 2.0}'
    assert w.run("--start", "record_effect", args, "--crash", "polling") == -9, w.logs()
    with backend.ledger_open() as ledger:
        (task_before,) = ledger.for_principal(P).reads.list_tasks()
    assert task_before.status is TaskStatus.WORKING
    # Another process: DBOS recovery resumes the workflow, which polls the recorded handle.
    assert w.run() == 0, w.logs()
    result = w.result()
    assert result["status"] == "completed" and result["task_ref"] == task_before.ref
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        assert [t.ref for t in tenant.reads.list_tasks()] == [task_before.ref]
        assert len(tenant.reads.list_dispatches()) == 1
    assert effects(server).count("effect k-kill") == 1  # one execution on the server


def test_send_whose_reply_was_lost_becomes_unknown_and_is_never_sent_again(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-lost-reply", "seconds": 0.2}'
    assert w.run("--start", "record_effect", args, "--crash", "reply_lost") == -9, w.logs()
    assert w.run() == 0, w.logs()  # recovery re-runs the send step
    result = w.result()
    assert result["kind"] == "unknown_outcome"
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        (dispatch,) = tenant.reads.list_dispatches()
        assert dispatch.state is CallState.UNKNOWN and tenant.reads.list_tasks() == []
    wait_for(lambda: "effect k-lost-reply" in effects(server), "the server's one execution")
    assert effects(server).count("effect k-lost-reply") == 1


def test_mcp_server_restart_is_a_lost_result_never_a_success(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    proc = w.spawn("--start", "record_effect", '{"key": "k-restart", "seconds": 30}')
    try:
        with backend.ledger_open() as ledger:
            tenant = ledger.for_principal(P)
            wait_for(lambda: tenant.reads.list_tasks(), "the task handle")
            server.restart()  # in-memory tasks are gone
            assert proc.wait(timeout=WORKER_DEADLINE_S) == 0, w.logs()
            (task,) = tenant.reads.list_tasks()
    finally:
        proc.kill()
    result = w.result()
    assert result["kind"] == "task_ended" and result["lost_reason"] == "not_found"
    assert result["status"] != "completed" and result["result"] is None
    assert task.lost_reason is LostReason.NOT_FOUND
    assert "effect k-restart" not in effects(server)


def test_worker_sigkilled_is_resumed_by_another_executor_on_the_same_handle(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-executor", "seconds": 2.0}'
    dead = ("--executor-id", "worker-a")
    assert w.run("--start", "record_effect", args, "--crash", "polling", *dead) == -9, w.logs()
    with backend.ledger_open() as ledger:
        (task_before,) = ledger.for_principal(P).reads.list_tasks()
    # worker-b recovers nothing of its own on launch; worker-a's workflow is resumed there.
    assert w.run("--executor-id", "worker-b", "--recover-from", "worker-a") == 0, w.logs()
    result = w.result()
    assert result["status"] == "completed" and result["task_ref"] == task_before.ref
    client = DBOSClient(system_database_url=backend.sysdb)
    try:
        status = client.retrieve_workflow(w.workflow_id).get_status()
    finally:
        client.destroy()
    assert status.executor_id == "worker-b" and status.app_version == "bridge-dbos-tests-1"
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        assert [t.ref for t in tenant.reads.list_tasks()] == [task_before.ref]
        assert len(tenant.reads.list_dispatches()) == 1
    assert effects(server).count("effect k-executor") == 1  # one execution on the server


def test_unreachable_server_is_polled_with_backoff_and_its_restart_is_a_lost_result(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    proc = w.spawn("--start", "record_effect", '{"key": "k-outage", "seconds": 60}')

    def polls() -> list[dict[str, Any]]:
        return observations(backend, w.workflow_id)

    try:
        with backend.ledger_open() as ledger:
            tenant = ledger.for_principal(P)
            wait_for(lambda: tenant.reads.list_tasks(), "the task handle")
            server.kill()  # down: every poll fails until it is back
            wait_for(
                lambda: any(o["carried"]["failures"] >= 4 for o in polls()), "four failed polls"
            )
            server.start()  # back, without its in-memory tasks
            assert proc.wait(timeout=WORKER_DEADLINE_S) == 0, w.logs()
            (task,) = tenant.reads.list_tasks()
            events = tenant.reads.events(task.run_ref)
    finally:
        proc.kill()
    result = w.result()
    assert result["kind"] == "task_ended" and result["lost_reason"] == "not_found"
    assert task.lost_reason is LostReason.NOT_FOUND and result["result"] is None
    # Each failed poll waited the bridge's backoff (the worker's: 200 ms doubling up to
    # 1,600 ms, +10 % jitter at most), not the server's 50 ms: the durable sleeps grow.
    # (The last poll heard -32602: the task is lost, with no retry to wait for.)
    failed = [o["carried"] for o in polls() if o["open"] and o["carried"]["failures"]]
    counts = [c["failures"] for c in failed]
    assert counts == list(range(1, len(counts) + 1)), counts  # in a row, never reset
    backoffs = [c["backoff_ms"] for c in failed]
    for n, ms in enumerate(backoffs):
        base = min(200 * 2**n, 1600)
        assert base <= ms <= base * 1.1 + 1, backoffs
    sleeps = [s for s in backend.steps(w.workflow_id) if s["function_name"] == "DBOS.sleep"]
    slept = [s["completed_at_epoch_ms"] - s["started_at_epoch_ms"] for s in sleeps]
    first_failed = next(i for i, o in enumerate(polls()) if o["carried"]["failures"])
    after_failures = slept[first_failed : first_failed + len(backoffs)]
    assert all(ms >= b - 5 for ms, b in zip(after_failures, backoffs, strict=False)), (
        after_failures,
        backoffs,
    )
    # Failing longer than the grace (one second here): reported once, an attention item.
    assert [e.type for e in events].count("server.unreachable") == 1
    assert "effect k-outage" not in effects(server)


def test_a_cancel_never_acknowledged_is_sent_by_the_recovered_workflow(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-cancel", "seconds": 60}'
    # The workflow's run is cancelled; the policy asks for tasks/cancel; the worker dies
    # between recording that intent and sending it.
    assert w.run("--start", "record_effect", args, "--crash", "cancel") == -9, w.logs()
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        (task_before,) = tenant.reads.list_tasks()
        assert task_before.cancel_requested_at_ms is not None and task_before.is_open
    started = time.monotonic()
    assert w.run("--executor-id", "worker-b", "--recover-from", "local") == 0, w.logs()
    assert time.monotonic() - started < 45  # cancelled, not run to its 60 s end
    result = w.result()
    assert result["task_ref"] == task_before.ref and result["status"] == "cancelled"
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        events = tenant.reads.events(task_before.run_ref)
    requested = [e for e in events if e.type == "task.cancel_requested"]
    assert [e.requested_by for e in requested] == ["policy:outer_cancelled"]  # asked once
    assert not [e for e in events if e.type == "anomaly"]  # sent once, not refused
    # The step that sent it says so (the steps after it do not send it again).
    assert observations(backend, w.workflow_id)[-1]["carried"]["cancel_sent"]
    assert "effect k-cancel" not in effects(server)
    assert methods(server).count("tasks/cancel") == 1  # sent by the recovered workflow


def test_a_cancel_acknowledged_before_the_worker_died_is_not_sent_again(
    backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-cancel-acked", "seconds": 60}'
    # As above, but the worker dies once the server's acknowledgement is in the ledger: no
    # step of the workflow holds it (the poll step that follows is re-run by the recovery).
    assert w.run("--start", "record_effect", args, "--crash", "cancel_acked") == -9, w.logs()
    with backend.ledger_open() as ledger:
        (task_before,) = ledger.for_principal(P).reads.list_tasks()
    assert task_before.cancel_acknowledged_at_ms is not None
    assert not any(o["carried"]["cancel_sent"] for o in observations(backend, w.workflow_id))
    assert methods(server).count("tasks/cancel") == 1
    assert w.run("--executor-id", "worker-b", "--recover-from", "local") == 0, w.logs()
    result = w.result()
    assert result["task_ref"] == task_before.ref and result["status"] == "cancelled"
    assert methods(server).count("tasks/cancel") == 1  # the recovered workflow did not resend it
    assert "effect k-cancel-acked" not in effects(server)


@pytest.mark.parametrize("policy", ["leave", "cancel_task"])
def test_a_cancelled_workflow_sends_tasks_cancel_only_if_its_policy_says_so(
    policy: str, backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    w = worker(backend, server, tmp_path)
    key = f"k-wf-{policy}"
    # Left alone, the task ends by itself a few seconds later; cancelled, within a poll.
    args = json.dumps({"key": key, "seconds": 3 if policy == "leave" else 60})
    started = time.monotonic()
    # The worker cancels the workflow (DBOS.cancel_workflow) while it polls the working task
    # (the send step's own polls end within a second), then waits until the ledger records
    # the task's end.
    cancelling = ("--cancel-workflow", policy, "--poll-window-s", "1")
    assert w.run("--start", "record_effect", args, *cancelling) == 0, w.logs()
    assert time.monotonic() - started < 45, w.logs()  # not run to its 60 s end
    result = w.result()
    assert result["workflow"] == "cancelled"
    with backend.ledger_open() as ledger:
        events = ledger.for_principal(P).reads.events(
            ledger.for_principal(P).reads.get_task(result["task_ref"]).run_ref
        )
    requested = [e.requested_by for e in events if e.type == "task.cancel_requested"]
    if policy == "leave":
        # Nothing sent: the bridge watched the handle to the task's own end.
        assert result["status"] == "completed" and not result["cancel_requested"]
        assert requested == [] and "tasks/cancel" not in methods(server)
        assert effects(server).count(f"effect {key}") == 1
    else:
        assert result["status"] == "cancelled" and result["cancel_acknowledged"]
        assert requested == ["policy:workflow_cancelled"]
        assert methods(server).count("tasks/cancel") == 1
        assert f"effect {key}" not in effects(server)
    client = DBOSClient(system_database_url=backend.sysdb)
    try:
        assert client.retrieve_workflow(w.workflow_id).get_status().status == "CANCELLED"
    finally:
        client.destroy()


@pytest.mark.parametrize("acknowledged", [False, True], ids=["intent", "acknowledged"])
def test_a_cancelled_workflows_cancel_is_resent_by_the_next_workers_attach_once(
    acknowledged: bool, backend: Backend, server: ServerProcess, tmp_path: Path
) -> None:
    """The workflow is cancelled, its policy (``CANCEL_TASK``) records the intent to cancel,
    and the worker dies before ``tasks/cancel`` leaves (or once its acknowledgement is
    recorded). DBOS never resumes a cancelled workflow: the next worker's ``attach`` takes the
    handle back, sends the cancel never acknowledged (an acknowledged one, never again) and
    watches the task to its end."""
    w = worker(backend, server, tmp_path)
    args = '{"key": "k-wf-dies", "seconds": 60}'
    crash = "workflow_cancel_acked" if acknowledged else "workflow_cancel"
    cancelling = ("--cancel-workflow", "cancel_task", "--poll-window-s", "1")
    assert w.run("--start", "record_effect", args, *cancelling, "--crash", crash) == -9, w.logs()
    with backend.ledger_open() as ledger:
        (task_before,) = ledger.for_principal(P).reads.list_tasks()
    assert task_before.is_open and task_before.cancel_requested_at_ms is not None
    assert (task_before.cancel_acknowledged_at_ms is not None) is acknowledged
    assert methods(server).count("tasks/cancel") == (1 if acknowledged else 0)
    started = time.monotonic()
    assert w.run("--executor-id", "worker-b", "--take-back") == 0, w.logs()
    assert time.monotonic() - started < 45  # cancelled, not run to its 60 s end
    result = w.result()
    assert result["task_ref"] == task_before.ref and result["status"] == "cancelled"
    assert result["cancel_acknowledged"]
    assert methods(server).count("tasks/cancel") == 1  # one on the wire, either way
    with backend.ledger_open() as ledger:
        events = ledger.for_principal(P).reads.events(task_before.run_ref)
    requested = [e.requested_by for e in events if e.type == "task.cancel_requested"]
    assert requested == ["policy:workflow_cancelled"]
    assert not [e for e in events if e.type == "anomaly"]
    assert "effect k-wf-dies" not in effects(server)


def test_input_asked_before_any_task_is_an_explicit_wait_answered_once(
    backend: Backend, tmp_path: Path
) -> None:
    """MRTR: the server answers the first tools/call with an InputRequiredResult (no task);
    the workflow waits durably; an answer given through the bridge sends the call again, and
    the workflow takes the task that made and polls it to its end."""
    with ServerProcess("tests.servers.mrtr_tasks_server") as mrtr:
        w = worker(backend, mrtr, tmp_path)
        proc = w.spawn("--start", "approved_export", '{"rows": 3}')
        try:
            answered = anyio.run(_accept_the_call_input, backend, mrtr)
            assert proc.wait(timeout=WORKER_DEADLINE_S) == 0, w.logs()
        finally:
            proc.kill()
    result = w.result()
    assert result["kind"] == "task_ended" and result["status"] == "completed", result
    assert result["result"]["content"][0]["text"] == "exported 3 rows"
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        (dispatch,) = tenant.reads.list_dispatches()
        (task,) = tenant.reads.list_tasks()
    assert dispatch.task_ref == task.ref == result["task_ref"]
    steps = bridge_steps(backend, w.workflow_id)
    assert steps[0]["function_name"] == "bridge.send"
    assert steps[0]["output"]["asking"] == [answered] and steps[0]["output"]["task"] is None
    waits = [s["output"] for s in steps if s["function_name"] == "bridge.call_input"]
    # Waiting on that one input, durably, until the answer moved the call on: once.
    assert [o["moved_on"] for o in waits] == [False] * (len(waits) - 1) + [True]
    assert all(o["waiting"] == [answered] for o in waits[:-1])
    assert waits[-1]["task"]["task_ref"] == task.ref


def _operator_settings(backend: Backend, server: ServerProcess) -> BridgeSettings:
    """The operator's own bridge on the workflow's ledger (it answers; it recovers nothing)."""
    return BridgeSettings(
        ledger_url=backend.ledger,
        principals=[P],
        mcp_servers=[McpServerConfig(name="tasks", url=server.url)],
        recover_on_start=False,
    )


async def _accept_the_call_input(backend: Backend, server: ServerProcess) -> str:
    """The operator's side: the call's input as ``Bridge.pending_inputs`` lists it, accepted
    (the bridge that takes the answer sends the call again)."""
    async with Bridge.open(_operator_settings(backend, server)) as bridge:
        with anyio.fail_after(60):
            while not (waiting := await bridge.pending_inputs(P)):
                await anyio.sleep(0.05)
        (request,) = waiting
        assert request.task_ref is None and request.op_ref is not None
        await request.accept({})
        return request.input_ref


def test_a_round_of_two_inputs_moves_on_only_once_both_are_answered_each_once(
    backend: Backend, tmp_path: Path
) -> None:
    """MRTR with two inputs in one round: the workflow's steps list both; one answer leaves
    the other waiting (the call is not sent again); the second answer sends it once."""
    path = tmp_path / "mrtr-effects.log"
    with ServerProcess(
        "tests.servers.mrtr_tasks_server", args=["--effects-file", str(path)]
    ) as mrtr:
        w = worker(backend, mrtr, tmp_path)
        proc = w.spawn("--start", "approved_transfer", '{"amount": 5}')
        try:
            first, second = anyio.run(_answer_two_inputs_one_by_one, backend, mrtr, w.workflow_id)
            assert proc.wait(timeout=WORKER_DEADLINE_S) == 0, w.logs()
        finally:
            proc.kill()
    result = w.result()
    assert result["kind"] == "task_ended" and result["status"] == "completed", result
    assert result["result"]["content"][0]["text"] == "transferred 5"
    effects_seen = path.read_text().splitlines()
    assert effects_seen.count("asked transfer 5") == 1 and effects_seen.count("transfer 5") == 1
    with backend.ledger_open() as ledger:
        tenant = ledger.for_principal(P)
        (dispatch,) = tenant.reads.list_dispatches()
        (task,) = tenant.reads.list_tasks()
        events = tenant.reads.events(task.run_ref)
    assert dispatch.task_ref == task.ref == result["task_ref"]
    answered = [e.input_ref for e in events if e.type == "call.input_answered"]
    assert sorted(answered) == sorted([first, second])  # each answered exactly once
    steps = bridge_steps(backend, w.workflow_id)
    assert sorted(steps[0]["output"]["asking"]) == sorted([first, second])
    waits = [s["output"] for s in steps if s["function_name"] == "bridge.call_input"]
    assert [o["moved_on"] for o in waits] == [False] * (len(waits) - 1) + [True]
    # Waiting on the round's inputs (both, until the first answer), then on the second alone,
    # then (a step that ran while the answered call was being sent again) on none.
    listed = [o["waiting"] for o in waits[:-1]]
    asked = [ls for ls in listed if ls]
    assert listed == asked + [[]] * (len(listed) - len(asked)), listed
    assert all(set(ls) <= {first, second} and second in ls for ls in asked), listed
    assert asked[-1] == [second], listed
    assert waits[-1]["task"]["task_ref"] == task.ref


async def _answer_two_inputs_one_by_one(
    backend: Backend, server: ServerProcess, workflow_id: str
) -> tuple[str, str]:
    """The operator answers one input of the round, sees the workflow wait on the other
    alone (and the server asked nothing new), then answers it: both references."""
    async with Bridge.open(_operator_settings(backend, server)) as bridge:
        with anyio.fail_after(60):
            while len(waiting := await bridge.pending_inputs(P)) < 2:
                await anyio.sleep(0.05)
        first, second = waiting
        assert first.op_ref == second.op_ref and first.task_ref is None
        receipt = await first.accept({})
        assert receipt.delivery.value == "awaiting_inputs"
        with pytest.raises(InputAlreadyAnswered):
            await first.accept({})

        def waits_on_the_second_alone() -> bool:
            steps = backend.steps(workflow_id)
            outs = [s["output"] for s in steps if s["function_name"] == "bridge.call_input"]
            return any(o and o["waiting"] == [second.input_ref] for o in outs)

        with anyio.fail_after(60):
            while not await anyio.to_thread.run_sync(waits_on_the_second_alone):
                await anyio.sleep(0.05)
        assert [r.input_ref for r in await bridge.pending_inputs(P)] == [second.input_ref]
        receipt = await second.accept({})
        assert receipt.delivery.value == "retried"
        return first.input_ref, second.input_ref


def _answer_with_the_cli(
    backend: Backend, server: ServerProcess, tmp_path: Path, request: InputRequestView
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": [{"name": "tasks", "url": server.url}]}))
    cli = [sys.executable, "-m", "bridge.cli", "--db", backend.ledger, "--principal", P]
    answer = [*cli, "answer", request.task_ref, request.ref, "--accept", "approve=true"]
    done = subprocess.run(
        [*answer, "--mcp-config", str(config)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "delivered" in done.stdout, done.stdout


def _answer_in_the_console(
    backend: Backend, server: ServerProcess, tmp_path: Path, request: InputRequestView
) -> None:
    token = "dbos-console-token-0123456789"
    with (
        console_process(
            tmp_path, backend.ledger, {P: token}, mcp_servers={"tasks": server.url}
        ) as console,
        httpx.Client(base_url=base_url(console), timeout=30) as http,
    ):
        assert http.post("/login", data={"token": token}).status_code == 303
        inbox = http.get("/inbox")
        assert request.ref in inbox.text  # the attention item, with its form
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', inbox.text)
        assert csrf is not None
        with backend.ledger_open() as ledger:
            run_ref = ledger.for_principal(P).reads.get_task(request.task_ref).run_ref
        path = f"/runs/{run_ref}/inputs/{request.task_ref}/{request.ref}/answer"
        form = {"csrf": csrf.group(1), "action": "accept", "f.approve": "true"}
        answered = http.post(path, data=form)
        assert answered.status_code == 303, answered.text
        assert "answered" in answered.headers["location"], answered.headers["location"]


@pytest.mark.parametrize("answer", [_answer_with_the_cli, _answer_in_the_console])
def test_input_required_answered_by_an_operator_reaches_the_waiting_workflow_once(
    backend: Backend,
    server: ServerProcess,
    tmp_path: Path,
    answer: Callable[[Backend, ServerProcess, Path, InputRequestView], None],
) -> None:
    w = worker(backend, server, tmp_path)
    args = '{"amount": 120, "payment_key": "pay-1"}'
    proc = w.spawn("--start", "approve_payment", args)
    try:
        with backend.ledger_open() as ledger:
            tenant = ledger.for_principal(P)
            (request,) = wait_for(tenant.reads.pending_input_requests, "the input request")
        answer(backend, server, tmp_path, request)
        assert proc.wait(timeout=WORKER_DEADLINE_S) == 0, w.logs()
    finally:
        proc.kill()
    result = w.result()
    assert result["status"] == "completed"
    assert result["result"]["structuredContent"] == {"result": "approved pay-1"}
    polls = observations(backend, w.workflow_id)
    assert any(request.ref in o["waiting"] for o in polls)  # the workflow saw it wait
    answered = [ref for o in polls for ref in o["answered"]]
    assert answered == [request.ref]  # and saw the answer exactly once
    assert effects(server).count("payment pay-1 120") == 1


def test_attach_refuses_a_principal_outside_the_bridge(tmp_path: Path) -> None:
    from bridge import Bridge, BridgeSettings
    from bridge.errors import BridgeError

    bridge = Bridge(Ledger.open(tmp_path / "l.db"), BridgeSettings(principals=[P]))
    with pytest.raises(BridgeError, match="not in this bridge's scope"):
        attach(bridge, "someone-else")
    with pytest.raises(BridgeError, match="poll_window_s"):
        attach(bridge, P, poll_window_s=-1)


def test_the_wait_before_a_poll_is_the_servers_interval_or_the_backoff_never_shorter(
    tmp_path: Path,
) -> None:
    from bridge import Bridge, BridgeSettings, SchedulerConfig
    from bridge.integrations.dbos import attached

    pacing = SchedulerConfig(floor_ms=100, default_interval_ms=1000, ceiling_ms=5000)
    settings = BridgeSettings(principals=[P], scheduler=pacing)
    attach(Bridge(Ledger.open(tmp_path / "l.db"), settings), P)
    here = attached()
    assert here.delay_ms(250, None) == 250  # the server's pollIntervalMs
    assert here.delay_ms(None, None) == 1000  # it gave none: the bridge's default
    assert (here.delay_ms(10, None), here.delay_ms(60_000, None)) == (100, 5000)  # floor, ceiling
    assert here.delay_ms(250, 800) == 800  # after a failed poll: the backoff
    assert here.delay_ms(2000, 800) == 2000  # never sooner than the server asked
    # The scheduler's jitter (up to 10 %) only lengthens it; the backoff is never shortened.
    assert here.delay_ms(250, None, jitter=0.999) == 274
    assert all(250 <= here.next_delay_ms(250, None) < 275 for _ in range(200))
    assert here.delay_ms(250, 800, jitter=0.999) == 800
