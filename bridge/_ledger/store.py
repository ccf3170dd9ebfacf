"""The ledger: the only code that writes the bridge tables.

:class:`Ledger` owns the engine and the dialect; every read and write goes through a
:class:`TenantLedger`, bound to one principal/tenant, whose queries filter on that principal,
so another tenant's rows are simply not there.

A tenant ledger is composed, one object per aggregate over the same scope (principal, ledger;
:mod:`bridge._ledger._base`): ``tenant.reads`` (:mod:`~bridge._ledger.reads.queries`), then
writes that get the reads passed in beside them, never inherit them: ``runs``, ``calls`` (the
call path and admissions, :mod:`~bridge._ledger.dispatches`), ``tasks``, ``inputs``, ``rounds``
(MRTR), ``agent_states``, ``gateway_handles``, ``operator``, ``attention``, ``outbox``.
"""

from __future__ import annotations

import sqlite3
from functools import cached_property
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from bridge._errors import LedgerUnavailable
from bridge._ledger._base import (
    DISPATCHES,
    EVENTS,
    INPUTS,
    OPEN_RUN,
    OPEN_TASK,
    RUNS,
    TASKS,
    Clock,
    EventListener,
    LedgerCore,
    TenantScope,
    scrub_raw_id,
    wall_clock_ms,
)
from bridge._ledger.agent_states import AgentStateWrites
from bridge._ledger.call_path import CallPathStatements
from bridge._ledger.commit.availability import first_line, waiting_for_the_lock
from bridge._ledger.dispatches import DispatchWrites
from bridge._ledger.gateway_handles import GatewayHandleWrites
from bridge._ledger.inputs import InputWrites, input_request_digest
from bridge._ledger.operator_acts import OperatorWrites
from bridge._ledger.outcome import DEFAULT_MAX_OUTCOME_BYTES
from bridge._ledger.reads.attention import AttentionReads
from bridge._ledger.reads.queries import TenantQueries
from bridge._ledger.rounds import CallRoundWrites
from bridge._ledger.runs import RunWrites
from bridge._ledger.schema import migrate
from bridge._ledger.schema.dialects import SqliteSynchronous
from bridge._ledger.schema.engine import create_ledger_engine
from bridge._ledger.tasks import ObservationOutcome, TaskWrites
from bridge._ledger.webhook_outbox import WebhookOutboxWrites

__all__ = [
    "DISPATCHES",
    "EVENTS",
    "INPUTS",
    "OPEN_RUN",
    "OPEN_TASK",
    "RUNS",
    "TASKS",
    "Clock",
    "EventListener",
    "Ledger",
    "ObservationOutcome",
    "TenantLedger",
    "input_request_digest",
    "scrub_raw_id",
    "wall_clock_ms",
]


class Ledger(LedgerCore):
    """Owns the engine; hands out principal-scoped views with :meth:`for_principal`.

    ``ledger.dialect`` (:mod:`bridge._ledger.schema.dialects`) says what differs per database, e.g.
    ``ledger.dialect.runs_calls_inline``: whether ledger calls from async code run inline.
    """

    @cached_property
    def _hot(self) -> CallPathStatements:
        """The call path's statements, compiled once for this ledger's driver session."""
        return CallPathStatements(self._driver)

    @classmethod
    def open(
        cls,
        url: str | Path | None = None,
        *,
        upgrade: bool = True,
        clock: Clock = wall_clock_ms,
        max_outcome_bytes: int = DEFAULT_MAX_OUTCOME_BYTES,
        sqlite_synchronous: SqliteSynchronous = "NORMAL",
    ) -> Ledger:
        """Open (and by default migrate) the ledger at ``url``: a SQLAlchemy URL or a file path.

        ``sqlite_synchronous``: SQLite's ``PRAGMA synchronous``. ``"NORMAL"`` (the default,
        with WAL) survives a process crash, but an OS crash or power loss may drop the newest
        commits; ``"FULL"`` syncs every commit to disk and survives those too, at a higher
        cost per commit. PostgreSQL ignores it (its commits are durable when they return).

        Raises :class:`~bridge.errors.LedgerUnavailable` (its message one line, without the
        URL's password) when the database cannot be opened: a missing directory, an
        unreadable file or one that is not a database, a server refusing the connection.
        """
        engine = create_ledger_engine(url, sqlite_synchronous=sqlite_synchronous)
        try:
            if upgrade:
                with waiting_for_the_lock():  # another process may be migrating right now
                    migrate.upgrade(engine)
            else:
                engine.connect().close()  # fail here, not on the first call, if it cannot open
        except (DBAPIError, sqlite3.Error, OSError, LedgerUnavailable) as exc:
            engine.dispose()
            raise LedgerUnavailable(f"cannot open {engine.url!r}: {first_line(exc)}") from exc
        return cls(engine, clock=clock, max_outcome_bytes=max_outcome_bytes)

    @cached_property
    def _tenants(self) -> dict[str, TenantLedger]:
        return {}

    def for_principal(self, principal: str) -> TenantLedger:
        """This ledger scoped to one principal: every read and write through it is theirs."""
        if not principal:
            raise ValueError("a principal/tenant is required for every ledger access")
        tenant = self._tenants.get(principal) or TenantLedger(self, principal)
        if len(self._tenants) < 1024:  # kept (no state in it): not rebuilt for every poll and call
            self._tenants[principal] = tenant
        return tenant


class TenantLedger(TenantScope):
    """All ledger operations for one principal/tenant, one object per aggregate."""

    def __init__(self, ledger: Ledger, principal: str) -> None:
        super().__init__(ledger, principal)
        self.reads = reads = TenantQueries(ledger, principal)
        self.runs = runs = RunWrites(reads)
        self.calls = DispatchWrites(reads, runs, ledger._hot)
        self.inputs = inputs = InputWrites(reads)
        self.tasks = TaskWrites(reads, inputs)
        self.rounds = CallRoundWrites(reads)
        self.agent_states = AgentStateWrites(reads)
        self.gateway_handles = GatewayHandleWrites(reads)
        self.operator = OperatorWrites(reads)
        self.attention = AttentionReads(reads)
        self.outbox = WebhookOutboxWrites(reads)
