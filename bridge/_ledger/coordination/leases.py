"""Replica membership and leased rows: several bridge processes on one (PostgreSQL) ledger.

Two levels of lease, so that keeping ten thousand handles costs one row update per renewal:

* a **membership** row per replica (``bridge_replicas``): registering bumps the replica's
  incarnation; renewing pushes its expiry forward. Expiry is computed and compared on the
  *database's* clock, so replicas on different hosts need no clock agreement;
* each leased **task** or **run** row names the ``(replica, incarnation)`` holding it. It is
  held while that membership is unexpired; once the membership lapses (or the replica restarts
  under a new incarnation) any live replica may claim it, ``FOR UPDATE SKIP LOCKED``, oldest
  due first.

Fencing lives in :mod:`bridge._ledger.fencing`: writes of observations carry the
membership and are refused when the row has moved on. Claims are per principal: no query here lists
rows of another tenant; only the membership table (infrastructure, no tenant data) is global.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, and_, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import CallView, RunView, TaskView
from bridge._ledger.schema.dialects import db_now_ms
from bridge._ledger.schema.models import Replica
from bridge._ledger.store import (
    DISPATCHES,
    OPEN_RUN,
    OPEN_TASK,
    RUNS,
    TASKS,
    Ledger,
    TenantLedger,
)
from bridge._lifecycle import CallState

REPLICAS = cast(Table, Replica.__table__)  # type: ignore[attr-defined]


def _alive(member_id: Any, incarnation: Any) -> Any:
    """SQL: the membership (id, incarnation) exists and has not expired."""
    return exists().where(
        REPLICAS.c.replica_id == member_id,
        REPLICAS.c.incarnation == incarnation,
        REPLICAS.c.expires_at_ms > db_now_ms(),
    )


def _claimable(table: Table) -> Any:
    """SQL: the row is unowned, or its holder's membership is *seen* gone: expired, or
    superseded by a later incarnation of the same replica.

    Gone takes evidence, not absence. PostgreSQL re-checks a row that another transaction
    changed after a claim began (``FOR UPDATE``) against the claim's own snapshot, where a
    membership registered or bumped after that snapshot is missing or older: read as absence,
    a holder that had just restarted and claimed the row looked gone, and the row was taken
    twice. Membership rows are never deleted (retiring one expires it), so a holder with no
    visible row is one that registered after the snapshot: alive.
    """
    holder = REPLICAS.c.replica_id == table.c.lease_owner
    superseded = REPLICAS.c.incarnation > table.c.lease_incarnation
    lapsed = and_(
        REPLICAS.c.incarnation == table.c.lease_incarnation,
        REPLICAS.c.expires_at_ms <= db_now_ms(),
    )
    return or_(table.c.lease_owner.is_(None), exists().where(holder, or_(superseded, lapsed)))


class ReplicaRegistry:
    """Membership of replicas (ledger-wide; holds no tenant data)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def register(self, replica_id: str, lease_ms: int) -> Membership:
        """Start a new incarnation of ``replica_id``; rows its earlier incarnations held become
        claimable at once (by this incarnation too)."""
        if not replica_id:
            raise ValueError("a replica needs a non-empty id")
        expires = db_now_ms() + lease_ms
        for _ in range(3):
            try:
                with self._ledger.engine.begin() as conn:
                    row = conn.execute(
                        update(REPLICAS)
                        .where(REPLICAS.c.replica_id == replica_id)
                        .values(
                            incarnation=REPLICAS.c.incarnation + 1,
                            expires_at_ms=expires,
                            heartbeat_at_ms=db_now_ms(),
                            started_at_ms=db_now_ms(),
                        )
                        .returning(REPLICAS.c.incarnation)
                    ).first()
                    if row is not None:
                        return Membership(replica_id, int(row.incarnation))
                    conn.execute(
                        insert(REPLICAS).values(
                            replica_id=replica_id,
                            incarnation=1,
                            expires_at_ms=expires,
                            heartbeat_at_ms=db_now_ms(),
                            started_at_ms=db_now_ms(),
                        )
                    )
                    return Membership(replica_id, 1)
            except IntegrityError:
                continue  # another process registered the same id first: bump again
        raise RuntimeError(f"could not register replica {replica_id!r}")

    def renew(self, member: Membership, lease_ms: int) -> bool:
        """Extend an unexpired membership. False once it has lapsed (or a newer incarnation
        of the same replica started): the caller must drop everything it held."""
        with self._ledger.engine.begin() as conn:
            result = conn.execute(
                update(REPLICAS)
                .where(
                    REPLICAS.c.replica_id == member.replica_id,
                    REPLICAS.c.incarnation == member.incarnation,
                    REPLICAS.c.expires_at_ms > db_now_ms(),
                )
                .values(expires_at_ms=db_now_ms() + lease_ms, heartbeat_at_ms=db_now_ms())
            )
            return result.rowcount == 1

    def retire(self, member: Membership) -> None:
        """Clean shutdown: release every row this incarnation holds and end its membership,
        so other replicas take over at once instead of after a lease period."""
        with self._ledger.engine.begin() as conn:
            for table in (TASKS, RUNS):
                conn.execute(
                    update(table)
                    .where(
                        table.c.lease_owner == member.replica_id,
                        table.c.lease_incarnation == member.incarnation,
                    )
                    .values(lease_owner=None, lease_incarnation=None)
                )
            conn.execute(
                update(REPLICAS)
                .where(
                    REPLICAS.c.replica_id == member.replica_id,
                    REPLICAS.c.incarnation == member.incarnation,
                )
                .values(expires_at_ms=0)
            )

    def live_replicas(self) -> list[Membership]:
        with self._ledger.engine.connect() as conn:
            rows = conn.execute(
                select(REPLICAS.c.replica_id, REPLICAS.c.incarnation)
                .where(REPLICAS.c.expires_at_ms > db_now_ms())
                .order_by(REPLICAS.c.replica_id)
            )
            return [Membership(r.replica_id, int(r.incarnation)) for r in rows]


class TenantLeases:
    """Claims of one principal's open tasks and followed runs by a replica incarnation."""

    def __init__(self, tenant: TenantLedger) -> None:
        self._scope = tenant.scope

    def claim_tasks(self, member: Membership, limit: int) -> list[TaskView]:
        """Take up to ``limit`` open tasks nobody live holds, oldest due first.

        Rows another replica is claiming or writing right now are skipped, not waited for.
        Nothing is claimed if ``member`` itself has lapsed.
        """
        rows = self._claim(TASKS, member, limit, OPEN_TASK, TASKS.c.next_poll_due_ms)
        # RETURNING keeps no order: hand them over oldest due first, as they were chosen
        views = TaskView.from_rows(rows)
        views.sort(key=lambda t: (t.next_poll_due_ms or 0, t.ref))
        return views

    def even_share_room(self, member: Membership) -> int:
        """How many more open tasks ``member`` may claim to hold no more than an even share:
        ceil(open tasks / live replicas) minus what it holds (one query, database clock)."""
        live = (
            select(func.count())
            .select_from(REPLICAS)
            .where(REPLICAS.c.expires_at_ms > db_now_ms())
            .scalar_subquery()
        )
        mine = and_(
            TASKS.c.lease_owner == member.replica_id,
            TASKS.c.lease_incarnation == member.incarnation,
        )
        query = select(func.count(), func.count().filter(mine), live).where(
            self._scope.owned(TASKS), *OPEN_TASK
        )
        with self._scope.read_connection() as conn:
            open_tasks, held, replicas = conn.execute(query).one()
        share = -(-int(open_tasks) // max(int(replicas), 1))
        return max(0, share - int(held))

    def claim_runs(self, member: Membership, uhp_servers: list[str], limit: int) -> list[RunView]:
        """Take up to ``limit`` open runs followed on these remote UHP servers."""
        if not uhp_servers:
            return []
        followed = (RUNS.c.uhp_server.in_(uhp_servers), RUNS.c.response_id.is_not(None), OPEN_RUN)
        rows = self._claim(RUNS, member, limit, followed, RUNS.c.updated_at_ms)
        return [RunView.from_row(r) for r in rows]

    def adopt_task(self, member: Membership, task_ref: str) -> bool:
        """Take a task this replica just created, unless another replica got to it first."""
        return self._adopt(TASKS, member, task_ref)

    def adopt_run(self, member: Membership, run_ref: str) -> bool:
        """Take a run this replica just started following, unless another replica holds it."""
        return self._adopt(RUNS, member, run_ref)

    def orphaned_dispatches(self) -> list[CallView]:
        """Dispatches left ``pending``/``sent`` by a replica incarnation that is gone: nobody
        can tell any more whether they reached the server."""
        query = select(DISPATCHES).where(
            self._scope.owned(DISPATCHES),
            DISPATCHES.c.state.in_([CallState.PENDING.value, CallState.SENT.value]),
            DISPATCHES.c.dispatcher_replica.is_not(None),
            ~_alive(DISPATCHES.c.dispatcher_replica, DISPATCHES.c.dispatcher_incarnation),
        )
        with self._scope.read_connection() as conn:
            rows = conn.execute(query.order_by(DISPATCHES.c.created_at_ms, DISPATCHES.c.ref))
            return [CallView.from_row(r) for r in rows]

    def holder(self, table_kind: str, ref: str) -> Membership | None:
        """Who holds a task (``"task"``) or a run (``"run"``), live or not (operators, tests)."""
        table = TASKS if table_kind == "task" else RUNS
        with self._scope.read_connection() as conn:
            row = conn.execute(
                select(table.c.lease_owner, table.c.lease_incarnation).where(
                    self._scope.owned(table), table.c.ref == ref
                )
            ).first()
        if row is None or row.lease_owner is None:
            return None
        return Membership(row.lease_owner, int(row.lease_incarnation))

    def _claim(
        self, table: Table, member: Membership, limit: int, wanted: tuple[Any, ...], order: Any
    ) -> list[Any]:
        if limit <= 0:
            return []
        candidates = (
            select(table.c.ref)
            .where(
                self._scope.owned(table),
                *wanted,
                _claimable(table),
                _alive(member.replica_id, member.incarnation),
            )
            .order_by(order, table.c.ref)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("claimable")
            .prefix_with("MATERIALIZED")
        )
        claim = (
            update(table)
            .where(table.c.ref == candidates.c.ref)
            .values(lease_owner=member.replica_id, lease_incarnation=member.incarnation)
            .returning(*table.c)
        )
        with self._scope.write_connection() as conn:
            return list(conn.execute(claim))

    def _adopt(self, table: Table, member: Membership, ref: str) -> bool:
        with self._scope.write_connection() as conn:
            result = conn.execute(
                update(table)
                .where(
                    self._scope.owned(table),
                    table.c.ref == ref,
                    _claimable(table),
                    _alive(member.replica_id, member.incarnation),
                )
                .values(lease_owner=member.replica_id, lease_incarnation=member.incarnation)
            )
            return result.rowcount == 1
