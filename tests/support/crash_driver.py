"""A calling process that SIGKILLs itself at a chosen write-ahead step (for crash tests).

    python -m tests.support.crash_driver --db PATH --server-url URL --run-ref REF \
        --tool NAME --args JSON --operation-id ID --crash STEP [--answer] [--cancel]

It makes one real bridged call through :class:`TaskRequester`. The crash is injected by
wrapping one ledger method so the process dies exactly before or after that durable step (a
call-path write is staged, then committed by the runner: it dies before staging it, or once it
committed, in its ``settle``); nothing about the bridge itself is altered.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import anyio

from bridge._config import McpServerConfig
from bridge._ledger.commit.group_commit import StagedCommit
from bridge._ledger.dispatches import DispatchWrites
from bridge._ledger.inputs import InputWrites
from bridge._ledger.rounds import CallRoundWrites
from bridge._ledger.store import Ledger
from bridge._ledger.tasks import TaskWrites
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import InputPending, TaskHandle
from tests.support.bridging import FAST

# step name -> (ledger method, die before it runs?)
CRASH_POINTS: dict[str, tuple[str, bool]] = {
    "after_intent": ("stage_dispatch", False),  # committed as sent, request not yet sent
    "before_handle": ("stage_task_created", True),
    "after_handle": ("stage_task_created", False),
    "before_result": ("stage_immediate_result", True),
    "after_answer_recorded": ("record_input_answer", False),
    # MRTR: the InputRequiredResult recorded; the answer recorded, its retry leg not yet sent.
    "after_input_round": ("record_input_round", False),
    "after_call_answer_recorded": ("record_call_input_answer", False),
    # --cancel: the intent recorded, tasks/cancel not yet sent; or its acknowledgement recorded.
    "after_cancel_intent": ("record_cancel_requested", False),
    "after_cancel_acknowledged": ("record_cancel_acknowledged", False),
}


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _inject(step: str) -> None:
    method_name, before = CRASH_POINTS[step]
    # The tenant ledger is composed: patch the aggregate's class that defines the method.
    owner = next(
        aggregate
        for aggregate in (DispatchWrites, TaskWrites, InputWrites, CallRoundWrites)
        if method_name in vars(aggregate)
    )
    original: Callable[..., Any] = getattr(owner, method_name)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if before:
            _die()
        result = original(self, *args, **kwargs)
        if isinstance(result, StagedCommit):
            return dataclasses.replace(result, settle=functools.partial(_settled, result.settle))
        _die()
        return result

    setattr(owner, method_name, wrapper)


def _settled(settle: Callable[[Any], Any], written: Any) -> Any:
    """A staged write's ``settle``: the write committed, the process dies before going on."""
    settled = settle(written)
    _die()
    return settled


async def _run(args: argparse.Namespace) -> None:
    ledger = Ledger.open(args.db)
    servers = [McpServerConfig(name="tasks", url=args.server_url)]
    async with TaskRequester(ledger, servers, scheduler=FAST) as requester:
        outcome = await requester.call_tool(
            "acme",
            args.run_ref,
            "tasks",
            args.tool,
            json.loads(args.args),
            operation_id=args.operation_id,
        )
        if args.answer and isinstance(outcome, TaskHandle):
            tenant = ledger.for_principal("acme")
            with anyio.fail_after(15):
                while not tenant.reads.input_requests(outcome.task_ref):
                    await anyio.sleep(0.02)
            (request,) = tenant.reads.input_requests(outcome.task_ref)
            answer = {"action": "accept", "content": {"approve": True}}
            await requester.answer_input("acme", outcome.task_ref, request.ref, answer)
        if args.answer and isinstance(outcome, InputPending):
            await outcome.inputs[0].accept({"approve": True})
        if args.cancel and isinstance(outcome, TaskHandle):
            await requester.cancel_task("acme", outcome.task_ref)
        print(type(outcome).__name__, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--db", "--server-url", "--run-ref", "--tool", "--args", "--operation-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--crash", choices=sorted(CRASH_POINTS), required=True)
    parser.add_argument("--answer", action="store_true", help="answer the input request")
    parser.add_argument("--cancel", action="store_true", help="cancel the task it made")
    args = parser.parse_args()
    _inject(args.crash)
    anyio.run(_run, args)


if __name__ == "__main__":
    main()
