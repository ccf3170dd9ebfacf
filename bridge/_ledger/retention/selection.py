"""Which runs a prune may remove: finished ones, within a policy's bounds, oldest first.

A run is *finished* when all of these hold, and only then may it go:

* its outer status is terminal (``completed``, ``failed``, ``incomplete``, ``cancelled``): an
  open run (no status yet, or ``in_progress``) stays;
* every call it made is settled (no dispatch ``pending``, ``sent`` or waiting on input);
* no task of it is open (still watched: not terminal, not detached), and every lost task of
  it has been acknowledged by an operator (``operator.acknowledged``): a lost task stays until
  someone has looked at it;
* every call of unknown outcome has a final admission verdict (``admitted`` or
  ``not_admitted``): an unresolved one stays for the host to resolve.

The first three are SQL (:func:`finished`); the verdicts and acknowledgements live in the run's
events, so :func:`unresolved_runs` reads them for the few candidates that have an unknown call
or a lost task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, and_, exists, or_, select
from sqlalchemy.sql.elements import ColumnElement

from bridge import events as ev
from bridge._ledger._base import DISPATCHES, EVENTS, RUNS, TASKS
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.removal import among_values, owned_by
from bridge._lifecycle import Admission, CallState, OuterStatus

TERMINAL_RUN = tuple(s.value for s in OuterStatus if s.is_terminal)
SETTLED_CALL = tuple(s.value for s in CallState if s.is_settled)
_CHECKED: str = ev.CallAdmissionChecked.model_fields["type"].default
_ACKNOWLEDGED: str = ev.OperatorAcknowledged.model_fields["type"].default


def quiet_since(ms: int) -> ColumnElement[bool]:
    """SQL: nothing changed in the run after ``ms`` (its row, and its last event)."""
    later_event = exists().where(
        EVENTS.c.run_ref == RUNS.c.ref, EVENTS.c.seq == RUNS.c.event_seq, EVENTS.c.at_ms > ms
    )
    return and_(RUNS.c.updated_at_ms <= ms, ~later_event)


def finished(principal: str) -> list[ColumnElement[bool]]:
    """SQL: the principal's run is finished as far as its own rows tell (verdicts aside)."""
    live_task = exists().where(
        TASKS.c.principal == principal,
        TASKS.c.run_ref == RUNS.c.ref,
        TASKS.c.terminal_at_ms.is_(None),
        TASKS.c.detached_at_ms.is_(None),
        TASKS.c.lost_reason.is_(None),
    )
    open_call = exists().where(
        DISPATCHES.c.principal == principal,
        DISPATCHES.c.run_ref == RUNS.c.ref,
        DISPATCHES.c.state.not_in(SETTLED_CALL),
    )
    return [
        RUNS.c.principal == principal,
        RUNS.c.status.in_(TERMINAL_RUN),
        ~live_task,
        ~open_call,
    ]


@dataclass(frozen=True, slots=True)
class Position:
    """Where a prune is in a principal's runs (oldest first): the last run it looked at."""

    updated_at_ms: int
    ref: str

    def after(self) -> ColumnElement[bool]:
        return or_(
            RUNS.c.updated_at_ms > self.updated_at_ms,
            and_(RUNS.c.updated_at_ms == self.updated_at_ms, RUNS.c.ref > self.ref),
        )

    def at_or_before(self) -> ColumnElement[bool]:
        return or_(
            RUNS.c.updated_at_ms < self.updated_at_ms,
            and_(RUNS.c.updated_at_ms == self.updated_at_ms, RUNS.c.ref <= self.ref),
        )


def count_boundary(conn: Connection, principal: str, keep: int) -> Position | None:
    """The newest finished run beyond the ``keep`` newest (``None``: there are no more)."""
    row = conn.execute(
        select(RUNS.c.updated_at_ms, RUNS.c.ref)
        .where(RUNS.c.principal == principal, RUNS.c.status.in_(TERMINAL_RUN))
        .order_by(RUNS.c.updated_at_ms.desc(), RUNS.c.ref.desc())
        .offset(keep)
        .limit(1)
    ).first()
    return None if row is None else Position(int(row.updated_at_ms), str(row.ref))


def within_bounds(
    policy: RetentionPolicy, now_ms: int, beyond_count: Position | None
) -> ColumnElement[bool] | None:
    """SQL: the run is old enough for the policy to remove it (``None``: no run is)."""
    chosen: list[ColumnElement[bool]] = []
    age_cutoff = policy.age_cutoff_ms(now_ms)
    if age_cutoff is not None:
        chosen.append(quiet_since(age_cutoff))
    if beyond_count is not None:
        chosen.append(beyond_count.at_or_before())
    if not chosen:
        return None
    return and_(quiet_since(policy.youngest_ms(now_ms)), or_(*chosen))


def candidates(
    principal: str, bound: ColumnElement[bool], after: Position | None, limit: int, lock: bool
) -> Select[Any]:
    """The next ``limit`` finished runs within ``bound`` after ``after``, oldest first. With
    ``lock`` (PostgreSQL) the rows are locked, skipping any a live writer holds now: that run
    is looked at again by the next prune, and no writer ever waits on this one."""
    query = select(RUNS.c.ref, RUNS.c.updated_at_ms).where(*finished(principal), bound)
    if after is not None:
        query = query.where(after.after())
    query = query.order_by(RUNS.c.updated_at_ms, RUNS.c.ref).limit(limit)
    return query.with_for_update(skip_locked=True, of=RUNS) if lock else query


def unresolved_runs(conn: Connection, principal: str, run_refs: Sequence[str]) -> set[str]:
    """Those of ``run_refs`` holding a call of unknown outcome without a final verdict, or a
    lost task nobody acknowledged."""
    return _unknown_without_verdict(conn, principal, run_refs) | _lost_unacknowledged(
        conn, principal, run_refs
    )


def _lost_unacknowledged(conn: Connection, principal: str, run_refs: Sequence[str]) -> set[str]:
    lost = conn.execute(
        select(TASKS.c.ref, TASKS.c.run_ref).where(
            owned_by(TASKS, principal),  # found by the runs, not by walking the principal's
            among_values(conn, TASKS.c.run_ref, run_refs),
            TASKS.c.lost_reason.is_not(None),
        )
    ).all()
    if not lost:
        return set()
    acknowledged: set[str] = set()
    for (payload,) in conn.execute(
        select(EVENTS.c.payload_json).where(
            EVENTS.c.principal == principal,
            EVENTS.c.run_ref.in_({str(r.run_ref) for r in lost}),
            EVENTS.c.type == _ACKNOWLEDGED,
        )
    ):
        data = json.loads(payload)
        if data.get("subject") == "lost_task" and data.get("task_ref"):
            acknowledged.add(str(data["task_ref"]))
    return {str(r.run_ref) for r in lost if str(r.ref) not in acknowledged}


def _unknown_without_verdict(conn: Connection, principal: str, run_refs: Sequence[str]) -> set[str]:
    unknown = conn.execute(
        select(DISPATCHES.c.ref, DISPATCHES.c.run_ref).where(
            owned_by(DISPATCHES, principal),
            among_values(conn, DISPATCHES.c.run_ref, run_refs),
            DISPATCHES.c.state == CallState.UNKNOWN.value,
        )
    ).all()
    if not unknown:
        return set()
    runs = {str(r.run_ref) for r in unknown}
    verdicts: dict[str, Admission] = {}
    checked = conn.execute(
        select(EVENTS.c.payload_json)
        .where(
            EVENTS.c.principal == principal,
            EVENTS.c.run_ref.in_(runs),
            EVENTS.c.type == _CHECKED,
        )
        .order_by(EVENTS.c.run_ref, EVENTS.c.seq)
    )
    for (payload,) in checked:
        data = json.loads(payload)
        verdicts[str(data.get("op_ref"))] = Admission(data["admission"])  # the latest wins
    return {
        str(r.run_ref)
        for r in unknown
        if (verdict := verdicts.get(str(r.ref))) is None or not verdict.is_final
    }
