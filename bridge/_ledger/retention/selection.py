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

The first three are SQL (:func:`finished`); the last two too (:func:`unresolved_runs`): a
final verdict and an acknowledgement are events, and their time is also set on the call's or the
task's row (``resolved_at_ms``, ``acknowledged_at_ms``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, and_, exists, or_, select, union
from sqlalchemy.sql.elements import ColumnElement

from bridge._ledger._base import DISPATCHES, EVENTS, RUNS, TASKS
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.removal import among_values, owned_by
from bridge._lifecycle import CallState, OuterStatus

TERMINAL_RUN = tuple(s.value for s in OuterStatus if s.is_terminal)
SETTLED_CALL = tuple(s.value for s in CallState if s.is_settled)


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
    lost task nobody acknowledged (found by the runs, not by walking the principal's rows)."""
    lost = select(TASKS.c.run_ref).where(
        owned_by(TASKS, principal),
        among_values(conn, TASKS.c.run_ref, run_refs),
        TASKS.c.lost_reason.is_not(None),
        TASKS.c.acknowledged_at_ms.is_(None),
    )
    unknown = select(DISPATCHES.c.run_ref).where(
        owned_by(DISPATCHES, principal),
        among_values(conn, DISPATCHES.c.run_ref, run_refs),
        DISPATCHES.c.state == CallState.UNKNOWN.value,
        DISPATCHES.c.resolved_at_ms.is_(None),
    )
    return {str(ref) for (ref,) in conn.execute(union(lost, unknown))}
