"""Parked tool calls of an interrupted Agents SDK run: what they wait for, the run state kept
beside the bridged run, and resuming once their tasks settled.

An interruption of a bridged tool (see :mod:`._server`) is not a yes/no question to the human:
the server asks its own typed question (``ParkedCall.inputs``, answered with
``InputRequest.accept`` / ``decline`` / ``cancel``), or the task is simply still working
(``detach``). :func:`resume_when_settled` waits for the tasks and *approves* the SDK items —
"approved" here means "the outcome is ready to be read": the resumed run's ``call_tool``
replays the operation and the model reads the server's result (``declined …`` included).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from agents import Agent, RunConfig, Runner, RunResult, RunState
from agents.items import ToolApprovalItem

from bridge._facade import Bridge
from bridge._ledger.reads.views import TaskView
from bridge._outcomes import InputRequest
from bridge.integrations.openai_agents._run import BridgedRun, current_run, operation_id
from bridge.integrations.openai_agents._watch import Turn, settles_or_asks, unanswered

STATE_NAME = "openai-agents"  # the Run.save_agent_state name of this integration


@dataclass(frozen=True, slots=True)
class ParkedCall:
    """One interrupted bridged tool call: the SDK's item, the bridge operation it started,
    its task (``None``: the server asked before creating one) and its unanswered questions."""

    item: ToolApprovalItem
    operation_id: str
    task: TaskView | None
    inputs: list[InputRequest]

    @property
    def asks(self) -> bool:
        """A question waits for the human: answer ``inputs`` before resuming."""
        return bool(self.inputs)


def _run_and_principal(run: BridgedRun | None) -> tuple[str, str]:
    run = run or current_run()
    if run.principal is None:
        raise ValueError("parking needs the run's principal: bridged_run(ref, principal=...)")
    return run.principal, run.run_ref


def _call_id(item: ToolApprovalItem) -> str | None:
    raw: Any = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return call_id if isinstance(call_id, str) else None


async def parked_calls(
    bridge: Bridge, state: RunState[Any, Any], run: BridgedRun | None = None
) -> list[ParkedCall]:
    """The interruptions of ``state`` that are bridged calls (others are not ours: skipped),
    each with its task and unanswered input requests, read now from the ledger."""
    principal, run_ref = _run_and_principal(run)
    parked = []
    for item in state.get_interruptions():
        call_id = _call_id(item)
        if call_id is None:
            continue
        op_id = operation_id(run_ref, call_id)
        record = await bridge.run(principal, run_ref).operation(op_id)
        if record is None:
            continue  # an interruption of a tool that is not bridged
        task_ref = record.task.ref if record.task is not None else None
        inputs = await unanswered(
            bridge, principal, run_ref, task_ref=task_ref, op_ref=record.op_ref
        )
        parked.append(ParkedCall(item, op_id, record.task, inputs))
    return parked


async def resume_when_settled(
    bridge: Bridge,
    state: RunState[Any, Any],
    run: BridgedRun | None = None,
    *,
    timeout: float | None = None,
    answered_elsewhere: bool = False,
) -> list[ParkedCall]:
    """Wait until each parked call's task settles (terminal or lost) or asks again, approve
    in ``state`` every call whose outcome can now be read, and return those still asking.
    ``answered_elsewhere``: a question does not stop the wait — someone else (a UI task, a
    subscriber) answers it — so every call is waited for until its task settles.

    Then ``await Runner.run(agent, state)`` continues the run (save the state first:
    :func:`save_run_state`). Raises ``TimeoutError`` after ``timeout`` seconds; the tasks go
    on, watched by the bridge."""
    principal, run_ref = _run_and_principal(run)
    still_asking = []
    with anyio.fail_after(timeout):
        for parked in await parked_calls(bridge, state, BridgedRun(run_ref, principal)):
            if parked.asks and not answered_elsewhere:
                still_asking.append(parked)
                continue
            if parked.task is not None:
                turn = await settles_or_asks(
                    bridge, principal, run_ref, parked.task.ref, ignore_asks=answered_elsewhere
                )
                if turn is Turn.ASKS:
                    still_asking.append(parked)
                    continue
            state.approve(parked.item)
    return still_asking


async def save_run_state(
    bridge: Bridge,
    state: RunState[Any, Any],
    run: BridgedRun | None = None,
    *,
    expected_version: int | None = None,
) -> int:
    """Store ``state.to_json()`` beside the bridged run (``Run.save_agent_state``, name
    ``"openai-agents"``); its new version. A harness that dies resumes from the last save."""
    principal, run_ref = _run_and_principal(run)
    return await bridge.run(principal, run_ref).save_agent_state(
        STATE_NAME, state.to_json(), expected_version=expected_version
    )


async def load_run_state(
    bridge: Bridge, agent: Agent[Any], run: BridgedRun | None = None
) -> RunState[Any, Agent[Any]] | None:
    """The run state last saved for this run (``None``: never parked), rebuilt for
    ``agent`` — the same agent (and MCP servers, same order) the run started with."""
    principal, run_ref = _run_and_principal(run)
    saved = await bridge.run(principal, run_ref).agent_state(STATE_NAME)
    if saved is None:
        return None
    return await RunState.from_json(agent, saved.state)


async def run_to_completion(
    bridge: Bridge,
    agent: Agent[Any],
    input: str,
    *,
    ask_human: Callable[[ParkedCall], Awaitable[None]],
    run_config: RunConfig | None = None,
    settle_timeout: float | None = None,
) -> RunResult | list[ParkedCall]:
    """Run ``agent`` inside the current :func:`~._run.bridged_run` until it finishes, saving
    its state at every pause, and resuming a saved state instead of starting over (after a
    restart, ``input`` is ignored).

    At each interruption ``ask_human`` is called for every parked call that asks (it answers
    ``parked.inputs``); calls without a question are waited for (:func:`resume_when_settled`).
    Returns the finished ``RunResult``, or the calls still asking when ``ask_human`` left
    some unanswered (the state is saved: call again once they are answered)."""
    state = await load_run_state(bridge, agent)
    result = None if state is not None else await Runner.run(agent, input, run_config=run_config)
    while True:
        if result is not None:
            if not result.interruptions:
                return result
            state = result.to_state()
            await save_run_state(bridge, state)
        assert state is not None
        for parked in await parked_calls(bridge, state):
            if parked.asks:
                await ask_human(parked)
        still_asking = await resume_when_settled(bridge, state, timeout=settle_timeout)
        await save_run_state(bridge, state)  # the approvals: a restart resumes from here
        if still_asking:
            return still_asking
        result = await Runner.run(agent, state, run_config=run_config)
