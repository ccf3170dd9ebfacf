"""The agent's parked state, saved beside the run (``Run.save_agent_state``, name
``"pydantic-ai"``): the message history and which tool call became which bridged operation.

It is written *before* a tool call goes out (the history then ends with the model response
that made the call), so a harness killed at any point reloads the history, replays that
response's calls with the same tool-call ids — the same operation ids — and never calls twice.
Writers compare-and-set on the version: several toolsets of one agent (or a restarted
process) never overwrite each other's entries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from bridge._errors import InvalidTransition
from bridge._facade import Bridge

STATE_NAME = "pydantic-ai"
FORMAT = 1


class CallEntry(TypedDict):
    """One tool call of the agent, as the bridge knows it (bridge references only)."""

    server: str
    tool: str
    operation_id: str
    task_ref: str | None


@dataclass(frozen=True, slots=True)
class SavedRun:
    """The loaded state: the history to resume from and the tool-call id → call map."""

    messages: list[ModelMessage]
    calls: dict[str, CallEntry]
    finished: bool
    version: int


class RunJournal:
    """Loads and updates the saved state of one bridged run (one principal, one run ref)."""

    def __init__(self, bridge: Bridge, principal: str, run_ref: str) -> None:
        self.bridge = bridge
        self.principal = principal
        self.run_ref = run_ref

    async def load(self) -> SavedRun | None:
        view = await self.bridge.run(self.principal, self.run_ref).agent_state(STATE_NAME)
        if view is None:
            return None
        state = view.state
        return SavedRun(
            messages=ModelMessagesTypeAdapter.validate_python(state["messages"]),
            calls=dict(state["calls"]),
            finished=bool(state["finished"]),
            version=view.version,
        )

    async def record_call(
        self, messages: list[ModelMessage], tool_call_id: str, entry: CallEntry
    ) -> None:
        """Before the call is sent: the history that made it, and the call."""

        def change(state: dict[str, Any]) -> None:
            _keep_longer_history(state, messages)
            state["calls"].setdefault(tool_call_id, entry)

        await self._update(change)

    async def record_task(self, tool_call_id: str, task_ref: str) -> None:
        """The call became this task (a bridge reference, never the server's task id)."""

        def change(state: dict[str, Any]) -> None:
            state["calls"][tool_call_id]["task_ref"] = task_ref

        await self._update(change)

    async def record_history(self, messages: list[ModelMessage], *, finished: bool) -> None:
        """After an agent run: its whole history; ``finished``: the output was final."""

        def change(state: dict[str, Any]) -> None:
            state["messages"] = _dump(messages)
            state["finished"] = finished

        await self._update(change)

    async def _update(self, change: Callable[[dict[str, Any]], None]) -> None:
        while True:
            view = await self.bridge.run(self.principal, self.run_ref).agent_state(STATE_NAME)
            state: dict[str, Any] = (
                view.state
                if view is not None
                else {"format": FORMAT, "messages": [], "calls": {}, "finished": False}
            )
            change(state)
            try:
                await self.bridge.run(self.principal, self.run_ref).save_agent_state(
                    STATE_NAME,
                    state,
                    expected_version=view.version if view is not None else 0,
                )
                return
            except InvalidTransition:  # another writer saved first: apply ours to theirs
                continue


def _dump(messages: list[ModelMessage]) -> list[Any]:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return dumped


def _keep_longer_history(state: dict[str, Any], messages: list[ModelMessage]) -> None:
    # Parallel calls of one step carry the same history; a later step's is longer.
    if len(messages) >= len(state["messages"]):
        state["messages"] = _dump(messages)
        state["finished"] = False
