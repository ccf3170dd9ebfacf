"""The calls aggregate (dispatches): ``tools/call`` intents, their state moves, the call path.

A bridged call commits twice on its critical path: the intent before the request is sent
(:meth:`DispatchWrites.stage_dispatch`), then the handle (:meth:`~DispatchWrites.
stage_task_created`) or the result (:meth:`~DispatchWrites.stage_immediate_result`) before it is
returned. Each is defined here once, staged (:class:`~bridge._ledger.commit.group_commit.
StagedCommit`: its statements, then what follows the commit), as SQLAlchemy Core statements over
the SQLModel tables (:class:`CallPathStatements`, column lists taken from the tables) compiled
once for the dialect and run on the ledger's driver session (:mod:`bridge._ledger.commit.
driver_sessions`). Callers commit it through ``LedgerRunner.commit``: alone (inline), or in a
group commit shared with concurrent callers (worker threads); ``begin_dispatch``,
``record_immediate_result`` and ``record_task_created`` commit it alone, synchronously. The
two call-path events (``call.result``, ``task.created``) are serialised by one function,
:func:`event_tail`, in the shape ``model_dump`` gives them; ``tests/test_ledger_write_paths.py``
proves every route writes the rows and events of the SQLAlchemy Core reference. Admission
verdicts on an unknown outcome are events on the run (``call.admission_checked``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Concatenate, Literal, NoReturn, ParamSpec, TypeVar

import pydantic_core
from sqlalchemy import Connection, select

from bridge import events as ev
from bridge._errors import DuplicateTaskHandle, InvalidTransition, NotFound, OperationReused
from bridge._ids import TASK_PREFIX, new_ref
from bridge._ledger._base import DISPATCHES, EVENTS, Tx
from bridge._ledger.call_path import (
    RESULT_EVENT,
    TASK_CREATED_EVENT,
    CallPathStatements,
    event_tail,
    intent_row,
)
from bridge._ledger.commit.driver_sessions import Cursor, StatementResult
from bridge._ledger.commit.group_commit import StagedCommit
from bridge._ledger.fencing import Membership
from bridge._ledger.outcome import bound_json
from bridge._ledger.reads.queries import TenantQueries, WriteScope
from bridge._ledger.reads.views import CallView, TaskView
from bridge._ledger.runs import RunWrites
from bridge._lifecycle import Admission, CallState, TaskStatus, may_advance_dispatch
from bridge._redaction import scrub_task_id

T = TypeVar("T")
P = ParamSpec("P")
_CHECKED: str = ev.CallAdmissionChecked.model_fields["type"].default


def _committed_alone(
    stage: Callable[Concatenate[DispatchWrites, P], StagedCommit[Cursor, Any, T]], what: str
) -> Callable[Concatenate[DispatchWrites, P], T]:
    """The immediate form of a staged write: the same parameters, committed alone."""

    def commit(self: DispatchWrites, /, *args: P.args, **kwargs: P.kwargs) -> T:
        # Looked up on self, as a method: an override (or a test's wrapper) serves both forms.
        staged: StagedCommit[Cursor, Any, T] = getattr(self, stage.__name__)(*args, **kwargs)
        return self._commit_alone(staged)

    commit.__doc__ = (
        f":meth:`{stage.__name__}` committed alone: {what} is durable when this returns."
    )
    return commit


class DispatchWrites(WriteScope):
    """Writes of calls (dispatch intents): the call path and the admission verdicts."""

    def __init__(
        self, reads: TenantQueries, runs: RunWrites, call_path: CallPathStatements
    ) -> None:
        super().__init__(reads)
        self._runs = runs  # a duplicate task handle is an anomaly on the run
        self._call_path = call_path

    # -- dispatch intents ------------------------------------------------------------------
    def stage_dispatch(
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
    ) -> StagedCommit[Cursor, None, CallView]:
        """The intent to send a ``tools/call``, committed before sending it.

        ``dispatcher``: the replica incarnation sending it (leased mode), so that only once it
        is gone may another replica settle the call as unknown.

        The intent is ``pending``; with ``sent=True`` it is committed directly as ``sent``
        (the caller releases the request right after this commit), which saves a commit on the
        call's critical path. With an ``operation_id`` the call is idempotent: the same id
        returns the recorded intent (whatever state it reached) instead of creating a second
        one, so a caller that retries after a crash learns what happened instead of resending.
        """
        values = intent_row(
            self.principal,
            self._ledger.clock(),
            run_ref,
            server_endpoint,
            tool_name,
            arguments,
            server_name,
            operation_id,
            sent,
            trace_id,
            span_id,
            dispatcher,
        )
        statement = self._call_path.insert_dispatch

        def check(result: StatementResult) -> None:
            if result.rowcount == 0:
                raise NotFound("run", run_ref)

        def failed(error: Exception) -> CallView:
            if isinstance(error, self._ledger._driver.integrity_error):
                return self._intent_conflict(values, error)
            raise error

        return StagedCommit.one_statement(
            statement, values, check, lambda _: CallView.from_columns(values), failed
        )

    begin_dispatch = _committed_alone(stage_dispatch, "the intent")

    def _intent_conflict(self, values: dict[str, Any], error: Exception) -> CallView:
        """The intent's insert broke a unique constraint: a call made again with its operation
        id gets the intent on record (or ``OperationReused``); anything else is raised."""
        operation_id = values["operation_id"] if values["operation_id"] != values["ref"] else None
        existing = self._reads._dispatch_by_operation(operation_id) if operation_id else None
        if existing is None:
            raise error
        self._check_same_operation(
            existing, values["run_ref"], values["tool_name"], values["args_digest"]
        )
        return existing

    @staticmethod
    def _check_same_operation(
        existing: CallView, run_ref: str, tool_name: str, args_digest: str
    ) -> None:
        if (existing.run_ref, existing.tool_name, existing.args_digest) != (
            run_ref,
            tool_name,
            args_digest,
        ):
            raise OperationReused(
                f"operation id {existing.operation_id!r} was already used for another call"
            )

    def mark_dispatch_sent(self, op_ref: str) -> CallView:
        """``pending -> sent``: committed just before the request leaves the process."""
        with self._ledger._driver.transaction() as cursor:
            row = self._advance_on_call_path(
                cursor, op_ref, CallState.PENDING, CallState.SENT, self.now
            )
        return CallView.from_row(row)

    def mark_dispatch_unknown(self, op_ref: str, reason: str) -> CallView:
        """The request may have left but no handle and no result came back: say so, loudly."""
        with self._write() as tx:
            row = self._dispatch_row(tx.conn, op_ref, lock=True)
            previous = CallState(row.state)
            self._advance_dispatch(tx, row, CallState.UNKNOWN, unknown_reason=reason)
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
        return self._reads.get_dispatch(op_ref)

    def record_immediate_result(
        self, op_ref: str, result: Any, *, intent: CallView | None = None
    ) -> CallView:
        """:meth:`stage_immediate_result` committed alone. Without ``intent`` (the view
        :meth:`begin_dispatch` returned for ``op_ref``), the dispatch is read first."""
        if intent is not None and intent.ref == op_ref and intent.principal == self.principal:
            return self._commit_alone(self.stage_immediate_result(result, intent=intent))
        return self._settle_with_result(op_ref, result, rpc_error=False)

    def _settle_with_result(self, op_ref: str, result: Any, *, rpc_error: bool) -> CallView:
        """The result of a dispatch the caller does not hold, committed alone: read it first."""
        is_error = rpc_error or bool(isinstance(result, dict) and result.get("isError"))
        staged = self._staged_result(self._reads.get_dispatch(op_ref), result, is_error, rpc_error)
        return self._commit_alone(staged)

    def stage_immediate_result(
        self, result: Any, *, intent: CallView
    ) -> StagedCommit[Cursor, int, CallView]:
        """The server answered the call the caller began (``intent``) with an ordinary
        ``CallToolResult``: ``sent -> result`` with its ``call.result`` event, nothing read back
        (the move is still guarded on the principal, the run and the ``sent`` state).
        ``result`` is JSON data as ``model_dump(mode="json")`` gives it."""
        if intent.principal != self.principal:
            raise NotFound("dispatch", intent.ref)
        is_error = bool(isinstance(result, dict) and result.get("isError"))
        return self._staged_result(intent, result, is_error, False)

    def _commit_alone(self, staged: StagedCommit[Cursor, Any, T]) -> T:
        """A staged write in a transaction of its own (the immediate forms' one body)."""
        return self._ledger.group_commit.commit_alone(staged)

    def _staged_result(
        self, intent: CallView, result: Any, is_error: bool, rpc_error: bool
    ) -> StagedCommit[Cursor, int, CallView]:
        """The bridged call's last commit, written flat: three statements, one transaction
        (a fourth reads the event number back only when someone listens for commits)."""
        ledger = self._ledger
        op_ref, run_ref, principal = intent.ref, intent.run_ref, self.principal
        # pydantic's encoder, already warm from dumping the reply: the stored text is the
        # same JSON as bound_json's, keys in the reply's order rather than sorted.
        encoded = pydantic_core.to_json(result, inf_nan_mode="null")
        truncated = len(encoded) > ledger.max_outcome_bytes
        text = bound_json(result, ledger.max_outcome_bytes).text if truncated else encoded.decode()
        now = ledger.clock()
        hot = self._call_path
        move = {
            "op_ref": op_ref,
            "owner": principal,
            "in_run": run_ref,
            "from_state": "sent",
            "to_state": "result",
            "now": now,
            "result_json": text,
            "result_truncated": truncated,
            "task_ref": None,
        }
        owned_run = {"run_ref": run_ref, "owner": principal}
        # SQL completes the payload with the number the counter just took.
        event = {
            "run_ref": run_ref,
            "at_ms": now,
            "type": RESULT_EVENT,
            "op_ref": op_ref,
            "tool": intent.tool_name,
            "server": intent.server_name or intent.server_endpoint,
            "is_error": is_error,
            "rpc_error": rpc_error,
            "truncated": truncated,
        }
        appended = {
            "principal": principal,
            "run_ref": run_ref,
            "type": RESULT_EVENT,
            "task_ref": None,
            "at_ms": now,
            "payload_tail": event_tail(event),
        }

        announce = hot.announced_seq if ledger._publishes() else None
        listened = bool(ledger._listeners)

        in_one = hot.result_in_one_announced if announce is not None else hot.result_in_one
        result_event = {"event_type": RESULT_EVENT, "payload_tail": appended["payload_tail"]}

        def check(row: dict[str, Any] | None) -> int:
            assert row is not None
            if row["moved"] != 1:
                self._refuse_call_path_move(op_ref, CallState.RESULT)
            if row["seq"] is None:
                raise NotFound("run", run_ref)
            return int(row["seq"]) if announce is not None or listened else 0

        def write(cursor: Cursor) -> int:
            if cursor.run(hot.advance_known_dispatch, move) != 1:
                self._refuse_call_path_move(op_ref, CallState.RESULT)
            if cursor.run(hot.bump_seq, owned_run) != 1:
                raise NotFound("run", run_ref)
            cursor.run(hot.insert_event_at_seq, appended)
            if announce is not None:
                return int(cursor.scalar(announce, owned_run))
            return int(cursor.scalar(hot.run_seq, owned_run)) if listened else 0

        def settle(seq: int) -> CallView:
            if seq:
                ledger._notify(principal, run_ref, seq, announced=announce is not None)
            return intent.with_result(json.loads(text) if truncated else result, truncated, now)

        if in_one is not None:  # PostgreSQL: one statement, pipelined with the batch's others
            params = {**move, **result_event}
            return StagedCommit.one_statement(in_one, params, lambda r: check(r.row), settle)
        return StagedCommit(write, settle)

    def stage_task_created(
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
        task_generation: str | None = None,
    ) -> StagedCommit[Cursor, int, TaskView]:
        """A ``CreateTaskResult`` as an inner task linked to its run, ``sent -> task``.

        The handle is durable when the commit returns; only then may it be handed to anyone.
        ``lease``: the replica incarnation that created it holds it from the first commit, so
        no other replica can claim it in between (leased mode). ``task_generation``: the task
        protocol the handle belongs to (``None``: the Tasks extension), so whoever polls it
        later, after a restart too, speaks that generation.
        """
        now = self.now
        ref = new_ref(TASK_PREFIX)
        principal = self.principal
        hot = self._call_path
        driver = self._ledger._driver
        ledger = self._ledger
        announce = hot.announce if ledger._publishes() else None
        values: dict[str, Any] = {}

        def write(cursor: Cursor) -> int:
            op = self._advance_on_call_path(
                cursor, op_ref, CallState.SENT, CallState.TASK, now, task_ref=ref
            )
            run_ref = op.run_ref
            run = cursor.one(hot.next_seq, {"run_ref": run_ref, "owner": principal})
            if run is None:
                raise NotFound("run", run_ref)
            seq = int(run["event_seq"])
            event = {
                "run_ref": run_ref,
                "at_ms": now,
                "task_ref": ref,
                "tool": op.tool_name,
                "server": op.server_name or op.server_endpoint,
                "type": TASK_CREATED_EVENT,
                "op_ref": op_ref,
                "status": status.value,
                "ttl_ms": ttl_ms,
                "poll_interval_ms": poll_interval_ms,
            }
            cursor.run(
                hot.insert_event,
                {
                    "principal": principal,
                    "run_ref": run_ref,
                    "seq": seq,
                    "type": TASK_CREATED_EVENT,
                    "task_ref": ref,
                    "payload_json": '{"seq":' + str(seq) + event_tail(event),
                    "at_ms": now,
                },
            )
            values.clear()
            values.update(
                {
                    "ref": ref,
                    "principal": principal,
                    "run_ref": run_ref,
                    "op_ref": op_ref,
                    "response_id": run["response_id"],
                    "session_id": run["session_id"],
                    "server_endpoint": op.server_endpoint,
                    "server_name": op.server_name,
                    "server_version": server_version,
                    "credential_ref": credential_ref,
                    "tool_name": op.tool_name,
                    "args_digest": op.args_digest,
                    "task_id": task_id,
                    "status": status.value,
                    "status_message": (
                        scrub_task_id(status_message, task_id, ref) if status_message else None
                    ),
                    "lost_reason": None,
                    "lost_detail": None,
                    "server_created_at": server_created_at,
                    "server_updated_at": server_updated_at,
                    "ttl_ms": ttl_ms,
                    "poll_interval_ms": poll_interval_ms,
                    # Even a task created terminal is polled once: its result comes from
                    # tasks/get, and the handle is only let go once the result is stored.
                    "next_poll_due_ms": now if next_poll_due_ms is None else next_poll_due_ms,
                    "result_json": None,
                    "error_json": None,
                    "outcome_truncated": False,
                    "outcome_bytes": None,
                    "cancel_requested_at_ms": None,
                    "cancel_acknowledged_at_ms": None,
                    "detached_at_ms": None,
                    "terminal_at_ms": None,
                    "lease_owner": lease.replica_id if lease is not None else None,
                    "lease_incarnation": lease.incarnation if lease is not None else None,
                    "created_at_ms": now,
                    "updated_at_ms": now,
                    "task_generation": task_generation,
                    "acknowledged_at_ms": None,
                }
            )
            cursor.run(hot.insert_task, values)
            if announce is not None:
                cursor.run(announce, {"payload": f"{run_ref} {seq}"})
            return seq

        def settle(seq: int) -> TaskView:
            ledger._notify(principal, values["run_ref"], seq, announced=announce is not None)
            return TaskView.from_row(SimpleNamespace(**values))

        def failed(error: Exception) -> TaskView:
            if not isinstance(error, driver.integrity_error):
                raise error
            dispatch = self._reads.get_dispatch(op_ref)
            holder = self._reads._task_by_handle(dispatch.server_endpoint, task_id)
            if holder is None:
                raise error
            detail = f"server returned the task handle already held by {holder.ref}"
            # On the run of the call that received it (the holder's run did nothing wrong).
            self._runs.record_anomaly(
                dispatch.run_ref, "duplicate_task_handle", detail, op_ref=op_ref
            )
            raise DuplicateTaskHandle(f"dispatch {op_ref!r}: {detail}") from error

        return StagedCommit(write, settle, failed)

    record_task_created = _committed_alone(stage_task_created, "the handle")

    def _advance_on_call_path(
        self,
        cursor: Cursor,
        op_ref: str,
        expected: CallState,
        target: CallState,
        now: int,
        *,
        task_ref: str | None = None,
    ) -> Any:
        """Guarded ``expected -> target`` move of a dispatch, returning the updated row."""
        assert may_advance_dispatch(expected, target)
        row = cursor.one(
            self._call_path.advance_dispatch,
            {
                "op_ref": op_ref,
                "owner": self.principal,
                "from_state": expected.value,
                "to_state": target.value,
                "now": now,
                "result_json": None,
                "result_truncated": False,
                "task_ref": task_ref,
            },
        )
        if row is None:
            self._refuse_call_path_move(op_ref, target)
        return SimpleNamespace(**row)

    def _refuse_call_path_move(self, op_ref: str, target: CallState) -> NoReturn:
        current = self._reads.get_dispatch(op_ref).state  # NotFound for a foreign/unknown ref
        raise InvalidTransition(
            f"dispatch {op_ref!r} cannot go from {current.value} to {target.value}"
        )

    def record_call_error(self, op_ref: str, error: dict[str, Any]) -> CallView:
        """The server answered ``tools/call`` with a JSON-RPC error: a definite, failed reply.

        Stored as the dispatch's result ``{"error": {code, message, data}}``; nothing started.
        """
        return self._settle_with_result(op_ref, {"error": error}, rpc_error=True)

    def _advance_dispatch(self, tx: Tx, row: Any, target: CallState, **values: Any) -> None:
        current = CallState(row.state)
        if not may_advance_dispatch(current, target):
            raise InvalidTransition(
                f"dispatch {row.ref!r} cannot go from {current.value} to {target.value}"
            )
        self._update_row(
            tx, DISPATCHES, row.ref, state=target.value, updated_at_ms=self.now, **values
        )

    # -- admission verdicts on unknown outcomes ----------------------------------------------
    def record_admission(
        self,
        op_ref: str,
        admission: Admission,
        decided_by: Literal["hook", "host"],
        by: str = "",
    ) -> ev.CallAdmissionChecked:
        """Record whether the unknown-outcome call ``op_ref`` was admitted.

        Raises :class:`~bridge.errors.InvalidTransition` unless the dispatch is ``unknown`` and
        has no final verdict yet (an admitted call is never declared not admitted later, nor
        the reverse). ``by``: who gave it (an operator's name), kept on the event.
        """
        with self._write() as tx:
            row = self._dispatch_row(tx.conn, op_ref, lock=True)
            if CallState(row.state) is not CallState.UNKNOWN:
                raise InvalidTransition(
                    f"dispatch {op_ref!r} is {row.state}: only an unknown outcome is resolved"
                )
            previous = self._latest_admission(tx.conn, row.run_ref, op_ref)
            if previous is not None and previous.is_final:
                raise InvalidTransition(
                    f"dispatch {op_ref!r} was already resolved as {previous.value}"
                )
            event = ev.CallAdmissionChecked(
                op_ref=op_ref,
                tool=row.tool_name,
                server=row.server_name or row.server_endpoint,
                admission=admission,
                decided_by=decided_by,
                by=by or decided_by,
            )
            appended = self._append(tx, row.run_ref, event)
            if admission.is_final:  # it leaves the open work the attention query reads
                self._update_row(tx, DISPATCHES, op_ref, resolved_at_ms=self.now)
        assert isinstance(appended, ev.CallAdmissionChecked)
        return appended

    def admission_of(self, op_ref: str) -> Admission | None:
        """The latest admission verdict on ``op_ref`` (``None``: never checked)."""
        dispatch = self._reads.get_dispatch(op_ref)
        with self._read() as conn:
            return self._latest_admission(conn, dispatch.run_ref, op_ref)

    def _latest_admission(self, conn: Connection, run_ref: str, op_ref: str) -> Admission | None:
        rows = conn.execute(
            select(EVENTS.c.payload_json)
            .where(self._owned(EVENTS), EVENTS.c.run_ref == run_ref, EVENTS.c.type == _CHECKED)
            .order_by(EVENTS.c.seq.desc())
        )
        for (payload,) in rows:
            data = json.loads(payload)
            if data.get("op_ref") == op_ref:
                return Admission(data["admission"])
        return None
