"""SIGKILL of the calling process between each write-ahead step, then recovery elsewhere.

For every step: no handle that was committed is lost, no side effect is repeated (effects are
counted by the server), and every ambiguity ends as an explicit ``unknown_outcome``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import Bridge, BridgeSettings, events as ev
from bridge._config import McpServerConfig
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import InlineResult, TaskHandle, UnknownOutcome
from tests.support.bridging import FAST, effects, wait_closed, wait_until
from tests.support.builders import new_run
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]  # crash drivers: processes SIGKILLed

# step -> (tool, arguments builder, answer the input?, what recovery must find)
CASES = {
    "after_intent": ("record_effect", False, "unknown", 0),
    "before_handle": ("record_effect", False, "unknown", 1),
    "after_handle": ("record_effect", False, "completed", 1),
    "before_result": ("record_effect_inline", False, "unknown", 1),
    "after_answer_recorded": ("approve_payment", True, "completed", 1),
}


# Steps where the request reached the server before the crash, so its effect happens anyway.
ACTED_BEFORE_RECOVERY = {"before_handle", "before_result", "after_handle"}


def _arguments(tool: str, key: str) -> dict[str, object]:
    if tool == "approve_payment":
        return {"amount": 7, "payment_key": key}
    return {"key": key, "seconds": 0.2} if tool == "record_effect" else {"key": key}


def _run_until_killed(
    db: Path,
    server_url: str,
    run_ref: str,
    tool: str,
    arguments: dict[str, object],
    operation_id: str,
    crash: str,
    *,
    answer: bool = False,
) -> None:
    """Run one bridged call in a separate process that SIGKILLs itself at ``crash``."""
    command = [
        sys.executable,
        "-m",
        "tests.support.crash_driver",
        "--db",
        str(db),
        "--server-url",
        server_url,
        "--run-ref",
        run_ref,
        "--tool",
        tool,
        "--args",
        json.dumps(arguments),
        "--operation-id",
        operation_id,
        "--crash",
        crash,
    ] + (["--answer"] if answer else [])
    died = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]


def _effect_line(tool: str, key: str) -> str:
    return f"payment {key} 7" if tool == "approve_payment" else f"effect {key}"


@pytest.mark.parametrize("step", sorted(CASES))
async def test_kill_at_each_step_then_recover(
    step: str, tmp_path: Path, tasks_server: ServerProcess
) -> None:
    tool, answer, expected, effect_count = CASES[step]
    key = f"crash-{step}"
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    arguments = _arguments(tool, key)
    _run_until_killed(db, tasks_server.url, run.ref, tool, arguments, key, step, answer=answer)

    effects_path: Path = tasks_server.effects_path  # type: ignore[attr-defined]
    line = _effect_line(tool, key)
    if step in ACTED_BEFORE_RECOVERY:  # the server acted although the caller never learnt it
        await wait_until(lambda: line in effects(effects_path))

    servers = [McpServerConfig(name="tasks", url=tasks_server.url)]
    # Recovery through the public facade: Bridge.recover() runs on start.
    async with Bridge(
        ledger, BridgeSettings(principals=["acme"], mcp_servers=servers, scheduler=FAST)
    ) as bridge:
        report = bridge.last_recovery
        assert report is not None
        requester = bridge._requester
        (dispatch,) = tenant.reads.list_dispatches(run_ref=run.ref)
        if expected == "unknown":
            assert report.calls_marked_unknown == 1
            assert dispatch.state is CallState.UNKNOWN
            unknown = [
                e for e in tenant.reads.events(run.ref) if isinstance(e, ev.CallUnknownOutcome)
            ]
            assert len(unknown) == 1 and unknown[0].op_ref == dispatch.ref
        else:
            assert dispatch.state is CallState.TASK and dispatch.task_ref is not None
            await wait_closed(tenant, dispatch.task_ref)
            assert tenant.reads.get_task(dispatch.task_ref).status is TaskStatus.COMPLETED
        # The caller retrying with the same operation id learns the outcome; nothing is resent.
        again = await requester.call_tool(
            "acme", run.ref, "tasks", tool, arguments, operation_id=key
        )
        assert again.replayed
        assert isinstance(again, UnknownOutcome if expected == "unknown" else TaskHandle)
    assert effects(effects_path).count(line) == effect_count  # no side effect repeated
    seqs = [e.seq for e in tenant.reads.events(run.ref)]
    assert seqs == list(range(1, len(seqs) + 1))  # gapless across the crash
    ledger.close()


async def test_second_process_resumes_a_handle_the_first_created(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    """Process A gets the handle and dies; process B polls, answers and finishes it."""
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    key = "resume-pay"
    arguments = _arguments("approve_payment", key)
    _run_until_killed(
        db, tasks_server.url, run.ref, "approve_payment", arguments, key, "after_handle"
    )
    (task,) = tenant.reads.list_tasks(run_ref=run.ref)

    servers = [McpServerConfig(name="tasks", url=tasks_server.url)]
    async with TaskRequester(ledger, servers, scheduler=FAST) as requester:
        assert (await requester.resume(["acme"])).tasks_watched == 1
        (request,) = await wait_until(lambda: tenant.reads.input_requests(task.ref))
        answer = {"action": "accept", "content": {"approve": True}}
        assert (await requester.answer_input("acme", task.ref, request.ref, answer)).delivered
        await wait_closed(tenant, task.ref)
    done = tenant.reads.get_task(task.ref)
    assert done.status is TaskStatus.COMPLETED
    assert done.result["content"][0]["text"] == f"approved {key}"
    assert effects(tasks_server.effects_path).count(f"payment {key} 7") == 1  # type: ignore[attr-defined]
    ledger.close()


async def test_inline_replay_returns_the_recorded_result(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    servers = [McpServerConfig(name="tasks", url=tasks_server.url)]
    async with TaskRequester(ledger, servers, scheduler=FAST) as requester:
        first = await requester.call_tool(
            "acme", run.ref, "tasks", "record_effect_inline", {"key": "inline-1"}, operation_id="i1"
        )
        second = await requester.call_tool(
            "acme", run.ref, "tasks", "record_effect_inline", {"key": "inline-1"}, operation_id="i1"
        )
    assert isinstance(first, InlineResult) and isinstance(second, InlineResult)
    assert second.replayed and second.result == first.result
    assert effects(tasks_server.effects_path).count("effect inline-1") == 1  # type: ignore[attr-defined]
    ledger.close()
