"""The bridged run an Agents SDK run belongs to, carried in a context variable.

``Runner.run`` calls tools in tasks it creates from the caller's context, so a value set
around ``Runner.run`` reaches every ``list_tools`` / ``call_tool`` of that run, and two runs
in two tasks never see each other's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from agents.exceptions import UserError


@dataclass(frozen=True, slots=True)
class BridgedRun:
    """The outer run (``run_ref``) whose ledger rows a tool call joins, and whose principal
    it acts for (``None``: the server's own ``principal``)."""

    run_ref: str
    principal: str | None = None


_current: ContextVar[BridgedRun | None] = ContextVar("bridge_openai_agents_run", default=None)


@contextmanager
def bridged_run(run_ref: str, principal: str | None = None) -> Iterator[BridgedRun]:
    """``with bridged_run(run.ref, principal="acme"): await Runner.run(agent, ...)``."""
    run = BridgedRun(run_ref, principal)
    token = _current.set(run)
    try:
        yield run
    finally:
        _current.reset(token)


def current_run_if_any() -> BridgedRun | None:
    """The bridged run this context is in, or ``None`` outside ``bridged_run``."""
    return _current.get()


def current_run() -> BridgedRun:
    run = _current.get()
    if run is None:
        raise UserError(
            "no bridged run: wrap Runner.run in `with bridged_run(run_ref, principal=...)`"
        )
    return run


def operation_id(run_ref: str, call_id: str) -> str:
    """The bridge operation id of one model tool call: a replayed step never calls twice."""
    return f"{run_ref}:{call_id}"
