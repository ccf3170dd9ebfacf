"""The base every ledger aggregate builds on: tables, transactions, principal scoping, and the
event append with the per-run gapless sequence.

Every write runs in one short transaction that (1) reads the current state, (2) asks the pure
state machine in :mod:`bridge._lifecycle` what the observation means, (3) applies it and
(4) appends the events that report it, with the run's next gapless sequence number. Either all
of that commits or none of it does.

SQLAlchemy Core on pooled connections is used rather than an ORM session per call: the ORM
session, not the disk, dominates a durable write on these machines (see the call-path figures
in ``docs/benchmarks.md``). The statements every run, task and event goes through are built
once (building a statement and its cache key cost more than running it), and the event append
runs on the transaction's own DBAPI connection, precompiled like the call path's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from time import perf_counter
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    String,
    Table,
    Update,
    bindparam,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, NoResultFound
from sqlalchemy.sql.elements import ColumnElement

from bridge import events as ev
from bridge._errors import NotFound
from bridge._ledger.attention_events import attention_kind, webhook_id
from bridge._ledger.commit.availability import refuse_if_unavailable
from bridge._ledger.commit.commit_signals import CommitPublisher
from bridge._ledger.commit.driver_sessions import (
    CompiledStatement,
    Cursor,
    DriverSession,
    SqliteDriverSession,
)
from bridge._ledger.commit.group_commit import GroupCommit
from bridge._ledger.commit.latency import record_commit
from bridge._ledger.outcome import DEFAULT_MAX_OUTCOME_BYTES
from bridge._ledger.reads.lean_reads import LeanReads
from bridge._ledger.schema.dialects import LedgerDialect, dialect_of
from bridge._ledger.schema.models import (
    DispatchIntent,
    EventRecord,
    InnerTask,
    InputRequestRow,
    OuterResponse,
    WebhookOutbox,
)
from bridge._lifecycle import OuterStatus

RUNS = cast(Table, OuterResponse.__table__)  # type: ignore[attr-defined]
DISPATCHES = cast(Table, DispatchIntent.__table__)  # type: ignore[attr-defined]
TASKS = cast(Table, InnerTask.__table__)  # type: ignore[attr-defined]
INPUTS = cast(Table, InputRequestRow.__table__)  # type: ignore[attr-defined]
EVENTS = cast(Table, EventRecord.__table__)  # type: ignore[attr-defined]
OUTBOX = cast(Table, WebhookOutbox.__table__)  # type: ignore[attr-defined]

# A task is open (watched) while it has no stored terminal outcome, no lost verdict and was
# not detached: the one definition every query uses.
OPEN_TASK = (
    TASKS.c.terminal_at_ms.is_(None),
    TASKS.c.lost_reason.is_(None),
    TASKS.c.detached_at_ms.is_(None),
)
# A run is open while the harness has not reported it terminal (or not reported it at all).
OPEN_RUN = or_(RUNS.c.status.is_(None), RUNS.c.status == OuterStatus.IN_PROGRESS.value)


# The statements every run, task and event goes through, built once: building a Core statement
# and computing its cache key costs more than running it (~0.2 ms per statement). Their
# parameters are named ``w_*``, apart from any column a statement writes.
def guard_only(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """``column`` as a check on rows another index found, never one to search by (``col || ''``
    has no index): where a planner would rate that column's index as good as the key."""
    return column.concat(literal_column("''", String))


def _row_by_ref(table: Table) -> Select[Any]:
    return select(table).where(
        table.c.principal == bindparam("w_principal"), table.c.ref == bindparam("w_ref")
    )


_ROW_BY_REF = {t.name: _row_by_ref(t) for t in (RUNS, DISPATCHES, TASKS)}


@cache
def events_after_query(limit: int | None) -> Select[Any]:
    """A run's events after a sequence number (built once per limit)."""
    query = (
        select(EVENTS.c.payload_json)
        .where(
            EVENTS.c.principal == bindparam("w_principal"),
            EVENTS.c.run_ref == bindparam("w_ref"),
            EVENTS.c.seq > bindparam("w_after"),
        )
        .order_by(EVENTS.c.seq)
    )
    return query if limit is None else query.limit(limit)


#: The same with the limit as a parameter, for the driver's compiled statement (SQLite renders
#: a LIMIT with an OFFSET: both are parameters, ``w_limit`` and ``w_offset``).
EVENTS_AFTER_LIMITED = (
    events_after_query(None).limit(bindparam("w_limit")).offset(bindparam("w_offset"))
)


_ROW_BY_REF_FOR_UPDATE = {name: q.with_for_update() for name, q in _ROW_BY_REF.items()}
_NEXT_EVENT_SEQ = (
    update(RUNS)
    .where(RUNS.c.principal == bindparam("w_principal"), RUNS.c.ref == bindparam("w_ref"))
    .values(event_seq=RUNS.c.event_seq + literal_column("1"))
    .returning(RUNS.c.event_seq)
)
_EVENT_COLUMNS = ("principal", "run_ref", "seq", "type", "task_ref", "payload_json", "at_ms")
_INSERT_EVENT = insert(EVENTS).values(
    {c: bindparam(f"w_{c}", type_=EVENTS.c[c].type) for c in _EVENT_COLUMNS}
)
_OUTBOX_COLUMNS = ("id", "principal", "run_ref", "seq", "kind", "created_at_ms", "attempts")
_INSERT_OUTBOX = insert(OUTBOX).values(
    {
        **{c: bindparam(f"w_{c}", type_=OUTBOX.c[c].type) for c in _OUTBOX_COLUMNS},
        "next_attempt_ms": bindparam("w_created_at_ms", type_=OUTBOX.c.next_attempt_ms.type),
    }
)


class EventAppend:
    """The statements of an event append, compiled once for the ledger's driver session:
    every run's log grows through them (:meth:`TenantScope._append`), and an event that needs a
    person also gets its webhook outbox row."""

    def __init__(self, session: DriverSession) -> None:
        self.next_seq = session.compile(_NEXT_EVENT_SEQ)
        self.insert_event = session.compile(_INSERT_EVENT)
        self.insert_outbox = session.compile(_INSERT_OUTBOX)


def written_columns(table: Table) -> list[str]:
    """The columns an insert writes: all of the table's but a key the database generates."""
    generated = table.autoincrement_column
    return [c.name for c in table.columns if c is not generated]


def bind_columns(table: Table, names: list[str]) -> dict[str, Any]:
    """A bound parameter per column name, typed as the column (for precompiled inserts)."""
    return {name: bindparam(name, type_=table.c[name].type) for name in names}


def null_row(table: Table) -> dict[str, Any]:
    """Every written column of ``table`` set to NULL: the base a full row is written over."""
    return dict.fromkeys(written_columns(table))


Clock = Callable[[], int]
EventListener = Callable[[str, str, int], None]  # (principal, run_ref, last seq committed)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def scrub_raw_id(payload_json: str, raw_id: str, ref: str) -> str:
    """Replace a raw id inside a JSON document's strings by ``[ref]`` (keeps it valid JSON)."""
    needle = json.dumps(raw_id)[1:-1]  # the id as it appears inside a JSON string
    return payload_json.replace(needle, f"[{ref}]") if needle else payload_json


T = TypeVar("T")


class _Appended:
    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}
        self.outboxed: set[str] = set()  # principals whose webhook outbox got a row

    def note(self, principal: str, run_ref: str, seq: int) -> None:
        self._last[(principal, run_ref)] = seq

    def items_last(self) -> list[tuple[str, str, int]]:
        return [(p, r, s) for (p, r), s in self._last.items()]


class Tx:
    """One write transaction: the events appended in it, and where its precompiled statements
    (:meth:`run`, :meth:`one`) execute.

    A transaction opened through Core (:meth:`LedgerCore._write`) has its ``conn`` for Core
    statements, and runs precompiled ones on that connection's own DBAPI cursor (or on the
    cursor its executor gives, ``through``). One of the driver session
    (:meth:`LedgerCore._driver_write`) has no ``conn``: precompiled statements only.
    """

    conn: Connection

    def __init__(
        self,
        statements: Cursor | None = None,
        *,
        through: Callable[[Connection], Cursor | None] | None = None,
    ) -> None:
        self.appended = _Appended()
        self._statements = statements  # given: the driver session's (not closed here)
        self._owned: Cursor | None = None
        self._through = through

    def run(self, statement: CompiledStatement, params: dict[str, Any]) -> int:
        """Execute a precompiled statement: the rows it affected."""
        return self._execute(lambda cursor: cursor.run(statement, params), statement, params)

    def scalar(self, statement: CompiledStatement, params: dict[str, Any]) -> Any:
        """The first column of its first row (None without a row)."""
        return self._execute(lambda cursor: cursor.scalar(statement, params), statement, params)

    def one(self, statement: CompiledStatement, params: dict[str, Any]) -> dict[str, Any] | None:
        """Its first row, by column name (None without a row)."""
        return self._execute(lambda cursor: cursor.one(statement, params), statement, params)

    def _execute(
        self, call: Callable[[Cursor], T], statement: CompiledStatement, params: dict[str, Any]
    ) -> T:
        if self._statements is not None:
            return call(self._statements)
        if self._owned is None and self._through is not None:
            self._owned = self._through(self.conn)
        if self._owned is None:
            driver = self.conn.connection.driver_connection
            assert driver is not None  # a transaction holds a live connection
            self._owned = Cursor(driver.cursor())
        try:
            return call(self._owned)
        except Exception as exc:
            # Raised as SQLAlchemy would have raised it (LedgerUnavailable for a database that
            # cannot take writes, a DBAPIError otherwise): one contract whichever way it ran.
            driver_error = self.conn.dialect.loaded_dbapi.Error
            if not isinstance(exc, driver_error):
                raise
            refuse_if_unavailable(exc)
            raise DBAPIError.instance(statement.sql, params, exc, driver_error) from exc

    def close_cursor(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None


class LedgerCore:
    """The engine, the dialect, the clock, commit listeners and the two kinds of transaction.

    ``driver_session``: where the precompiled statements run (default: the dialect's, on the
    driver's own connections; the tests pass their SQLAlchemy Core reference).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock = wall_clock_ms,
        max_outcome_bytes: int = DEFAULT_MAX_OUTCOME_BYTES,
        driver_session: DriverSession | None = None,
    ) -> None:
        self.engine = engine
        self.dialect: LedgerDialect = dialect_of(engine)
        self.clock = clock
        self.max_outcome_bytes = max_outcome_bytes
        self._listeners: list[EventListener] = []
        self._outbox_listeners: list[Callable[[str], None]] = []
        if self.dialect.name == "postgresql":  # other processes' waiters hear commits by NOTIFY
            self._listeners.append(CommitPublisher(engine))
        self._driver = driver_session or self.dialect.driver_session(engine)
        sqlite = self._driver if isinstance(self._driver, SqliteDriverSession) else None
        # Call-path commits of concurrent callers in worker threads share transactions; a lone
        # statement on SQLite commits in autocommit.
        pipelined = self._driver.commit_pipelined if self._driver.pipelines else None
        self.group_commit: GroupCommit[Cursor] = GroupCommit(
            self._driver.transaction,
            pipelined,
            run_alone=sqlite.run_alone if sqlite is not None else None,
        )
        # Event appends run where the driver session runs statements, in a transaction opened
        # through Core too (``Tx.through``).
        self._event_append = EventAppend(self._driver)
        # SQLite: the reads a waiting step and a forwarder make on every wake, on the driver.
        self.lean_reads: LeanReads | None = None
        if sqlite is not None:
            tasks = _ROW_BY_REF[TASKS.name]
            self.lean_reads = LeanReads(
                sqlite, tasks, events_after_query(None), EVENTS_AFTER_LIMITED
            )

    def close(self) -> None:
        self._driver.close()
        self.engine.dispose()

    def add_listener(self, listener: EventListener) -> None:
        """Called after each commit that appended events (in the committing thread)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: EventListener) -> None:
        self._listeners.remove(listener)

    def add_outbox_listener(self, listener: Callable[[str], None]) -> None:
        """Called with the principal after each commit that wrote a webhook outbox row (in the
        committing thread): the deliverer pushes it at once instead of at its next look."""
        self._outbox_listeners.append(listener)

    def remove_outbox_listener(self, listener: Callable[[str], None]) -> None:
        self._outbox_listeners.remove(listener)

    def _notify(self, principal: str, run_ref: str, seq: int, *, announced: bool = False) -> None:
        """Call the listeners; ``announced``: the commit announced itself to other processes
        (a ``NOTIFY`` in its own transaction), so the publisher is skipped."""
        for listener in list(self._listeners):
            if announced and isinstance(listener, CommitPublisher):
                continue
            listener(principal, run_ref, seq)

    def _publishes(self) -> bool:
        """Whether this ledger announces its commits to other processes (PostgreSQL)."""
        return any(isinstance(listener, CommitPublisher) for listener in self._listeners)

    def others_committed(self) -> bool | None:
        """SQLite: whether a connection other than this thread's writing one committed since
        this thread last asked (another process, mostly: this process's commits announce
        themselves to the listeners). None where the ledger cannot tell that way."""
        if isinstance(self._driver, SqliteDriverSession):
            return self._driver.others_committed()
        return None

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        tx = Tx(through=self._driver.cursor_on)
        started = perf_counter()
        with self.engine.begin() as conn:
            tx.conn = conn
            try:
                yield tx
            finally:
                tx.close_cursor()
        record_commit("core", started)
        self._notify_appended(tx)

    @contextmanager
    def _driver_write(self) -> Iterator[Tx]:
        """A write transaction of the driver session (precompiled statements only): a short
        transaction there costs a fraction of one opened through Core."""
        started = perf_counter()
        with self._driver.transaction() as cursor:
            tx = Tx(cursor)
            yield tx
        record_commit("driver", started)
        self._notify_appended(tx)

    def _notify_appended(self, tx: Tx) -> None:
        for principal, run_ref, seq in tx.appended.items_last():
            self._notify(principal, run_ref, seq)
        for principal in tx.appended.outboxed:
            for listener in list(self._outbox_listeners):
                listener(principal)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            # A plain deferred BEGIN on SQLite: readers must not queue behind the write lock.
            yield conn.execution_options(bridge_read=True)


def owned_by(table: Table, principal: str) -> ColumnElement[bool]:
    """SQL: the row belongs to ``principal`` (every query on tenant data carries it)."""
    return table.c.principal == principal


class LedgerScope:
    """The protected scope API of one principal, for the ledger's own modules
    (:mod:`bridge._ledger.coordination.leases`), not for applications: the principal filter and the
    two
    kinds of transaction, without the ledger's internals."""

    __slots__ = ("_ledger", "principal")

    def __init__(self, ledger: LedgerCore, principal: str) -> None:
        self._ledger = ledger
        self.principal = principal

    def owned(self, table: Table) -> ColumnElement[bool]:
        """SQL: the row belongs to this principal."""
        return owned_by(table, self.principal)

    def read_connection(self) -> AbstractContextManager[Connection]:
        """A read-only transaction (on SQLite a deferred BEGIN: never waits for writers)."""
        return self._ledger._read()

    def write_connection(self) -> AbstractContextManager[Connection]:
        """A write transaction that appends no events."""
        return self._ledger.engine.begin()


class TenantScope:
    """One principal's view of the ledger; each aggregate (reads, runs, calls, tasks, inputs,
    ...) is one object over it. :attr:`scope` is the API the ledger's other modules use."""

    def __init__(self, ledger: LedgerCore, principal: str) -> None:
        self._ledger = ledger
        self.principal = principal

    @property
    def now(self) -> int:
        return self._ledger.clock()

    @property
    def group_commit(self) -> GroupCommit[Cursor]:
        """Where staged call-path writes (``stage_…``) are committed together with concurrent
        callers' (the ledger's one group commit; not tenant-specific: each write is)."""
        return self._ledger.group_commit

    @property
    def scope(self) -> LedgerScope:
        """The protected scope API (for :mod:`bridge._ledger.coordination.leases`)."""
        return LedgerScope(self._ledger, self.principal)

    # -- for the aggregates ----------------------------------------------------------------
    def _owned(self, table: Table) -> ColumnElement[bool]:
        return owned_by(table, self.principal)

    def _read(self) -> AbstractContextManager[Connection]:
        return self._ledger._read()

    def _write(self) -> AbstractContextManager[Tx]:
        return self._ledger._write()

    def _one(self, conn: Connection, table: Table, ref: str, kind: str, lock: bool) -> Any:
        locked = lock and self._ledger.dialect.locks_rows_for_update
        query = (_ROW_BY_REF_FOR_UPDATE if locked else _ROW_BY_REF)[table.name]
        row = conn.execute(query, {"w_principal": self.principal, "w_ref": ref}).first()
        if row is None:
            raise NotFound(kind, ref)
        return row

    def _locked_row(self, tx: Tx, table: Table, ref: str, kind: str) -> Any:
        """This principal's row ``ref`` of ``table``, locked for the transaction where the
        database locks rows, read by a precompiled statement (``NotFound`` if there is none)."""
        locks = self._ledger.dialect.locks_rows_for_update
        query = (_ROW_BY_REF_FOR_UPDATE if locks else _ROW_BY_REF)[table.name]
        statement = self._ledger._driver.compiled(query)
        columns = tx.one(statement, {"w_principal": self.principal, "w_ref": ref})
        if columns is None:
            raise NotFound(kind, ref)
        return SimpleNamespace(**columns)

    def _update_row(self, tx: Tx, table: Table, ref: str, /, **values: Any) -> None:
        """Set ``values`` on this principal's row ``ref`` of ``table``: an UPDATE of exactly
        those columns (each bound as ``v_<column>``), compiled once per set of columns."""
        names = tuple(sorted(values))

        def build() -> Update:
            owned = (
                table.c.principal == bindparam("w_principal"),
                table.c.ref == bindparam("w_ref"),
            )
            bound = {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in names}
            return update(table).where(*owned).values(bound)

        statement = self._ledger._driver.compiled_as((table.name, names), build)
        changes = {f"v_{name}": value for name, value in values.items()}
        tx.run(statement, {"w_principal": self.principal, "w_ref": ref, **changes})

    def _run_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, RUNS, ref, "run", lock)

    def _dispatch_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, DISPATCHES, ref, "dispatch", lock)

    def _task_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, TASKS, ref, "task", lock)

    def _append_task_event(
        self, tx: Tx, row: Any, event_type: type[ev.TaskEventLike], **fields: Any
    ) -> ev.BridgeEvent:
        """Append an event about the task in ``row`` (its reference, tool and server filled in;
        its raw id scrubbed from whatever the server said)."""
        event = event_type(
            task_ref=row.ref,
            tool=row.tool_name,
            server=row.server_name or row.server_endpoint,
            **fields,
        )
        return self._append(tx, row.run_ref, cast(ev.BridgeEvent, event), raw_task_id=row.task_id)

    def _append(
        self,
        tx: Tx,
        run_ref: str,
        event: ev.BridgeEvent,
        *,
        raw_task_id: str | None = None,
    ) -> ev.BridgeEvent:
        """Append ``event`` to the run's log with the next gapless sequence number.

        The increment of the run's counter takes the run row's write lock, so concurrent
        writers on one run serialise here and the sequence has no gaps and no duplicates.
        Server-supplied text (messages, results, input requests) may quote the raw task id;
        every occurrence is replaced by the task's reference before the event is stored.
        """
        statements = self._ledger._event_append
        run = {"w_principal": self.principal, "w_ref": run_ref}
        seq = tx.scalar(statements.next_seq, run)
        if seq is None:
            raise NoResultFound("No row was found when one was required")
        stamped = event.model_copy(update={"seq": seq, "run_ref": run_ref, "at_ms": self.now})
        payload = stamped.model_dump_json()
        task_ref = getattr(stamped, "task_ref", None)
        if raw_task_id and task_ref:
            scrubbed = scrub_raw_id(payload, raw_task_id, task_ref)
            if scrubbed != payload:
                payload, stamped = scrubbed, ev.parse_event(scrubbed)
        row = {
            "w_principal": self.principal,
            "w_run_ref": run_ref,
            "w_seq": seq,
            "w_type": stamped.type,
            "w_task_ref": task_ref,
            "w_payload_json": payload,
            "w_at_ms": stamped.at_ms,
        }
        tx.run(statements.insert_event, row)
        kind = attention_kind(stamped)
        if kind is not None:  # in this transaction: the item exists only if its push does
            item = {
                "w_id": webhook_id(run_ref, seq),
                "w_principal": self.principal,
                "w_run_ref": run_ref,
                "w_seq": seq,
                "w_kind": kind,
                "w_created_at_ms": stamped.at_ms,
                "w_attempts": 0,
            }
            tx.run(statements.insert_outbox, item)
            tx.appended.outboxed.add(self.principal)
        tx.appended.note(self.principal, run_ref, seq)
        return stamped
