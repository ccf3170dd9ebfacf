"""Watch one bridged task until it settles or asks the host something."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from enum import StrEnum
from typing import cast

from bridge import events as ev
from bridge._facade import Bridge
from bridge._outcomes import InputRequest


class Turn(StrEnum):
    """What a watched task did first."""

    SETTLED = "settled"  # terminal or lost: a result (or its absence) can be read
    ASKS = "asks"  # an unanswered input request waits for the human


async def unanswered(
    bridge: Bridge, principal: str, run_ref: str, *, task_ref: str | None, op_ref: str
) -> list[InputRequest]:
    """The unanswered input requests of one call: its task's, or (MRTR, no task yet) the
    call's own."""
    pending = await bridge.run(principal, run_ref).pending_inputs()
    if task_ref is not None:
        return [r for r in pending if r.task_ref == task_ref]
    return [r for r in pending if r.op_ref == op_ref]


async def settles_or_asks(
    bridge: Bridge, principal: str, run_ref: str, task_ref: str, *, ignore_asks: bool = False
) -> Turn:
    """Block until the task is settled (terminal or lost) or has an unanswered input request
    (``ignore_asks``: until it is settled, someone else answering its questions).

    An input a handler answers (``InputHandlers``) is never seen as asking: only what is still
    pending when we look counts. Every event of the task wakes a fresh read, and the
    subscription replays the run's history first, so nothing committed in between is missed.
    """
    subscription = cast(
        "AsyncGenerator[ev.BridgeEvent, None]", bridge.run(principal, run_ref).subscribe()
    )  # an async generator: closed when we stop reading
    async with aclosing(subscription) as events:
        async for event in events:
            if getattr(event, "task_ref", None) != task_ref:
                continue
            task = await bridge.run(principal, run_ref).task(task_ref)
            if not task.is_open:
                return Turn.SETTLED
            if ignore_asks:
                continue
            op_ref = task.op_ref
            if await unanswered(bridge, principal, run_ref, task_ref=task_ref, op_ref=op_ref):
                return Turn.ASKS
    raise AssertionError("a run's event subscription never ends")  # pragma: no cover
