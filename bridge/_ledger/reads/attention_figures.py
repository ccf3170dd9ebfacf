"""How many things wait on a person in one principal's ledger, read in one query (metrics).

The figures are counts of rows, so any process reading the ledger sees the same numbers: a
scrape of one replica tells the state of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from bridge._ledger._base import DISPATCHES, EVENTS, INPUTS, OPEN_TASK, TASKS, owned_by
from bridge._ledger.attention_events import (
    ANOMALY,
    INPUT_WAITING,
    LOST_TASK,
    UNKNOWN_OUTCOME,
)
from bridge._lifecycle import CallState


@dataclass(frozen=True, slots=True)
class AttentionFigures:
    """``by_kind``: open input requests, calls of unknown outcome, lost tasks (a lost verdict
    not superseded by a terminal status), anomalies recorded. ``oldest_input_ms``: when the
    oldest open input request was first seen (``None``: none waits)."""

    by_kind: dict[str, int]
    oldest_input_ms: int | None


def _open_inputs(principal: str) -> tuple[Any, ...]:
    """SQL: unanswered, undeclined input requests of an open task, or of a call (MRTR) that
    waits on its inputs."""
    open_task = select(TASKS.c.ref).where(owned_by(TASKS, principal), *OPEN_TASK)
    waiting_call = select(DISPATCHES.c.ref).where(
        owned_by(DISPATCHES, principal),
        DISPATCHES.c.state == CallState.INPUT_REQUIRED.value,
    )
    return (
        owned_by(INPUTS, principal),
        INPUTS.c.answered_at_ms.is_(None),
        INPUTS.c.declined_at_ms.is_(None),
        INPUTS.c.task_ref.in_(open_task) | INPUTS.c.op_ref.in_(waiting_call),
    )


def attention_figures(conn: Any, principal: str) -> AttentionFigures:
    inputs = _open_inputs(principal)
    waiting = select(func.count()).select_from(INPUTS).where(*inputs).scalar_subquery()
    oldest = select(func.min(INPUTS.c.first_seen_ms)).where(*inputs).scalar_subquery()
    unknown = (
        select(func.count())
        .select_from(DISPATCHES)
        .where(
            owned_by(DISPATCHES, principal),
            DISPATCHES.c.state == CallState.UNKNOWN.value,
        )
        .scalar_subquery()
    )
    lost = (
        select(func.count())
        .select_from(TASKS)
        .where(
            owned_by(TASKS, principal),
            TASKS.c.lost_reason.is_not(None),
            TASKS.c.terminal_at_ms.is_(None),
        )
        .scalar_subquery()
    )
    anomalies = (
        select(func.count())
        .select_from(EVENTS)
        .where(owned_by(EVENTS, principal), EVENTS.c.type == "anomaly")
        .scalar_subquery()
    )
    row = conn.execute(select(waiting, oldest, unknown, lost, anomalies)).one()
    by_kind = {
        INPUT_WAITING: int(row[0]),
        UNKNOWN_OUTCOME: int(row[2]),
        LOST_TASK: int(row[3]),
        ANOMALY: int(row[4]),
    }
    return AttentionFigures(by_kind, None if row[1] is None else int(row[1]))
