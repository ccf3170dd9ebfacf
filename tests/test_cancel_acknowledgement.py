"""A cancel the server acknowledged is recorded, and never sent a second time by whoever
resumes the handle; a cancel whose request never left is sent by the recovery.

A real process makes one call on the real Tasks server (which logs every request's method),
asks ``tasks/cancel`` and SIGKILLs itself either once the server's acknowledgement is recorded
or once the intent is recorded (before the request leaves); a bridge opened afterwards on the
same ledger recovers the handle.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import Bridge, BridgeSettings
from bridge._config import McpServerConfig
from bridge._facade import host_polls
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from tests.support.bridging import FAST, wait_closed
from tests.support.builders import new_run
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]  # a calling process SIGKILLed


@pytest.fixture
def logged_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The Tasks server, appending each request's JSON-RPC method to ``methods.log``."""
    methods = tmp_path / "methods.log"
    server = ServerProcess("tests.servers.tasks_server", args=["--methods-file", str(methods)])
    server.methods_path = methods  # type: ignore[attr-defined]
    with server:
        yield server


def _cancels(server: ServerProcess) -> int:
    path: Path = server.methods_path  # type: ignore[attr-defined]
    return path.read_text().splitlines().count("tasks/cancel") if path.exists() else 0


def _call_cancel_and_die(db: Path, server: ServerProcess, run_ref: str, crash: str) -> None:
    command = [
        *(sys.executable, "-m", "tests.support.crash_driver", "--db", str(db)),
        *("--server-url", server.url, "--run-ref", run_ref, "--tool", "wait_forever"),
        *("--args", json.dumps({"seconds": 60}), "--operation-id", f"op-{crash}"),
        *("--crash", crash, "--cancel"),
    ]
    died = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]


@pytest.mark.parametrize(
    ("crash", "acknowledged"),
    [("after_cancel_acknowledged", True), ("after_cancel_intent", False)],
)
async def test_recovery_resends_a_cancel_only_if_no_acknowledgement_was_recorded(
    crash: str, acknowledged: bool, tmp_path: Path, logged_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    _call_cancel_and_die(db, logged_server, run.ref, crash)

    (task,) = tenant.reads.list_tasks(run_ref=run.ref)
    assert task.is_open and task.cancel_requested_at_ms is not None
    assert (task.cancel_acknowledged_at_ms is not None) is acknowledged
    assert _cancels(logged_server) == (1 if acknowledged else 0)

    servers = [McpServerConfig(name="tasks", url=logged_server.url)]
    settings = BridgeSettings(principals=["acme"], mcp_servers=servers, scheduler=FAST)
    if acknowledged:
        # The host asks again: the recorded acknowledgement answers, nothing is sent.
        quiet = dataclasses.replace(settings, recover_on_start=False)
        async with Bridge(ledger, quiet) as bridge:
            assert await bridge.run("acme", run.ref).cancel_task(task.ref)
        assert _cancels(logged_server) == 1
    async with Bridge(ledger, settings) as bridge:
        report = bridge.last_recovery
        assert report is not None and report.tasks_watched == 1
        assert report.cancels_to_resend == (0 if acknowledged else 1)
        await wait_closed(tenant, task.ref, timeout=45)
    done = tenant.reads.get_task(task.ref)
    assert done.status is TaskStatus.CANCELLED
    assert done.cancel_acknowledged_at_ms is not None  # the recovery's own, when it sent it
    assert _cancels(logged_server) == 1  # one tasks/cancel on the wire, either way
    ledger.close()


@pytest.mark.parametrize("crash", ["after_cancel_intent", "after_cancel_acknowledged"])
async def test_a_host_engine_takes_back_only_what_its_requester_asked_to_cancel(
    crash: str, tmp_path: Path, logged_server: ServerProcess
) -> None:
    """What ``bridge.integrations.dbos.attach`` does on start, without DBOS: the open handles
    whose last cancel one requester asked for (here the host, as the crash driver asks) are
    watched again, the cancel sent first only if it was never acknowledged; another
    requester's are left alone, and a handle watched already is not taken twice."""
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    _call_cancel_and_die(db, logged_server, run.ref, crash)
    (task,) = tenant.reads.list_tasks(run_ref=run.ref)
    acknowledged = task.cancel_acknowledged_at_ms is not None
    assert acknowledged is (crash == "after_cancel_acknowledged")
    servers = [McpServerConfig(name="tasks", url=logged_server.url)]
    quiet = BridgeSettings(
        principals=["acme"], mcp_servers=servers, scheduler=FAST, recover_on_start=False
    )
    async with Bridge(ledger, quiet) as bridge:
        polls = host_polls(bridge, "acme")
        others = await polls.take_back_cancelled("policy:workflow_cancelled")
        assert others.tasks_watched == 0 and not bridge.is_watching(task.ref)
        taken = await polls.take_back_cancelled("host")
        assert (taken.tasks_watched, taken.cancels_to_resend) == (1, 0 if acknowledged else 1)
        assert (await polls.take_back_cancelled("host")).tasks_watched == 0  # watched, or ended
        await wait_closed(tenant, task.ref, timeout=45)
    assert tenant.reads.get_task(task.ref).status is TaskStatus.CANCELLED
    assert _cancels(logged_server) == 1  # one tasks/cancel on the wire, either way
    ledger.close()
