"""The ledger: the only code that writes the bridge tables.

Every write runs in one short transaction that (1) reads the current state, (2) asks the pure
state machine in :mod:`bridge.lifecycle` what the observation means, (3) applies it and
(4) appends the events that report it, with the run's next gapless sequence number. Either all
of that commits or none of it does.

Every read and write goes through a :class:`TenantLedger`, bound to one principal/tenant; its
queries filter on that principal, so another tenant's rows are simply not there.

SQLAlchemy Core on pooled connections is used rather than an ORM session per call: the ORM
session, not the disk, dominates a durable write on these machines (see PERF-NOTES).
"""

from __future__ import annotations

import json
import time
from binascii import b2a_base64
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from os import urandom
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, NoReturn, cast

import pydantic_core
from sqlalchemy import Connection, Engine, Table, and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from bridge import events as ev
from bridge.errors import (
    ConflictingIds,
    DuplicateTaskHandle,
    InputAlreadyAnswered,
    InvalidTransition,
    NotFound,
    OperationReused,
    UnknownInputKey,
)
from bridge.ids import (
    DISPATCH_PREFIX,
    INPUT_PREFIX,
    RUN_PREFIX,
    TASK_PREFIX,
    canonical_json,
    new_ref,
    sha256_hex,
)
from bridge.ledger import migrate
from bridge.ledger.engine import SqliteSynchronous, create_ledger_engine, is_sqlite
from bridge.ledger.fencing import Membership, check_lease
from bridge.ledger.hotpath import CallPathStatements, Cursor, DriverSession
from bridge.ledger.models import (
    DispatchIntent,
    EventRecord,
    InnerTask,
    InputRequest,
    OuterResponse,
)
from bridge.ledger.outcome import DEFAULT_MAX_OUTCOME_BYTES, bound_json
from bridge.ledger.views import (
    DispatchView,
    InputRequestView,
    RunView,
    TaskObservation,
    TaskView,
)
from bridge.lifecycle import (
    Change,
    Decision,
    DispatchState,
    LostReason,
    OuterStatus,
    TaskStatus,
    decide_outer,
    decide_task,
    may_advance_dispatch,
    may_mark_lost,
)

RUNS = cast(Table, OuterResponse.__table__)  # type: ignore[attr-defined]
DISPATCHES = cast(Table, DispatchIntent.__table__)  # type: ignore[attr-defined]
TASKS = cast(Table, InnerTask.__table__)  # type: ignore[attr-defined]
INPUTS = cast(Table, InputRequest.__table__)  # type: ignore[attr-defined]
EVENTS = cast(Table, EventRecord.__table__)  # type: ignore[attr-defined]

# A task is open (watched) while it has no stored terminal outcome, no lost verdict and was
# not detached: the one definition every query uses.
OPEN_TASK = (
    TASKS.c.terminal_at_ms.is_(None),
    TASKS.c.lost_reason.is_(None),
    TASKS.c.detached_at_ms.is_(None),
)
# A run is open while the harness has not reported it terminal (or not reported it at all).
OPEN_RUN = or_(RUNS.c.status.is_(None), RUNS.c.status == OuterStatus.IN_PROGRESS.value)

_DISPATCH_INSERT_COLUMNS = [
    "ref",
    "principal",
    "run_ref",
    "operation_id",
    "server_endpoint",
    "server_name",
    "tool_name",
    "args_digest",
    "state",
    "result_truncated",
    "trace_id",
    "span_id",
    "dispatcher_replica",
    "dispatcher_incarnation",
    "created_at_ms",
    "updated_at_ms",
]
_TASK_INSERT_COLUMNS = [
    "ref",
    "principal",
    "run_ref",
    "op_ref",
    "response_id",
    "session_id",
    "server_endpoint",
    "server_name",
    "server_version",
    "credential_ref",
    "tool_name",
    "args_digest",
    "task_id",
    "status",
    "status_message",
    "server_created_at",
    "server_updated_at",
    "ttl_ms",
    "poll_interval_ms",
    "next_poll_due_ms",
    "outcome_truncated",
    "lease_owner",
    "lease_incarnation",
    "created_at_ms",
    "updated_at_ms",
]

_EVENT_INSERT_COLUMNS = ["principal", "run_ref", "seq", "type", "task_ref", "payload_json", "at_ms"]

# The encoding of bridge.ids.canonical_json, with the encoder built once for the call path
# (json.dumps builds a new one per call): same arguments, same text, same digests.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64 -> base64url, as secrets.token_urlsafe
# The two events a bridged call appends on its own commits (see _insert_call_path_event).
_RESULT_EVENT: str = ev.CallResult.model_fields["type"].default
_TASK_CREATED_EVENT: str = ev.TaskCreated.model_fields["type"].default

Clock = Callable[[], int]
EventListener = Callable[[str, str, int], None]  # (principal, run_ref, last seq committed)


def input_request_digest(method: str, params: Any) -> str:
    """Identity of one input request's payload, to tell a repeat from a reused key."""
    return sha256_hex(canonical_json({"method": method, "params": params}))


def scrub_raw_id(payload_json: str, raw_id: str, ref: str) -> str:
    """Replace a raw id inside a JSON document's strings by ``[ref]`` (keeps it valid JSON)."""
    needle = json.dumps(raw_id)[1:-1]  # the id as it appears inside a JSON string
    return payload_json.replace(needle, f"[{ref}]") if needle else payload_json


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ObservationOutcome:
    """What applying one task observation did."""

    decision: Decision
    task: TaskView
    events: tuple[ev.BridgeEvent, ...] = field(default=())

    @property
    def new_input_refs(self) -> tuple[str, ...]:
        return tuple(e.input_ref for e in self.events if isinstance(e, ev.TaskInputRequired))


class Ledger:
    """Owns the engine; hands out principal-scoped views with :meth:`for_principal`."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock = wall_clock_ms,
        max_outcome_bytes: int = DEFAULT_MAX_OUTCOME_BYTES,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.max_outcome_bytes = max_outcome_bytes
        self._listeners: list[EventListener] = []
        self._driver = DriverSession(engine)
        self._hot = CallPathStatements(
            self._driver,
            runs=RUNS,
            dispatches=DISPATCHES,
            tasks=TASKS,
            events=EVENTS,
            dispatch_columns=_DISPATCH_INSERT_COLUMNS,
            task_columns=_TASK_INSERT_COLUMNS,
            event_columns=[
                "principal",
                "run_ref",
                "seq",
                "type",
                "task_ref",
                "payload_json",
                "at_ms",
            ],
        )

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
        ``sqlite_synchronous="FULL"`` makes SQLite commits survive power loss (slower)."""
        engine = create_ledger_engine(url, sqlite_synchronous=sqlite_synchronous)
        if upgrade:
            migrate.upgrade(engine)
        return cls(engine, clock=clock, max_outcome_bytes=max_outcome_bytes)

    def close(self) -> None:
        self._driver.close()
        self.engine.dispose()

    def _notify(self, principal: str, run_ref: str, seq: int) -> None:
        for listener in list(self._listeners):
            listener(principal, run_ref, seq)

    def for_principal(self, principal: str) -> TenantLedger:
        if not principal:
            raise ValueError("a principal/tenant is required for every ledger access")
        return TenantLedger(self, principal)

    def add_listener(self, listener: EventListener) -> None:
        """Called after each commit that appended events (in the committing thread)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: EventListener) -> None:
        self._listeners.remove(listener)

    # -- transaction plumbing ------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        tx = _Tx()
        with self.engine.begin() as conn:
            tx.conn = conn
            yield tx
        for principal, run_ref, seq in tx.appended.items_last():
            self._notify(principal, run_ref, seq)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            # A plain deferred BEGIN on SQLite: readers must not queue behind the write lock.
            yield conn.execution_options(bridge_read=True)

    def _lock(self, conn: Connection) -> bool:
        """Whether to add FOR UPDATE (SQLite serialises writers with BEGIN IMMEDIATE)."""
        return not is_sqlite(self.engine)


class _Appended:
    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}

    def note(self, principal: str, run_ref: str, seq: int) -> None:
        self._last[(principal, run_ref)] = seq

    def items_last(self) -> list[tuple[str, str, int]]:
        return [(p, r, s) for (p, r), s in self._last.items()]


class _Tx:
    conn: Connection

    def __init__(self) -> None:
        self.appended = _Appended()


class TenantLedger:
    """All ledger operations for one principal/tenant."""

    def __init__(self, ledger: Ledger, principal: str) -> None:
        self._ledger = ledger
        self.principal = principal

    @property
    def now(self) -> int:
        return self._ledger.clock()

    # -- outer responses -----------------------------------------------------------------
    def open_run(
        self,
        uhp_server: str,
        *,
        response_id: str | None = None,
        session_id: str | None = None,
        harness_id: str | None = None,
        idempotency_key: str | None = None,
        status: OuterStatus | None = None,
    ) -> RunView:
        """Register an outer response. Idempotent on the response id and on the idempotency key.

        For a response this process will create on a remote UHP server, call this with the
        ``idempotency_key`` *before* the POST, then :meth:`record_outer_ids` once it answers.
        """
        existing = self._find_existing_run(uhp_server, response_id, idempotency_key)
        if existing is not None:
            return existing
        now = self.now
        ref = new_ref(RUN_PREFIX)
        try:
            with self._ledger._write() as tx:
                tx.conn.execute(
                    insert(RUNS).values(
                        ref=ref,
                        principal=self.principal,
                        uhp_server=uhp_server,
                        response_id=response_id,
                        session_id=session_id,
                        harness_id=harness_id,
                        status=status.value if status else None,
                        idempotency_key=idempotency_key,
                        event_seq=0,
                        created_at_ms=now,
                        updated_at_ms=now,
                    )
                )
                self._append(
                    tx,
                    ref,
                    ev.RunRegistered(
                        uhp_server=uhp_server,
                        response_id=response_id,
                        session_id=session_id,
                        harness_id=harness_id,
                    ),
                )
        except IntegrityError:
            # A concurrent registration of the same response or key won the race.
            existing = self._find_existing_run(uhp_server, response_id, idempotency_key)
            if existing is None:
                raise
            return existing
        return self.get_run(ref)

    def _find_existing_run(
        self, uhp_server: str, response_id: str | None, idempotency_key: str | None
    ) -> RunView | None:
        if response_id is not None:
            found = self.find_run(uhp_server, response_id)
            if found is not None:
                return found
        if idempotency_key is not None:
            return self.find_run_by_idempotency_key(idempotency_key)
        return None

    def record_outer_ids(
        self,
        run_ref: str,
        *,
        response_id: str,
        session_id: str | None = None,
        harness_id: str | None = None,
    ) -> RunView:
        """Record the ids a UHP server assigned. Set once; a different value is refused."""
        with self._ledger._write() as tx:
            row = self._run_row(tx.conn, run_ref, lock=True)
            updates: dict[str, Any] = {}
            for name, offered in (
                ("response_id", response_id),
                ("session_id", session_id),
                ("harness_id", harness_id),
            ):
                held = getattr(row, name)
                if offered is None or held == offered:
                    continue
                if held is not None:
                    raise ConflictingIds(f"run {run_ref!r} already has a different {name}")
                updates[name] = offered
            if not updates:
                return RunView.from_row(row)
            tx.conn.execute(
                update(RUNS)
                .where(self._mine(RUNS), RUNS.c.ref == run_ref)
                .values(updated_at_ms=self.now, **updates)
            )
            self._append(
                tx,
                run_ref,
                ev.OuterIdsRecorded(
                    response_id=updates.get("response_id", row.response_id),
                    session_id=updates.get("session_id", row.session_id),
                ),
            )
        return self.get_run(run_ref)

    def observe_outer(
        self,
        run_ref: str,
        status: OuterStatus,
        *,
        sequence: int | None = None,
        error: Any = None,
        lease: Membership | None = None,
    ) -> Decision:
        """Apply an observed UHP response status. Never touches any inner task.

        With ``lease`` (a remotely followed run leased to this replica), refused with
        ``LeaseLost`` unless this replica incarnation still holds the run.
        """
        with self._ledger._write() as tx:
            row = self._run_row(tx.conn, run_ref, lock=True)
            check_lease(row, lease, "run")
            current = OuterStatus(row.status) if row.status is not None else None
            decision = decide_outer(current, status)
            values: dict[str, Any] = {}
            if sequence is not None and (row.last_sequence is None or sequence > row.last_sequence):
                values["last_sequence"] = sequence
            if decision.is_anomaly:
                self._append(
                    tx, run_ref, ev.Anomaly(kind="outer_status_regression", detail=decision.reason)
                )
            elif decision.records_status:
                values["status"] = status.value
                if status.is_terminal and error is not None:
                    values["error_json"] = bound_json(error, self._ledger.max_outcome_bytes).text
                self._append(tx, run_ref, ev.OuterStatusChanged(previous=current, status=status))
                if status.is_terminal:
                    self._append(tx, run_ref, ev.OuterTerminal(status=status, error=error))
            if values:
                values["updated_at_ms"] = self.now
                tx.conn.execute(
                    update(RUNS).where(self._mine(RUNS), RUNS.c.ref == run_ref).values(**values)
                )
        return decision

    def record_trace_context(self, run_ref: str, trace_id: str, span_id: str) -> None:
        """Remember the run's outer span (W3C ids) so a later process continues its trace."""
        with self._ledger._write() as tx:
            self._run_row(tx.conn, run_ref)
            tx.conn.execute(
                update(RUNS)
                .where(self._mine(RUNS), RUNS.c.ref == run_ref)
                .values(trace_id=trace_id, span_id=span_id)
            )

    def record_outer_sequence(
        self, run_ref: str, sequence: int, *, lease: Membership | None = None
    ) -> bool:
        """Advance the last seen stream ``sequence_number``; never moves it backwards."""
        with self._ledger._write() as tx:
            query = update(RUNS).where(
                self._mine(RUNS),
                RUNS.c.ref == run_ref,
                or_(RUNS.c.last_sequence.is_(None), RUNS.c.last_sequence < sequence),
            )
            if lease is not None:
                query = query.where(
                    RUNS.c.lease_owner == lease.replica_id,
                    RUNS.c.lease_incarnation == lease.incarnation,
                )
            result = tx.conn.execute(query.values(last_sequence=sequence, updated_at_ms=self.now))
            if result.rowcount == 0:
                # NotFound for a foreign/unknown run, LeaseLost for a run held elsewhere
                check_lease(self._run_row(tx.conn, run_ref), lease, "run")
                return False
        return True

    def record_stream_lost(
        self,
        run_ref: str,
        reason: str,
        last_sequence: int | None,
        *,
        lease: Membership | None = None,
    ) -> None:
        """The outer stream broke; the response itself is unaffected (it continues server-side)."""
        with self._ledger._write() as tx:
            check_lease(self._run_row(tx.conn, run_ref, lock=True), lease, "run")
            if last_sequence is not None:
                tx.conn.execute(
                    update(RUNS)
                    .where(
                        self._mine(RUNS),
                        RUNS.c.ref == run_ref,
                        or_(RUNS.c.last_sequence.is_(None), RUNS.c.last_sequence < last_sequence),
                    )
                    .values(last_sequence=last_sequence, updated_at_ms=self.now)
                )
            self._append(
                tx, run_ref, ev.OuterStreamLost(reason=reason, last_sequence=last_sequence)
            )

    def record_stream_resumed(
        self,
        run_ref: str,
        mode: Literal["last_event_id", "reread"],
        after_sequence: int | None,
        *,
        lease: Membership | None = None,
    ) -> None:
        with self._ledger._write() as tx:
            check_lease(self._run_row(tx.conn, run_ref, lock=lease is not None), lease, "run")
            self._append(tx, run_ref, ev.OuterResumed(mode=mode, after_sequence=after_sequence))

    def record_anomaly(
        self,
        run_ref: str,
        kind: str,
        detail: str,
        *,
        task_ref: str | None = None,
        op_ref: str | None = None,
        lease: Membership | None = None,
    ) -> ev.Anomaly:
        """Record something malformed or contradictory that was observed and ignored.

        ``lease`` fences an anomaly observed while polling a leased task (``task_ref``).
        """
        with self._ledger._write() as tx:
            self._run_row(tx.conn, run_ref)
            raw_task_id = None
            if task_ref is not None:
                task_row = self._task_row(tx.conn, task_ref, lock=lease is not None)
                check_lease(task_row, lease, "task")
                raw_task_id = task_row.task_id
            appended = self._append(
                tx,
                run_ref,
                ev.Anomaly(kind=kind, detail=detail, task_ref=task_ref, op_ref=op_ref),
                raw_task_id=raw_task_id,
            )
        return cast(ev.Anomaly, appended)

    # -- dispatch intents ------------------------------------------------------------------
    def begin_dispatch(
        self,
        run_ref: str,
        *,
        server_endpoint: str,
        tool_name: str,
        arguments: Any,
        server_name: str | None = None,
        operation_id: str | None = None,
        sent: bool = False,
        trace_id: str | None = None,
        span_id: str | None = None,
        dispatcher: Membership | None = None,
    ) -> DispatchView:
        """Commit the intent to send a ``tools/call`` before sending it.

        ``dispatcher``: the replica incarnation sending it (leased mode), so that only once it
        is gone may another replica settle the call as unknown.

        The intent is ``pending``; with ``sent=True`` it is committed directly as ``sent``
        (the caller releases the request right after this commit), which saves a commit on the
        call's critical path. With an ``operation_id`` the call is idempotent: the same id
        returns the recorded intent (whatever state it reached) instead of creating a second
        one, so a caller that retries after a crash learns what happened instead of resending.
        """
        # = digest_arguments(arguments), without building a JSON encoder per call
        args_digest = sha256_hex(
            _CANONICAL.encode(arguments if arguments is not None else {}).encode("utf-8")
        )
        # = new_ref(DISPATCH_PREFIX), in C calls only: 128 random bits, base64url, no padding
        ref = DISPATCH_PREFIX + (
            b2a_base64(urandom(16), newline=False).translate(_URLSAFE).rstrip(b"=").decode()
        )
        now = self._ledger.clock()
        state = DispatchState.SENT if sent else DispatchState.PENDING
        principal = self.principal
        operation_id_ = operation_id or ref
        values = {
            "ref": ref,
            "principal": principal,
            "run_ref": run_ref,
            "operation_id": operation_id_,
            "server_endpoint": server_endpoint,
            "server_name": server_name,
            "tool_name": tool_name,
            "args_digest": args_digest,
            "state": state.value,
            "result_truncated": False,
            "trace_id": trace_id,
            "span_id": span_id,
            "dispatcher_replica": dispatcher.replica_id if dispatcher is not None else None,
            "dispatcher_incarnation": dispatcher.incarnation if dispatcher is not None else None,
            "created_at_ms": now,
            "updated_at_ms": now,
        }
        driver = self._ledger._driver
        try:
            inserted = driver.execute_alone(self._ledger._hot.insert_dispatch, values)
        except driver.integrity_error:
            existing = self._dispatch_by_operation(operation_id) if operation_id else None
            if existing is None:
                raise
            self._check_same_operation(existing, run_ref, tool_name, args_digest)
            return existing
        if inserted == 0:
            raise NotFound("run", run_ref)
        return DispatchView(
            ref=ref,
            principal=principal,
            run_ref=run_ref,
            operation_id=operation_id_,
            server_endpoint=server_endpoint,
            server_name=server_name,
            tool_name=tool_name,
            args_digest=args_digest,
            state=state,
            unknown_reason=None,
            result=None,
            result_truncated=False,
            task_ref=None,
            trace_id=trace_id,
            span_id=span_id,
            created_at_ms=now,
            updated_at_ms=now,
        )

    @staticmethod
    def _check_same_operation(
        existing: DispatchView, run_ref: str, tool_name: str, args_digest: str
    ) -> None:
        if (existing.run_ref, existing.tool_name, existing.args_digest) != (
            run_ref,
            tool_name,
            args_digest,
        ):
            raise OperationReused(
                f"operation id {existing.operation_id!r} was already used for another call"
            )

    def mark_dispatch_sent(self, op_ref: str) -> DispatchView:
        """``pending -> sent``: committed just before the request leaves the process."""
        with self._ledger._driver.transaction() as cursor:
            row = self._advance_on_call_path(
                cursor, op_ref, DispatchState.PENDING, DispatchState.SENT
            )
        return DispatchView.from_row(row)

    def mark_dispatch_unknown(self, op_ref: str, reason: str) -> DispatchView:
        """The request may have left but no handle and no result came back: say so, loudly."""
        with self._ledger._write() as tx:
            row = self._dispatch_row(tx.conn, op_ref, lock=True)
            previous = DispatchState(row.state)
            self._advance_dispatch(tx.conn, row, DispatchState.UNKNOWN, unknown_reason=reason)
            self._append(
                tx,
                row.run_ref,
                ev.CallUnknownOutcome(
                    op_ref=op_ref,
                    tool=row.tool_name,
                    server=row.server_name or row.server_endpoint,
                    previous=previous,
                    reason=reason,
                ),
            )
        return self.get_dispatch(op_ref)

    def record_immediate_result(
        self, op_ref: str, result: Any, *, intent: DispatchView | None = None
    ) -> DispatchView:
        """The server answered the call with an ordinary ``CallToolResult``: record it.

        ``intent`` is the view :meth:`begin_dispatch` returned for ``op_ref``, when the caller
        holds it: the row then need not be read back (the move is still guarded on the
        principal, the run and the ``sent`` state). ``result`` is then JSON data as
        ``model_dump(mode="json")`` gives it.
        """
        is_error = bool(isinstance(result, dict) and result.get("isError"))
        if intent is not None and intent.ref == op_ref and intent.principal == self.principal:
            return self._settle_known(intent, result, is_error)
        return self._settle_with_result(op_ref, result, is_error=is_error, rpc_error=False)

    def _settle_with_result(
        self, op_ref: str, result: Any, *, is_error: bool, rpc_error: bool
    ) -> DispatchView:
        bounded = bound_json(result, self._ledger.max_outcome_bytes)
        with self._ledger._driver.transaction() as cursor:
            row = self._advance_on_call_path(
                cursor,
                op_ref,
                DispatchState.SENT,
                DispatchState.RESULT,
                result_json=bounded.text,
                result_truncated=bounded.truncated,
            )
            _, seq = self._append_on_call_path(
                cursor,
                row.run_ref,
                {
                    "type": _RESULT_EVENT,
                    "op_ref": op_ref,
                    "tool": row.tool_name,
                    "server": row.server_name or row.server_endpoint,
                    "is_error": is_error,
                    "rpc_error": rpc_error,
                    "truncated": bounded.truncated,
                },
            )
        self._ledger._notify(self.principal, row.run_ref, seq)
        stored = json.loads(bounded.text) if bounded.truncated else result
        return DispatchView.from_row(row, result=stored)

    def _settle_known(self, intent: DispatchView, result: Any, is_error: bool) -> DispatchView:
        """:meth:`record_immediate_result` for a dispatch the caller holds: nothing read back.

        The bridged call's last commit, so written flat: three statements, one transaction.
        """
        ledger = self._ledger
        op_ref, run_ref, principal = intent.ref, intent.run_ref, self.principal
        # pydantic's encoder, already warm from dumping the reply: the stored text is the
        # same JSON as bound_json's, keys in the reply's order rather than sorted.
        encoded = pydantic_core.to_json(result, inf_nan_mode="null")
        truncated = len(encoded) > ledger.max_outcome_bytes
        text = bound_json(result, ledger.max_outcome_bytes).text if truncated else encoded.decode()
        now = ledger.clock()
        hot = ledger._hot
        with ledger._driver.transaction() as cursor:
            moved = cursor.run(
                hot.advance_known_dispatch,
                {
                    "op_ref": op_ref,
                    "principal": principal,
                    "run_ref": run_ref,
                    "from_state": "sent",
                    "to_state": "result",
                    "now": now,
                    "result_json": text,
                    "result_truncated": truncated,
                    "task_ref": None,
                },
            )
            if moved != 1:
                self._refuse_call_path_move(op_ref, DispatchState.RESULT)
            owned_run = {"run_ref": run_ref, "principal": principal}
            if cursor.run(hot.bump_seq, owned_run) != 1:
                raise NotFound("run", run_ref)
            # The event as _insert_call_path_event writes it, "seq" first: SQL completes the
            # payload with the number the counter just took.
            rest = {
                "run_ref": run_ref,
                "at_ms": now,
                "type": _RESULT_EVENT,
                "op_ref": op_ref,
                "tool": intent.tool_name,
                "server": intent.server_name or intent.server_endpoint,
                "is_error": is_error,
                "rpc_error": False,
                "truncated": truncated,
            }
            cursor.run(
                hot.insert_event_at_seq,
                {
                    "principal": principal,
                    "run_ref": run_ref,
                    "type": _RESULT_EVENT,
                    "task_ref": None,
                    "at_ms": now,
                    "payload_tail": "," + pydantic_core.to_json(rest)[1:].decode(),
                },
            )
            seq = cursor.scalar(hot.run_seq, owned_run) if ledger._listeners else 0
        if seq:
            ledger._notify(principal, run_ref, seq)
        return intent.with_result(json.loads(text) if truncated else result, truncated, now)

    def record_task_created(
        self,
        op_ref: str,
        *,
        task_id: str,
        status: TaskStatus,
        status_message: str | None = None,
        server_created_at: str | None = None,
        server_updated_at: str | None = None,
        ttl_ms: int | None = None,
        poll_interval_ms: int | None = None,
        next_poll_due_ms: int | None = None,
        server_version: str | None = None,
        credential_ref: str | None = None,
        lease: Membership | None = None,
    ) -> TaskView:
        """Commit a ``CreateTaskResult`` as an inner task linked to its run, ``sent -> task``.

        The handle is durable when this returns; only then may it be handed to anyone.
        ``lease``: the replica incarnation that created it holds it from the first commit, so
        no other replica can claim it in between (leased mode).
        """
        now = self.now
        ref = new_ref(TASK_PREFIX)
        driver = self._ledger._driver
        try:
            with driver.transaction() as cursor:
                op = self._advance_on_call_path(
                    cursor, op_ref, DispatchState.SENT, DispatchState.TASK, task_ref=ref
                )
                run_ids, seq = self._append_on_call_path(
                    cursor,
                    op.run_ref,
                    {
                        "task_ref": ref,
                        "tool": op.tool_name,
                        "server": op.server_name or op.server_endpoint,
                        "type": _TASK_CREATED_EVENT,
                        "op_ref": op_ref,
                        "status": status.value,
                        "ttl_ms": ttl_ms,
                        "poll_interval_ms": poll_interval_ms,
                    },
                )
                values = {
                    "ref": ref,
                    "principal": self.principal,
                    "run_ref": op.run_ref,
                    "op_ref": op_ref,
                    "response_id": run_ids["response_id"],
                    "session_id": run_ids["session_id"],
                    "server_endpoint": op.server_endpoint,
                    "server_name": op.server_name,
                    "server_version": server_version,
                    "credential_ref": credential_ref,
                    "tool_name": op.tool_name,
                    "args_digest": op.args_digest,
                    "task_id": task_id,
                    "status": status.value,
                    "status_message": status_message,
                    "server_created_at": server_created_at,
                    "server_updated_at": server_updated_at,
                    "ttl_ms": ttl_ms,
                    "poll_interval_ms": poll_interval_ms,
                    # Even a task created terminal is polled once: its result comes from
                    # tasks/get, and the handle is only let go once the result is stored.
                    "next_poll_due_ms": now if next_poll_due_ms is None else next_poll_due_ms,
                    "outcome_truncated": False,
                    "lease_owner": lease.replica_id if lease is not None else None,
                    "lease_incarnation": lease.incarnation if lease is not None else None,
                    "created_at_ms": now,
                    "updated_at_ms": now,
                }
                cursor.run(self._ledger._hot.insert_task, values)
        except driver.integrity_error as exc:
            holder = self._task_by_handle(self._dispatch_endpoint(op_ref), task_id)
            if holder is None:
                raise
            detail = f"server returned the task handle already held by {holder.ref}"
            self.record_anomaly(holder.run_ref, "duplicate_task_handle", detail, op_ref=op_ref)
            raise DuplicateTaskHandle(f"dispatch {op_ref!r}: {detail}") from exc
        self._ledger._notify(self.principal, op.run_ref, seq)
        return TaskView.from_row(SimpleNamespace(**values, **_UNSET_TASK_FIELDS))

    def _advance_on_call_path(
        self,
        cursor: Cursor,
        op_ref: str,
        expected: DispatchState,
        target: DispatchState,
        *,
        result_json: str | None = None,
        result_truncated: bool = False,
        task_ref: str | None = None,
    ) -> Any:
        """Guarded ``expected -> target`` move of a dispatch, returning the updated row."""
        assert may_advance_dispatch(expected, target)
        row = cursor.one(
            self._ledger._hot.advance_dispatch,
            {
                "op_ref": op_ref,
                "principal": self.principal,
                "from_state": expected.value,
                "to_state": target.value,
                "now": self.now,
                "result_json": result_json,
                "result_truncated": result_truncated,
                "task_ref": task_ref,
            },
        )
        if row is None:
            self._refuse_call_path_move(op_ref, target)
        return SimpleNamespace(**row)

    def _refuse_call_path_move(self, op_ref: str, target: DispatchState) -> NoReturn:
        current = self.get_dispatch(op_ref).state  # NotFound for a foreign/unknown ref
        raise InvalidTransition(
            f"dispatch {op_ref!r} cannot go from {current.value} to {target.value}"
        )

    def _append_on_call_path(
        self, cursor: Cursor, run_ref: str, fields: dict[str, Any]
    ) -> tuple[dict[str, Any], int]:
        """:meth:`_append` for the driver-level transactions of the call path."""
        run = cursor.one(
            self._ledger._hot.next_seq, {"run_ref": run_ref, "principal": self.principal}
        )
        if run is None:
            raise NotFound("run", run_ref)
        seq = int(run["event_seq"])
        self._insert_call_path_event(cursor, run_ref, seq, self.now, fields)
        return run, seq

    def _insert_call_path_event(
        self, cursor: Cursor, run_ref: str, seq: int, at_ms: int, fields: dict[str, Any]
    ) -> None:
        """Insert one call-path event (a ``call.result`` or ``task.created``).

        ``fields`` are the event's own fields, ``type`` included, as ``model_dump`` gives them.
        They come from the ledger's own rows and typed arguments, so the event is not built as
        a model and validated again: the payload is serialised by pydantic's own encoder, and
        reads back (``parse_event``) as the model would have written it.
        """
        payload = {"seq": seq, "run_ref": run_ref, "at_ms": at_ms, **fields}
        cursor.run(
            self._ledger._hot.insert_event,
            {
                "principal": self.principal,
                "run_ref": run_ref,
                "seq": seq,
                "type": fields["type"],
                "task_ref": fields.get("task_ref"),
                "payload_json": pydantic_core.to_json(payload).decode("utf-8"),
                "at_ms": at_ms,
            },
        )

    # -- inner tasks -------------------------------------------------------------------------
    def observe_task(
        self, task_ref: str, observation: TaskObservation, *, lease: Membership | None = None
    ) -> ObservationOutcome:
        """Apply one observation of a task through the state machine, with its events.

        With ``lease`` (leased polling), the write is refused with ``LeaseLost`` unless this
        replica incarnation still holds the task.
        """
        appended: list[ev.BridgeEvent] = []
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            check_lease(row, lease, "task")
            current = TaskStatus(row.status)
            observed = observation.status
            decision = decide_task(current, observed, lost=row.lost_reason is not None)

            if decision.is_anomaly:
                appended.append(
                    self._append(
                        tx,
                        row.run_ref,
                        ev.Anomaly(
                            kind="task_status_regression", detail=decision.reason, task_ref=task_ref
                        ),
                    )
                )
            else:
                values = self._observation_values(row, observation)
                if decision.records_status:
                    values["status"] = observed.value
                    appended.append(
                        self._append_task_event(
                            tx,
                            row,
                            ev.TaskStatusChanged,
                            previous=current,
                            status=observed,
                            status_message=observation.status_message,
                        )
                    )
                if observed.is_terminal and row.terminal_at_ms is None:
                    appended.extend(self._store_terminal(tx, row, observation, decision, values))
                elif observed is TaskStatus.INPUT_REQUIRED and observation.input_requests:
                    appended.extend(
                        self._record_input_requests(tx, row, observation.input_requests)
                    )
                tx.conn.execute(
                    update(TASKS).where(self._mine(TASKS), TASKS.c.ref == task_ref).values(**values)
                )
        return ObservationOutcome(decision, self.get_task(task_ref), tuple(appended))

    def _observation_values(self, row: Any, observation: TaskObservation) -> dict[str, Any]:
        values: dict[str, Any] = {"updated_at_ms": self.now}
        if observation.status_message is not None:
            values["status_message"] = observation.status_message
        if observation.server_updated_at is not None:
            values["server_updated_at"] = observation.server_updated_at
        if observation.poll_interval_ms is not None:
            values["poll_interval_ms"] = observation.poll_interval_ms
        if observation.ttl_ms is not None:
            values["ttl_ms"] = observation.ttl_ms
        if row.terminal_at_ms is None and row.lost_reason is None and row.detached_at_ms is None:
            values["next_poll_due_ms"] = observation.next_poll_due_ms
        return values

    def _store_terminal(
        self,
        tx: _Tx,
        row: Any,
        observation: TaskObservation,
        decision: Decision,
        values: dict[str, Any],
    ) -> list[ev.BridgeEvent]:
        """Commit the terminal outcome; only then does the handle stop being polled."""
        appended: list[ev.BridgeEvent] = []
        status = observation.status
        result = error = None
        truncated = False
        size: int | None = None
        if status is TaskStatus.COMPLETED and observation.result is not None:
            bounded = bound_json(observation.result, self._ledger.max_outcome_bytes)
            values["result_json"], truncated, size = (
                bounded.text,
                bounded.truncated,
                bounded.original_bytes,
            )
            result = json.loads(bounded.text)
        elif status is TaskStatus.FAILED and observation.error is not None:
            bounded = bound_json(observation.error, self._ledger.max_outcome_bytes)
            values["error_json"], truncated, size = (
                bounded.text,
                bounded.truncated,
                bounded.original_bytes,
            )
            error = json.loads(bounded.text)
        elif status is not TaskStatus.CANCELLED:
            missing = "result" if status is TaskStatus.COMPLETED else "error"
            appended.append(
                self._append(
                    tx,
                    row.run_ref,
                    ev.Anomaly(
                        kind="malformed_reply",
                        detail=f"{status.value} task reported without its {missing}",
                        task_ref=row.ref,
                    ),
                    raw_task_id=row.task_id,
                )
            )
        superseded = decision.change is Change.SUPERSEDE_LOST
        values.update(
            outcome_truncated=truncated,
            outcome_bytes=size,
            terminal_at_ms=self.now,
            next_poll_due_ms=None,
        )
        if superseded:
            values.update(lost_reason=None, lost_detail=None)
        appended.append(
            self._append_task_event(
                tx,
                row,
                ev.TaskTerminal,
                status=status,
                superseded_lost=superseded,
                result=result,
                error=error,
                truncated=truncated,
            )
        )
        return appended

    def _record_input_requests(
        self, tx: _Tx, row: Any, requests: dict[str, dict[str, Any]]
    ) -> list[ev.BridgeEvent]:
        """Record each new key once and surface it once; flag a key reused for a new payload."""
        appended: list[ev.BridgeEvent] = []
        known = {
            r.key: r
            for r in tx.conn.execute(
                select(INPUTS).where(self._mine(INPUTS), INPUTS.c.task_ref == row.ref)
            )
        }
        now = self.now
        for key, request in requests.items():
            method = str(request.get("method", ""))
            params = request.get("params") or {}
            digest = input_request_digest(method, params)
            seen = known.get(key)
            if seen is None:
                input_ref = new_ref(INPUT_PREFIX)
                tx.conn.execute(
                    insert(INPUTS).values(
                        ref=input_ref,
                        principal=self.principal,
                        task_ref=row.ref,
                        key=key,
                        method=method,
                        params_json=canonical_json(params).decode("utf-8"),
                        payload_digest=digest,
                        first_seen_ms=now,
                        surfaced_at_ms=now,
                    )
                )
                appended.append(
                    self._append_task_event(
                        tx,
                        row,
                        ev.TaskInputRequired,
                        input_ref=input_ref,
                        method=method,
                        params=params,
                    )
                )
            elif digest not in (seen.payload_digest, seen.conflicting_digest):
                tx.conn.execute(
                    update(INPUTS).where(INPUTS.c.id == seen.id).values(conflicting_digest=digest)
                )
                appended.append(
                    self._append(
                        tx,
                        row.run_ref,
                        ev.Anomaly(
                            kind="reused_input_key",
                            detail=f"input request {seen.ref} reappeared with a different payload",
                            task_ref=row.ref,
                        ),
                        raw_task_id=row.task_id,
                    )
                )
        return appended

    def mark_task_lost(
        self,
        task_ref: str,
        reason: LostReason,
        detail: str = "",
        *,
        next_poll_due_ms: int | None = None,
        lease: Membership | None = None,
    ) -> bool:
        """Give up on a live handle with a reason. No-op on a terminal or already-lost task.

        ``next_poll_due_ms`` keeps a low-rate look-out for a late terminal status (which would
        supersede the verdict); by default a lost handle is no longer polled.
        """
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            check_lease(row, lease, "task")
            if not may_mark_lost(TaskStatus(row.status), row.lost_reason is not None):
                return False
            tx.conn.execute(
                update(TASKS)
                .where(self._mine(TASKS), TASKS.c.ref == task_ref)
                .values(
                    lost_reason=reason.value,
                    lost_detail=detail,
                    next_poll_due_ms=next_poll_due_ms,
                    updated_at_ms=self.now,
                )
            )
            self._append_task_event(tx, row, ev.TaskLost, reason=reason, detail=detail)
        return True

    def record_input_answer(self, task_ref: str, input_ref: str, response: Any) -> InputRequestView:
        """Record the host's answer to one input request, exactly once per request.

        ``input_ref`` is the request's bridge reference (``in_…``, as events name it) or the
        server's key. Committed before ``tasks/update`` is sent; the answer is kept until the
        server acknowledges it, so a restart redelivers it instead of losing it.
        """
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            request = tx.conn.execute(
                select(INPUTS).where(
                    self._mine(INPUTS),
                    INPUTS.c.task_ref == task_ref,
                    or_(INPUTS.c.ref == input_ref, INPUTS.c.key == input_ref),
                )
            ).first()
            if request is None:
                raise UnknownInputKey(f"task {task_ref!r} has no input request {input_ref!r}")
            if request.answered_at_ms is not None:
                raise InputAlreadyAnswered(f"input request {request.ref} was already answered")
            tx.conn.execute(
                update(INPUTS)
                .where(INPUTS.c.id == request.id)
                .values(
                    answer_digest=sha256_hex(canonical_json(response)),
                    answer_json=canonical_json(response).decode("utf-8"),
                    answered_at_ms=self.now,
                )
            )
            self._append_task_event(tx, row, ev.TaskInputAnswered, input_ref=request.ref)
        found = [r for r in self.input_requests(task_ref) if r.ref == request.ref]
        return found[0]

    def record_cancel_requested(self, task_ref: str, requested_by: str) -> bool:
        """Record the intent to cancel (before ``tasks/cancel``). An ack never proves a stop."""
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            if row.terminal_at_ms is not None:
                return False
            if row.cancel_requested_at_ms is None:
                tx.conn.execute(
                    update(TASKS)
                    .where(self._mine(TASKS), TASKS.c.ref == task_ref)
                    .values(cancel_requested_at_ms=self.now, updated_at_ms=self.now)
                )
            self._append_task_event(tx, row, ev.TaskCancelRequested, requested_by=requested_by)
        return True

    def mark_answer_delivered(self, task_ref: str, input_ref: str) -> None:
        """``tasks/update`` carrying this answer was acknowledged: drop the kept answer."""
        with self._ledger._write() as tx:
            self._task_row(tx.conn, task_ref)
            updated = tx.conn.execute(
                update(INPUTS)
                .where(
                    self._mine(INPUTS),
                    INPUTS.c.task_ref == task_ref,
                    INPUTS.c.ref == input_ref,
                    INPUTS.c.answered_at_ms.is_not(None),
                )
                .values(delivered_at_ms=self.now, answer_json=None)
            )
            if updated.rowcount == 0:
                raise UnknownInputKey(f"task {task_ref!r} has no answered request {input_ref!r}")

    def undelivered_answers(self) -> list[InputRequestView]:
        """Answers recorded but not acknowledged by the server (to redeliver after a restart)."""
        return self._inputs_of_tasks(
            (
                INPUTS.c.answered_at_ms.is_not(None),
                INPUTS.c.delivered_at_ms.is_(None),
                TASKS.c.terminal_at_ms.is_(None),
            ),
            order_by=(INPUTS.c.id,),
        )

    def detach_task(self, task_ref: str, requested_by: str) -> bool:
        """Stop tracking a live task without cancelling it. No-op if terminal or detached."""
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            if row.terminal_at_ms is not None or row.detached_at_ms is not None:
                return False
            tx.conn.execute(
                update(TASKS)
                .where(self._mine(TASKS), TASKS.c.ref == task_ref)
                .values(detached_at_ms=self.now, next_poll_due_ms=None, updated_at_ms=self.now)
            )
            self._append_task_event(tx, row, ev.TaskDetached, requested_by=requested_by)
        return True

    def record_step_failure(self, task_ref: str, reason: str) -> None:
        """The outer step stopped waiting for this task; the handle stays as it is."""
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref)
            self._append_task_event(tx, row, ev.StepRecoverableFailure, reason=reason)

    def record_open_tasks_at_end(
        self,
        run_ref: str,
        status: OuterStatus,
        task_refs: list[str],
        action: Literal["reported", "cancel_requested"],
    ) -> None:
        with self._ledger._write() as tx:
            self._run_row(tx.conn, run_ref)
            self._append(
                tx,
                run_ref,
                ev.OuterOpenTasks(status=status, task_refs=task_refs, action=action),
            )

    def record_server_unreachable(
        self, task_ref: str, since_ms: int, detail: str, *, lease: Membership | None = None
    ) -> None:
        """Report on the task's run that its server has been unreachable since ``since_ms``."""
        with self._ledger._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=lease is not None)
            check_lease(row, lease, "task")
            self._append_task_event(tx, row, ev.ServerUnreachable, since_ms=since_ms, detail=detail)

    def record_call_error(self, op_ref: str, error: dict[str, Any]) -> DispatchView:
        """The server answered ``tools/call`` with a JSON-RPC error: a definite, failed reply.

        Stored as the dispatch's result ``{"error": {code, message, data}}``; nothing started.
        """
        return self._settle_with_result(op_ref, {"error": error}, is_error=True, rpc_error=True)

    def schedule_poll(self, task_ref: str, due_ms: int) -> None:
        """Set when an open task is next due. Terminal and lost tasks are left alone."""
        with self._ledger._write() as tx:
            tx.conn.execute(
                update(TASKS)
                .where(self._mine(TASKS), TASKS.c.ref == task_ref, *OPEN_TASK)
                .values(next_poll_due_ms=due_ms)
            )

    # -- reads (every one filtered on the principal) -----------------------------------------
    def get_run(self, run_ref: str) -> RunView:
        with self._ledger._read() as conn:
            return RunView.from_row(self._run_row(conn, run_ref))

    def find_run(self, uhp_server: str, response_id: str) -> RunView | None:
        with self._ledger._read() as conn:
            row = conn.execute(
                select(RUNS).where(
                    self._mine(RUNS),
                    RUNS.c.uhp_server == uhp_server,
                    RUNS.c.response_id == response_id,
                )
            ).first()
        return RunView.from_row(row) if row is not None else None

    def find_run_by_idempotency_key(self, idempotency_key: str) -> RunView | None:
        with self._ledger._read() as conn:
            row = conn.execute(
                select(RUNS).where(self._mine(RUNS), RUNS.c.idempotency_key == idempotency_key)
            ).first()
        return RunView.from_row(row) if row is not None else None

    def list_runs(self, *, limit: int = 50, open_only: bool = False) -> list[RunView]:
        query = select(RUNS).where(self._mine(RUNS))
        if open_only:
            query = query.where(OPEN_RUN)
        query = query.order_by(RUNS.c.updated_at_ms.desc(), RUNS.c.ref).limit(limit)
        with self._ledger._read() as conn:
            return [RunView.from_row(r) for r in conn.execute(query)]

    def find_dispatch(self, operation_id: str) -> DispatchView | None:
        """The dispatch recorded under a caller-chosen operation id, if any."""
        return self._dispatch_by_operation(operation_id)

    def get_dispatch(self, op_ref: str) -> DispatchView:
        with self._ledger._read() as conn:
            return DispatchView.from_row(self._dispatch_row(conn, op_ref))

    def list_dispatches(
        self, *, run_ref: str | None = None, states: Sequence[DispatchState] | None = None
    ) -> list[DispatchView]:
        query = select(DISPATCHES).where(self._mine(DISPATCHES))
        if run_ref is not None:
            query = query.where(DISPATCHES.c.run_ref == run_ref)
        if states is not None:
            query = query.where(DISPATCHES.c.state.in_([s.value for s in states]))
        with self._ledger._read() as conn:
            rows = conn.execute(query.order_by(DISPATCHES.c.created_at_ms, DISPATCHES.c.ref))
            return [DispatchView.from_row(r) for r in rows]

    def get_task(self, task_ref: str) -> TaskView:
        with self._ledger._read() as conn:
            return TaskView.from_row(self._task_row(conn, task_ref))

    def list_tasks(self, *, run_ref: str | None = None, open_only: bool = False) -> list[TaskView]:
        query = select(TASKS).where(self._mine(TASKS))
        if run_ref is not None:
            query = query.where(TASKS.c.run_ref == run_ref)
        if open_only:
            query = query.where(*OPEN_TASK)
        with self._ledger._read() as conn:
            rows = conn.execute(query.order_by(TASKS.c.created_at_ms, TASKS.c.ref)).all()
            return TaskView.from_rows(rows)

    def due_tasks(self, now_ms: int, *, limit: int = 500) -> list[TaskView]:
        """Open tasks whose next poll is due, oldest due first."""
        query = (
            select(TASKS)
            .where(
                self._mine(TASKS),
                TASKS.c.next_poll_due_ms.is_not(None),
                TASKS.c.next_poll_due_ms <= now_ms,
            )
            .order_by(TASKS.c.next_poll_due_ms, TASKS.c.ref)
            .limit(limit)
        )
        with self._ledger._read() as conn:
            return [TaskView.from_row(r) for r in conn.execute(query)]

    def input_requests(
        self, task_ref: str, *, pending_only: bool = False
    ) -> list[InputRequestView]:
        query = select(INPUTS).where(self._mine(INPUTS), INPUTS.c.task_ref == task_ref)
        if pending_only:
            query = query.where(INPUTS.c.answered_at_ms.is_(None))
        with self._ledger._read() as conn:
            return [InputRequestView.from_row(r) for r in conn.execute(query.order_by(INPUTS.c.id))]

    def pending_input_requests(self) -> list[InputRequestView]:
        """Unanswered input requests of every open task (offered to the host again)."""
        return self._inputs_of_tasks(
            (INPUTS.c.answered_at_ms.is_(None), *OPEN_TASK),
            order_by=(TASKS.c.created_at_ms, TASKS.c.ref, INPUTS.c.id),
        )

    def _inputs_of_tasks(
        self, conditions: tuple[Any, ...], *, order_by: tuple[Any, ...]
    ) -> list[InputRequestView]:
        """This principal's input requests joined to their tasks, filtered on both."""
        query = (
            select(INPUTS)
            .join(TASKS, TASKS.c.ref == INPUTS.c.task_ref)
            .where(self._mine(INPUTS), self._mine(TASKS), *conditions)
            .order_by(*order_by)
        )
        with self._ledger._read() as conn:
            return [InputRequestView.from_row(r) for r in conn.execute(query)]

    def input_digests(self, task_refs: Sequence[str]) -> dict[str, dict[str, str]]:
        """Payload digests of every recorded input key of these tasks, by task (one query per
        thousand tasks: a restart or a claim seeds thousands of handles at once)."""
        digests: dict[str, dict[str, str]] = {}
        refs = list(task_refs)
        with self._ledger._read() as conn:
            for start in range(0, len(refs), 1000):
                rows = conn.execute(
                    select(INPUTS.c.task_ref, INPUTS.c.key, INPUTS.c.payload_digest).where(
                        self._mine(INPUTS), INPUTS.c.task_ref.in_(refs[start : start + 1000])
                    )
                )
                for task_ref, key, digest in rows:
                    digests.setdefault(task_ref, {})[key] = digest
        return digests

    def events(
        self, run_ref: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[ev.BridgeEvent]:
        """The run's events with ``seq > after_seq``, in order."""
        query = (
            select(EVENTS.c.payload_json)
            .where(self._mine(EVENTS), EVENTS.c.run_ref == run_ref, EVENTS.c.seq > after_seq)
            .order_by(EVENTS.c.seq)
        )
        if limit is not None:
            query = query.limit(limit)
        with self._ledger._read() as conn:
            return [ev.parse_event(text) for (text,) in conn.execute(query)]

    # -- internals -----------------------------------------------------------------------------
    def _mine(self, table: Table) -> Any:
        return table.c.principal == self.principal

    def _one(self, conn: Connection, table: Table, ref: str, kind: str, lock: bool) -> Any:
        query = select(table).where(self._mine(table), table.c.ref == ref)
        if lock and self._ledger._lock(conn):
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise NotFound(kind, ref)
        return row

    def _run_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, RUNS, ref, "run", lock)

    def _dispatch_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, DISPATCHES, ref, "dispatch", lock)

    def _task_row(self, conn: Connection, ref: str, lock: bool = False) -> Any:
        return self._one(conn, TASKS, ref, "task", lock)

    def _dispatch_by_operation(self, operation_id: str) -> DispatchView | None:
        with self._ledger._read() as conn:
            row = conn.execute(
                select(DISPATCHES).where(
                    self._mine(DISPATCHES), DISPATCHES.c.operation_id == operation_id
                )
            ).first()
        return DispatchView.from_row(row) if row is not None else None

    def _dispatch_endpoint(self, op_ref: str) -> str:
        return self.get_dispatch(op_ref).server_endpoint

    def _task_by_handle(self, server_endpoint: str, task_id: str) -> TaskView | None:
        with self._ledger._read() as conn:
            row = conn.execute(
                select(TASKS).where(
                    self._mine(TASKS),
                    and_(TASKS.c.server_endpoint == server_endpoint, TASKS.c.task_id == task_id),
                )
            ).first()
        return TaskView.from_row(row) if row is not None else None

    def _advance_dispatch(
        self, conn: Connection, row: Any, target: DispatchState, **values: Any
    ) -> None:
        current = DispatchState(row.state)
        if not may_advance_dispatch(current, target):
            raise InvalidTransition(
                f"dispatch {row.ref!r} cannot go from {current.value} to {target.value}"
            )
        conn.execute(
            update(DISPATCHES)
            .where(self._mine(DISPATCHES), DISPATCHES.c.ref == row.ref)
            .values(state=target.value, updated_at_ms=self.now, **values)
        )

    def _append_task_event(
        self, tx: _Tx, row: Any, event_type: type[ev.TaskEventLike], **fields: Any
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
        tx: _Tx,
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
        seq = tx.conn.execute(
            update(RUNS)
            .where(self._mine(RUNS), RUNS.c.ref == run_ref)
            .values(event_seq=RUNS.c.event_seq + 1)
            .returning(RUNS.c.event_seq)
        ).scalar_one()
        stamped = event.model_copy(update={"seq": seq, "run_ref": run_ref, "at_ms": self.now})
        payload = stamped.model_dump_json()
        task_ref = getattr(stamped, "task_ref", None)
        if raw_task_id and task_ref:
            scrubbed = scrub_raw_id(payload, raw_task_id, task_ref)
            if scrubbed != payload:
                payload, stamped = scrubbed, ev.parse_event(scrubbed)
        tx.conn.execute(
            insert(EVENTS).values(
                principal=self.principal,
                run_ref=run_ref,
                seq=seq,
                type=stamped.type,
                task_ref=task_ref,
                payload_json=payload,
                at_ms=stamped.at_ms,
            )
        )
        tx.appended.note(self.principal, run_ref, seq)
        return stamped


_UNSET_TASK_FIELDS: dict[str, Any] = {
    "lost_reason": None,
    "lost_detail": None,
    "result_json": None,
    "error_json": None,
    "outcome_bytes": None,
    "cancel_requested_at_ms": None,
    "detached_at_ms": None,
    "terminal_at_ms": None,
}
