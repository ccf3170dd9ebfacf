"""The harness side of a parked graph: wait until its parked tasks can go on, then resume."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from langgraph.types import Command, Interrupt

from bridge import events as ev
from bridge.integrations.langgraph._payloads import LOOK_AGAIN, PARKED_TASK

if TYPE_CHECKING:
    from bridge._facade import Bridge


def bridge_interrupts(interrupts: Sequence[Interrupt], kind: str) -> dict[str, dict[str, str]]:
    """The interrupts of one kind (``PARKED_TASK`` / ``ASKED_INPUT``), by interrupt id."""
    return {
        i.id: i.value
        for i in interrupts
        if isinstance(i.value, dict) and i.value.get("kind") == kind
    }


async def when_settled(
    bridge: Bridge, principal: str, interrupts: Sequence[Interrupt], *, timeout: float
) -> Command[None]:
    """Wait until every task parked by these interrupts settled (terminal, or lost: that
    counts as settled and the model is told so) or asks for input; the ``Command`` that
    resumes them. Woken by the bridge's events (no polling); ``TimeoutError`` after
    ``timeout``. Interrupts that ask for input are answered with
    :func:`~bridge.integrations.langgraph.answer` instead."""
    parked = bridge_interrupts(interrupts, PARKED_TASK)
    if len(parked) != len(interrupts):
        raise ValueError("only interrupts of parked tasks settle by themselves; answer the rest")
    by_run: dict[str, set[str]] = {}
    for payload in parked.values():
        by_run.setdefault(payload["run_ref"], set()).add(payload["task_ref"])
    async with asyncio.timeout(timeout):
        for run_ref, task_refs in by_run.items():
            await _until_ready(bridge, principal, run_ref, task_refs)
    return Command(resume={interrupt_id: LOOK_AGAIN for interrupt_id in parked})


async def _until_ready(bridge: Bridge, principal: str, run_ref: str, task_refs: set[str]) -> None:
    if await _ready(bridge, principal, run_ref, task_refs):
        return
    # From the run's first event: whatever happened since the check above is replayed.
    async for event in bridge.run(principal, run_ref).subscribe():
        relevant = event.is_final or isinstance(event, ev.InputRequiredEvent)
        if relevant and await _ready(bridge, principal, run_ref, task_refs):
            return


async def _ready(bridge: Bridge, principal: str, run_ref: str, task_refs: set[str]) -> bool:
    asking = {request.task_ref for request in await bridge.run(principal, run_ref).pending_inputs()}
    for task_ref in task_refs - asking:
        if (await bridge.run(principal, run_ref).task(task_ref)).is_open:
            return False
    return True
