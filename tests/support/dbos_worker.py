"""A DBOS worker process for the DBOS integration tests: a bridge attached, one workflow that
makes one bridged call, DBOS launched (which recovers this application's pending workflows).

    python -m tests.support.dbos_worker --ledger URL --sysdb URL --server-url URL \
        --workflow-id ID [--start TOOL ARGS_JSON] [--crash POINT] \
        [--executor-id ID [--recover-from DEAD_ID]] [--cancel-workflow POLICY] --out FILE

``--start`` starts the workflow; without it the worker only waits for the workflow DBOS
recovered (its own executor's pending workflows, recovered when DBOS launches; with
``--recover-from``, a dead executor's: resumed through DBOS's public ``resume_workflow``, as
an operator or a recovery service does). It writes the workflow's result (JSON) to
``--out``. ``--crash`` SIGKILLs the process at a chosen point, as a machine failure would:

* ``reply_lost``: the server accepted ``tools/call`` and made the task, the process dies
  before the reply is recorded (the send step's checkpoint never happens);
* ``polling``: after the first poll step that saw the task ``working`` (mid-task);
* ``cancel``: there, the workflow's run is ended ``cancelled`` instead, and the policy
  (``on_outer_cancel=cancel_inner``) asks for ``tasks/cancel``: the process dies once the
  intent is recorded, before the request leaves (never acknowledged);
* ``cancel_acked``: the same, but the process dies once the server's acknowledgement of
  ``tasks/cancel`` is recorded in the ledger (before any step's checkpoint says so);
* ``workflow_cancel`` / ``workflow_cancel_acked`` (with ``--cancel-workflow cancel_task``):
  the workflow is cancelled and its policy asks for ``tasks/cancel``; the process dies once
  the intent is recorded (before the request leaves), or once the acknowledgement is.

``--take-back`` starts no workflow and waits for none: the worker attaches its bridge,
launches DBOS and waits until every task of the ledger is closed (what a dead worker's
cancelled workflows left is taken back at attach), writing the task as the ledger ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from dbos import DBOS, DBOSConfig, SetWorkflowID, error

from bridge import (
    Bridge,
    BridgeSettings,
    Ledger,
    McpServerConfig,
    OnOuterCancel,
    OuterStatus,
    Policies,
    SchedulerConfig,
)
from bridge.integrations import dbos as bridged

PRINCIPAL = "acme"
SERVER = "tasks"
# The workers' poll pacing: the test servers ask for 50 ms; the floor stays below it and the
# default (for a server that says nothing) far above, so a 50 ms sleep is the server's. The
# backoff after failed polls is short, and the unreachable report comes after one second, so
# that an outage test sees both within seconds.
PACING = SchedulerConfig(
    floor_ms=20,
    default_interval_ms=1000,
    backoff_base_ms=200,
    backoff_max_ms=1600,
    unreachable_grace_ms=1000,
)


def summary(outcome: Any) -> dict[str, Any]:
    """What the tests compare with the ledger: the outcome kind and what it carries."""
    out: dict[str, Any] = {"kind": outcome.kind.value, "op_ref": outcome.op_ref}
    task = getattr(outcome, "task", None)
    if task is not None:
        out.update(
            task_ref=task.ref,
            status=task.status.value,
            lost_reason=task.lost_reason.value if task.lost_reason else None,
            result=task.result,
        )
    if hasattr(outcome, "reason"):
        out["reason"] = outcome.reason
    if hasattr(outcome, "result") and task is None:
        out["result"] = outcome.result
    return out


@DBOS.workflow(name="tests.bridged_call")
async def bridged_call(
    tool: str, arguments: dict[str, Any], on_cancel: str = "leave"
) -> dict[str, Any]:
    policy = bridged.OnWorkflowCancel(on_cancel)
    outcome = await bridged.call_tool(SERVER, tool, arguments, on_cancel=policy)
    return summary(outcome)


async def _cancel_when_working(workflow_id: str, ledger_url: str) -> dict[str, Any]:
    """``DBOS.cancel_workflow`` once the workflow's task is ``working``; then, the workflow
    cancelled, wait for the ledger to record how the task ended (this process's bridge
    watches it again): the task as the ledger has it."""
    ledger = Ledger.open(ledger_url)
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        with anyio.fail_after(60):
            while not [t for t in tenant.reads.list_tasks() if t.status.value == "working"]:
                await anyio.sleep(0.05)
            await DBOS.cancel_workflow_async(workflow_id)
            while (task := tenant.reads.list_tasks()[0]).is_open:
                await anyio.sleep(0.05)
    finally:
        ledger.close()
    return {
        "workflow": "cancelled",
        "task_ref": task.ref,
        "status": task.status.value,
        "cancel_requested": task.cancel_requested_at_ms is not None,
        "cancel_acknowledged": task.cancel_acknowledged_at_ms is not None,
    }


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _inject(point: str | None) -> None:
    if point == "reply_lost":
        from bridge._ledger.dispatches import DispatchWrites

        def dying(*_args: Any, **_kwargs: Any) -> Any:
            _die()  # the handle arrived; recording it is the step that never happens

        DispatchWrites.stage_task_created = dying  # type: ignore[method-assign]
    elif point in ("polling", "cancel", "cancel_acked"):
        from bridge.integrations.dbos._attach import Attached

        original = Attached.poll

        async def poll_then_die(self: Attached, task_ref: str, carried: Any, **kw: Any) -> Any:
            task, carried = await original(self, task_ref, carried, **kw)
            if task.status.value == "working" and os.environ.get("DBOS_WORKER_POLLED"):
                if point in ("cancel", "cancel_acked"):
                    _die_at_cancel(acknowledged=point == "cancel_acked")
                    await self.run(task.run_ref).record_status(OuterStatus.CANCELLED)
                _die()
            os.environ["DBOS_WORKER_POLLED"] = "1"  # the send step's own first poll is spared
            return task, carried

        Attached.poll = poll_then_die  # type: ignore[method-assign]


def _die_at_cancel(*, acknowledged: bool) -> None:
    """The next ``tasks/cancel`` sent on the host's behalf kills the process first, or, with
    ``acknowledged``, once the server's acknowledgement of it is recorded."""
    if acknowledged:
        from bridge._ledger.tasks import TaskWrites

        recorded = TaskWrites.record_cancel_acknowledged

        def record_then_die(self: TaskWrites, *args: Any, **kwargs: Any) -> None:
            recorded(self, *args, **kwargs)
            _die()

        TaskWrites.record_cancel_acknowledged = record_then_die  # type: ignore[method-assign]
        return
    from bridge._mcp.calls import answers_and_cancels

    async def dying(*_args: Any, **_kwargs: Any) -> None:
        _die()  # the intent is recorded; the request never leaves

    answers_and_cancels.send_cancel = dying  # type: ignore[attr-defined]


async def _all_closed(ledger_url: str) -> dict[str, Any]:
    """Until the ledger's one task is closed: the task as the ledger ends it."""
    ledger = Ledger.open(ledger_url)
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        with anyio.fail_after(60):
            while (task := tenant.reads.list_tasks()[0]).is_open:
                await anyio.sleep(0.05)
    finally:
        ledger.close()
    return {
        "task_ref": task.ref,
        "status": task.status.value,
        "cancel_acknowledged": task.cancel_acknowledged_at_ms is not None,
    }


async def main(args: argparse.Namespace) -> None:
    if args.crash in ("workflow_cancel", "workflow_cancel_acked"):
        _die_at_cancel(acknowledged=args.crash == "workflow_cancel_acked")
    else:
        _inject(args.crash)
    settings = BridgeSettings(
        ledger_url=args.ledger,
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name=SERVER, url=args.server_url)],
        scheduler=PACING,
        policies=Policies(on_outer_cancel=OnOuterCancel.CANCEL_INNER),
        recover_on_start=False,
    )
    async with Bridge.open(settings) as bridge:
        bridged.attach(bridge, PRINCIPAL, poll_window_s=args.poll_window_s)
        config: DBOSConfig = {
            "name": "bridge-dbos-tests",
            "system_database_url": args.sysdb,
            "application_version": "bridge-dbos-tests-1",
        }
        if args.executor_id is not None:
            config["executor_id"] = args.executor_id
        DBOS(config=config)
        DBOS.launch()  # inside the loop: recovered async workflows run on it
        try:
            if args.take_back:
                Path(args.out).write_text(json.dumps(await _all_closed(args.ledger)))
                return
            if args.recover_from is not None:
                # Another executor's workflow: DBOS recovers only its own on launch.
                handle = await DBOS.resume_workflow_async(args.workflow_id)
            elif args.start is not None:
                tool, arguments = args.start[0], json.loads(args.start[1])
                policy = args.cancel_workflow or "leave"
                with SetWorkflowID(args.workflow_id):
                    handle = await DBOS.start_workflow_async(bridged_call, tool, arguments, policy)
            else:
                handle = await DBOS.retrieve_workflow_async(args.workflow_id)
            if args.cancel_workflow is not None:
                result = await _cancel_when_working(args.workflow_id, args.ledger)
                with expect_cancelled():
                    await handle.get_result()
            else:
                result = await handle.get_result()
        finally:
            DBOS.destroy(workflow_completion_timeout_sec=0)
    Path(args.out).write_text(json.dumps(result))


@contextmanager
def expect_cancelled() -> Iterator[None]:
    """The awaited workflow must have been cancelled (anything else is a test failure)."""
    try:
        yield
    except error.DBOSAwaitedWorkflowCancelledError:
        return
    raise AssertionError("the workflow was not cancelled")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--sysdb", required=True)
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--workflow-id", required=True)
    parser.add_argument("--start", nargs=2, metavar=("TOOL", "ARGS_JSON"))
    parser.add_argument(
        "--crash",
        choices=[
            "reply_lost",
            "polling",
            "cancel",
            "cancel_acked",
            "workflow_cancel",
            "workflow_cancel_acked",
        ],
    )
    parser.add_argument("--take-back", action="store_true")
    parser.add_argument("--executor-id", default=None, help="DBOS executor id (default: local)")
    parser.add_argument("--recover-from", default=None, metavar="DEAD_EXECUTOR_ID")
    parser.add_argument("--poll-window-s", type=float, default=30.0)
    parser.add_argument(
        "--cancel-workflow",
        choices=["leave", "cancel_task"],
        help="start the workflow with this on_cancel policy; DBOS.cancel_workflow it once its "
        "task is working; the task as the ledger ends it is the output",
    )
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, parse(sys.argv[1:]))
