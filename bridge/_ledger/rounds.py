"""The call-rounds aggregate (MRTR): a ``tools/call`` the server answered with an
``InputRequiredResult`` before any task existed.

Each such reply is one *round*, numbered by the leg that received it (leg 1 is the original
request). Its input requests go to the same table as a task's (``bridge_input_requests``, keyed
by ``op_ref`` + ``leg`` instead of ``task_ref``): inserted once, surfaced once
(``call.input_required`` in the same transaction), answered at most once. The next leg is
committed as ``sent`` (write-ahead) before it leaves, so a crash between the last answer and the
retry leaves the dispatch ``input_required`` with every answer recorded — a restart sends that
leg — and a crash after it leaves it ``sent`` (unknown, as any call in flight).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, or_, select, update

from bridge import events as ev
from bridge._errors import InputAlreadyAnswered, InvalidTransition, UnknownInputKey
from bridge._ids import INPUT_PREFIX, canonical_json, new_ref
from bridge._ledger._base import DISPATCHES, INPUTS, Tx
from bridge._ledger.input_bounds import (
    MAX_OPEN_INPUTS_PER_TASK,
    TOO_LARGE,
    TOO_MANY,
    bound_params,
    too_large_detail,
    too_many_detail,
)
from bridge._ledger.inputs import input_request_digest, write_answer
from bridge._ledger.reads.queries import WriteScope
from bridge._ledger.reads.views import CallInputView, CallView
from bridge._ledger.schema.models import CallRound
from bridge._lifecycle import CallState, may_advance_dispatch

ROUNDS = cast(Table, CallRound.__table__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class RetryLeg:
    """The next leg of a call, committed as sent: what to send again."""

    dispatch: CallView
    leg: int
    arguments: dict[str, Any] = field(repr=False)
    request_state: str | None = field(repr=False)  # opaque; echoed verbatim, never logged
    responses: dict[str, Any] = field(repr=False)  # answers keyed by the server's keys


class CallRoundWrites(WriteScope):
    """Writes and reads of MRTR rounds and their input requests."""

    def record_input_round(
        self,
        op_ref: str,
        requests: dict[str, dict[str, Any]],
        *,
        request_state: str | None,
        arguments: dict[str, Any],
    ) -> list[CallInputView]:
        """The dispatch (``sent``) got an ``InputRequiredResult``: record the round, surface its
        inputs once, and move the dispatch to ``input_required`` — one transaction."""
        with self._write() as tx:
            row = self._dispatch_row(tx.conn, op_ref, lock=True)
            self._move(tx, row, CallState.SENT, CallState.INPUT_REQUIRED)
            leg = self._last_leg(tx.conn, op_ref) + 1
            now = self.now
            tx.conn.execute(
                insert(ROUNDS).values(
                    principal=self.principal,
                    op_ref=op_ref,
                    leg=leg,
                    request_state=request_state,
                    arguments_json=canonical_json(arguments).decode("utf-8"),
                    received_at_ms=now,
                )
            )
            kept = list(requests.items())[:MAX_OPEN_INPUTS_PER_TASK]
            for key, request in kept:
                self._surface(tx, row, leg, key, request, now)
            if len(requests) > len(kept):
                detail = too_many_detail(len(requests) - len(kept))
                self._append(
                    tx, row.run_ref, ev.Anomaly(kind=TOO_MANY, detail=detail, op_ref=op_ref)
                )
        return self.call_inputs(op_ref, leg=leg)

    def _surface(
        self, tx: Tx, row: Any, leg: int, key: str, request: dict[str, Any], now: int
    ) -> None:
        method = str(request.get("method", ""))
        params = request.get("params") or {}
        input_ref = new_ref(INPUT_PREFIX)
        bounded = bound_params(params)
        tx.conn.execute(
            insert(INPUTS).values(
                ref=input_ref,
                principal=self.principal,
                task_ref=None,
                op_ref=row.ref,
                leg=leg,
                key=key,
                method=method,
                params_json=canonical_json(bounded.params).decode("utf-8"),
                payload_digest=input_request_digest(method, params),
                first_seen_ms=now,
                surfaced_at_ms=now,
            )
        )
        self._append(
            tx,
            row.run_ref,
            ev.CallInputRequired(
                op_ref=row.ref,
                tool=row.tool_name,
                server=row.server_name or row.server_endpoint,
                leg=leg,
                input_ref=input_ref,
                method=method,
                params=bounded.params,
            ),
        )
        if bounded.too_large:
            detail = too_large_detail(input_ref, bounded.original_bytes)
            self._append(tx, row.run_ref, ev.Anomaly(kind=TOO_LARGE, detail=detail, op_ref=row.ref))

    def record_call_input_answer(
        self, op_ref: str, input_ref: str, response: Any
    ) -> tuple[CallInputView, bool]:
        """Record the host's answer to one input of the call's current leg, exactly once.

        ``input_ref`` is the request's reference (``in_…``) or the server's key. Returns the
        request and whether every input of the leg is now answered (the next leg may go)."""
        with self._write() as tx:
            row, leg, request = self._open_call_input(tx, op_ref, input_ref)
            ready = self._write_call_answer(tx, row, leg, request, response)
        return self._call_input_view(op_ref, leg, request.ref), ready

    def record_call_input_declined(
        self,
        op_ref: str,
        input_ref: str,
        reason: ev.DeclineReason,
        answer: dict[str, Any] | None,
    ) -> tuple[CallInputView, bool]:
        """The bridge declines one input of the call's current leg (input policy), once.

        With ``answer`` (an elicitation's ``{"action": "decline"}``) it is recorded like the
        host's answer, in the same transaction; returns whether the leg is now fully answered.
        Without one (sampling has no decline shape) nothing is recorded but the event: the
        request stays pending for the host, since nothing could complete the leg instead."""
        with self._write() as tx:
            row, leg, request = self._open_call_input(tx, op_ref, input_ref)
            if answer is not None:
                tx.conn.execute(
                    update(INPUTS).where(INPUTS.c.id == request.id).values(declined_at_ms=self.now)
                )
            self._append(
                tx,
                row.run_ref,
                ev.CallInputDeclined(
                    **self._call_input_fields(row, leg, request),
                    method=request.method,
                    reason=reason,
                    answered=answer is not None,
                ),
            )
            ready = answer is not None and self._write_call_answer(tx, row, leg, request, answer)
        return self._call_input_view(op_ref, leg, request.ref), ready

    def record_call_input_handler_failed(
        self,
        op_ref: str,
        input_ref: str,
        failure: ev.HandlerFailure,
        detail: str,
        action: ev.HandlerFailedAction,
    ) -> None:
        """The host's handler gave no usable answer to a call's input; only this is recorded."""
        with self._write() as tx:
            row, leg, request = self._open_call_input(tx, op_ref, input_ref)
            self._append(
                tx,
                row.run_ref,
                ev.CallInputHandlerFailed(
                    **self._call_input_fields(row, leg, request),
                    method=request.method,
                    failure=failure,
                    detail=detail[:300],
                    action=action,
                ),
            )

    def _open_call_input(self, tx: Tx, op_ref: str, input_ref: str) -> tuple[Any, int, Any]:
        """The locked dispatch, its current leg and that leg's unanswered request."""
        row = self._dispatch_row(tx.conn, op_ref, lock=True)
        leg = self._last_leg(tx.conn, op_ref)
        request = tx.conn.execute(
            select(INPUTS).where(
                self._owned(INPUTS),
                INPUTS.c.op_ref == op_ref,
                or_(INPUTS.c.ref == input_ref, INPUTS.c.key == input_ref),
                INPUTS.c.leg == leg,
            )
        ).first()
        if request is None:
            raise UnknownInputKey(f"call {op_ref!r} has no open input request {input_ref!r}")
        if request.answered_at_ms is not None or row.state != CallState.INPUT_REQUIRED:
            raise InputAlreadyAnswered(f"input request {request.ref} was already answered")
        return row, leg, request

    def _write_call_answer(self, tx: Tx, row: Any, leg: int, request: Any, response: Any) -> bool:
        """Record ``response`` for ``request``; is every input of the leg now answered?"""
        write_answer(tx, request.id, response, self.now)
        self._append(
            tx, row.run_ref, ev.CallInputAnswered(**self._call_input_fields(row, leg, request))
        )
        return self._unanswered(tx.conn, row.ref, leg) == 0

    @staticmethod
    def _call_input_fields(row: Any, leg: int, request: Any) -> dict[str, Any]:
        return {
            "op_ref": row.ref,
            "tool": row.tool_name,
            "server": row.server_name or row.server_endpoint,
            "leg": leg,
            "input_ref": request.ref,
        }

    def _call_input_view(self, op_ref: str, leg: int, input_ref: str) -> CallInputView:
        return next(i for i in self.call_inputs(op_ref, leg=leg) if i.ref == input_ref)

    def begin_retry_leg(self, op_ref: str) -> RetryLeg | None:
        """Commit the next leg as ``sent`` (before it leaves) and hand back what it sends;
        ``None`` when the call is not waiting with every input of its leg answered (another
        process took the leg, or inputs remain)."""
        with self._write() as tx:
            row = self._dispatch_row(tx.conn, op_ref, lock=True)
            if row.state != CallState.INPUT_REQUIRED:
                return None
            leg = self._last_leg(tx.conn, op_ref)
            if self._unanswered(tx.conn, op_ref, leg):
                return None
            round_ = tx.conn.execute(
                select(ROUNDS).where(
                    self._owned(ROUNDS), ROUNDS.c.op_ref == op_ref, ROUNDS.c.leg == leg
                )
            ).one()
            answers = tx.conn.execute(
                select(INPUTS.c.key, INPUTS.c.answer_json).where(
                    self._owned(INPUTS), INPUTS.c.op_ref == op_ref, INPUTS.c.leg == leg
                )
            ).all()
            now = self.now
            tx.conn.execute(
                update(ROUNDS).where(ROUNDS.c.id == round_.id).values(retried_at_ms=now)
            )
            # Delivered with this leg: the kept answers are not needed any more.
            tx.conn.execute(
                update(INPUTS)
                .where(self._owned(INPUTS), INPUTS.c.op_ref == op_ref, INPUTS.c.leg == leg)
                .values(delivered_at_ms=now, answer_json=None)
            )
            self._move(tx, row, CallState.INPUT_REQUIRED, CallState.SENT)
        return RetryLeg(
            dispatch=self._reads.get_dispatch(op_ref),
            leg=leg + 1,
            arguments=json.loads(round_.arguments_json),
            request_state=round_.request_state,
            responses={key: json.loads(answer) for key, answer in answers},
        )

    # -- reads -------------------------------------------------------------------------------
    def current_leg(self, op_ref: str) -> int:
        """The leg of the call's latest round (0: the call never got an InputRequiredResult)."""
        with self._read() as conn:
            self._dispatch_row(conn, op_ref)  # NotFound for a foreign or unknown reference
            return self._last_leg(conn, op_ref)

    def call_inputs(
        self, op_ref: str, *, leg: int | None = None, pending_only: bool = False
    ) -> list[CallInputView]:
        """The input requests of a call (of one leg), in the order the server sent them."""
        query = select(INPUTS).where(self._owned(INPUTS), INPUTS.c.op_ref == op_ref)
        if leg is not None:
            query = query.where(INPUTS.c.leg == leg)
        if pending_only:
            query = query.where(INPUTS.c.answered_at_ms.is_(None))
        with self._read() as conn:
            return [CallInputView.from_row(r) for r in conn.execute(query.order_by(INPUTS.c.id))]

    def pending_call_inputs(self, run_ref: str | None = None) -> list[CallInputView]:
        """Unanswered inputs of every call waiting for input (of one run), oldest first."""
        query = (
            select(INPUTS)
            .join(DISPATCHES, DISPATCHES.c.ref == INPUTS.c.op_ref)
            .where(
                self._owned(INPUTS),
                self._owned(DISPATCHES),
                DISPATCHES.c.state == CallState.INPUT_REQUIRED.value,
                INPUTS.c.answered_at_ms.is_(None),
            )
            .order_by(INPUTS.c.id)
        )
        if run_ref is not None:
            query = query.where(DISPATCHES.c.run_ref == run_ref)
        with self._read() as conn:
            return [CallInputView.from_row(r) for r in conn.execute(query)]

    def calls_ready_to_retry(self) -> list[str]:
        """Calls waiting for input whose current leg is fully answered but not yet re-sent
        (the process stopped in between): their next leg is due."""
        waiting = select(DISPATCHES.c.ref).where(
            self._owned(DISPATCHES),
            DISPATCHES.c.state == CallState.INPUT_REQUIRED.value,
        )
        with self._read() as conn:
            refs = [ref for (ref,) in conn.execute(waiting.order_by(DISPATCHES.c.created_at_ms))]
            return [r for r in refs if self._unanswered(conn, r, self._last_leg(conn, r)) == 0]

    def _last_leg(self, conn: Connection, op_ref: str) -> int:
        last = conn.execute(
            select(func.max(ROUNDS.c.leg)).where(self._owned(ROUNDS), ROUNDS.c.op_ref == op_ref)
        ).scalar()
        return int(last or 0)

    def _unanswered(self, conn: Connection, op_ref: str, leg: int) -> int:
        return int(
            conn.execute(
                select(func.count()).where(
                    self._owned(INPUTS),
                    INPUTS.c.op_ref == op_ref,
                    INPUTS.c.leg == leg,
                    INPUTS.c.answered_at_ms.is_(None),
                )
            ).scalar_one()
        )

    def _move(self, tx: Tx, row: Any, expected: CallState, target: CallState) -> None:
        if row.state != expected.value or not may_advance_dispatch(expected, target):
            raise InvalidTransition(
                f"dispatch {row.ref!r} cannot go from {row.state} to {target.value}"
            )
        self._update_row(tx, DISPATCHES, row.ref, state=target.value, updated_at_ms=self.now)
