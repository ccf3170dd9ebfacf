"""The input-requests aggregate: each ``inputRequests`` key of a task seen, surfaced and
answered at most once; answers kept until the server acknowledges them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, or_, select, update

from bridge import events as ev
from bridge._errors import InputAlreadyAnswered, TaskWasLost, UnknownInputKey
from bridge._ids import INPUT_PREFIX, canonical_json, new_ref, sha256_hex
from bridge._ledger._base import EVENTS, INPUTS, TASKS, Tx
from bridge._ledger.fencing import Membership, check_lease
from bridge._ledger.input_bounds import (
    MAX_OPEN_INPUTS_PER_TASK,
    TOO_LARGE,
    TOO_MANY,
    bound_params,
    too_large_detail,
    too_many_detail,
)
from bridge._ledger.reads.queries import WriteScope
from bridge._ledger.reads.views import InputRequestView

_ANOMALY: str = ev.Anomaly.model_fields["type"].default


def input_request_digest(method: str, params: Any) -> str:
    """Identity of one input request's payload, to tell a repeat from a reused key."""
    return sha256_hex(canonical_json({"method": method, "params": params}))


def write_answer(tx: Tx, request_id: int, response: Any, now: int) -> None:
    """Record ``response`` as the answer to an input request (a task's or a call's), kept until
    the server has it."""
    encoded = canonical_json(response)
    tx.conn.execute(
        update(INPUTS)
        .where(INPUTS.c.id == request_id)
        .values(
            answer_digest=sha256_hex(encoded),
            answer_json=encoded.decode("utf-8"),
            answered_at_ms=now,
        )
    )


def _refuse_if_lost(row: Any, input_ref: str) -> None:
    if row.lost_reason is not None and row.terminal_at_ms is None:
        raise TaskWasLost(
            f"task {row.ref} was lost ({row.lost_reason}): its input request {input_ref} was "
            "closed with it; nothing was recorded or sent"
        )


class InputWrites(WriteScope):
    """Writes of input requests and their answers."""

    def _record_input_requests(
        self, tx: Tx, row: Any, requests: dict[str, dict[str, Any]]
    ) -> list[ev.BridgeEvent]:
        """Record each new key once and surface it once; flag a key reused for a new payload."""
        appended: list[ev.BridgeEvent] = []
        known = {
            r.key: r
            for r in tx.conn.execute(
                select(INPUTS).where(self._owned(INPUTS), INPUTS.c.task_ref == row.ref)
            )
        }
        now = self.now
        waiting = sum(
            1 for r in known.values() if r.answered_at_ms is None and r.declined_at_ms is None
        )
        skipped = 0
        for key, request in requests.items():
            method = str(request.get("method", ""))
            params = request.get("params") or {}
            digest = input_request_digest(method, params)
            seen = known.get(key)
            if seen is None:
                if waiting >= MAX_OPEN_INPUTS_PER_TASK:
                    skipped += 1  # recorded on a later poll, once earlier ones are answered
                    continue
                waiting += 1
                input_ref = new_ref(INPUT_PREFIX)
                bounded = bound_params(params)
                tx.conn.execute(
                    insert(INPUTS).values(
                        ref=input_ref,
                        principal=self.principal,
                        task_ref=row.ref,
                        key=key,
                        method=method,
                        params_json=canonical_json(bounded.params).decode("utf-8"),
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
                        params=bounded.params,
                    )
                )
                if row.lost_reason is not None and row.terminal_at_ms is None:
                    # Asked of a task already lost: closed at once, as its others were.
                    tx.conn.execute(
                        update(INPUTS).where(INPUTS.c.ref == input_ref).values(declined_at_ms=now)
                    )
                    appended.append(
                        self._append_task_event(
                            tx,
                            row,
                            ev.TaskInputDeclined,
                            input_ref=input_ref,
                            method=method,
                            reason="task_lost",
                            answered=False,
                        )
                    )
                if bounded.too_large:
                    detail = too_large_detail(input_ref, bounded.original_bytes)
                    anomaly = ev.Anomaly(kind=TOO_LARGE, detail=detail, task_ref=row.ref)
                    appended.append(self._append(tx, row.run_ref, anomaly))
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
        if skipped and not self._reported_once(tx, row.run_ref, row.ref, TOO_MANY):
            anomaly = ev.Anomaly(kind=TOO_MANY, detail=too_many_detail(skipped), task_ref=row.ref)
            appended.append(self._append(tx, row.run_ref, anomaly))
        return appended

    def _reported_once(self, tx: Tx, run_ref: str, task_ref: str, kind: str) -> bool:
        """Whether an anomaly of ``kind`` was recorded on this task already (each poll sees
        the same reply again: it is reported once)."""
        rows = tx.conn.execute(
            select(EVENTS.c.payload_json).where(
                self._owned(EVENTS),
                EVENTS.c.run_ref == run_ref,
                EVENTS.c.task_ref == task_ref,
                EVENTS.c.type == _ANOMALY,
            )
        )
        return any(json.loads(payload).get("kind") == kind for (payload,) in rows)

    def _close_inputs_of_lost_task(self, tx: Tx, row: Any) -> None:
        """A task was lost: its unanswered requests are closed (``task.input_declined`` with
        ``task_lost``), so no view shows them waiting and no answer is taken."""
        open_requests = tx.conn.execute(
            select(INPUTS.c.id, INPUTS.c.ref, INPUTS.c.method).where(
                self._owned(INPUTS),
                INPUTS.c.task_ref == row.ref,
                INPUTS.c.answered_at_ms.is_(None),
                INPUTS.c.declined_at_ms.is_(None),
            )
        ).all()
        if not open_requests:
            return
        tx.conn.execute(
            update(INPUTS)
            .where(INPUTS.c.id.in_([r.id for r in open_requests]))
            .values(declined_at_ms=self.now)
        )
        for request in open_requests:
            self._append_task_event(
                tx,
                row,
                ev.TaskInputDeclined,
                input_ref=request.ref,
                method=request.method,
                reason="task_lost",
                answered=False,
            )

    def record_input_answer(self, task_ref: str, input_ref: str, response: Any) -> InputRequestView:
        """Record the host's answer to one input request, exactly once per request.

        ``input_ref`` is the request's bridge reference (``in_…``, as events name it) or the
        server's key. Committed before ``tasks/update`` is sent; the answer is kept until the
        server acknowledges it, so a restart redelivers it instead of losing it.
        """
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            _refuse_if_lost(row, input_ref)
            request = self._unanswered_input(tx, task_ref, input_ref)
            write_answer(tx, request.id, response, self.now)
            self._append_task_event(tx, row, ev.TaskInputAnswered, input_ref=request.ref)
        return self._input_view(task_ref, request.ref)

    def record_input_declined(
        self,
        task_ref: str,
        input_ref: str,
        reason: ev.DeclineReason,
        answer: Any = None,
    ) -> InputRequestView:
        """The bridge declines one input request (input policy), once, in one transaction.

        With ``answer`` (an elicitation's ``{"action": "decline"}``) it is recorded like the
        host's answer and delivered by the poller before the task's next poll; without one
        (a kind with no decline shape) nothing will be sent. Either way the request is no longer
        pending for the host, and a later answer raises ``InputAlreadyAnswered``.
        """
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            _refuse_if_lost(row, input_ref)
            request = self._unanswered_input(tx, task_ref, input_ref)
            tx.conn.execute(
                update(INPUTS).where(INPUTS.c.id == request.id).values(declined_at_ms=self.now)
            )
            if answer is not None:
                write_answer(tx, request.id, answer, self.now)
            self._append_task_event(
                tx,
                row,
                ev.TaskInputDeclined,
                input_ref=request.ref,
                method=request.method,
                reason=reason,
                answered=answer is not None,
            )
            if answer is not None:
                self._append_task_event(tx, row, ev.TaskInputAnswered, input_ref=request.ref)
        return self._input_view(task_ref, request.ref)

    def record_input_handler_failed(
        self,
        task_ref: str,
        input_ref: str,
        failure: ev.HandlerFailure,
        detail: str,
        action: ev.HandlerFailedAction,
    ) -> None:
        """The host's handler gave no usable answer; nothing of it is recorded but this."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref)
            request = self._unanswered_input(tx, task_ref, input_ref)
            self._append_task_event(
                tx,
                row,
                ev.TaskInputHandlerFailed,
                input_ref=request.ref,
                method=request.method,
                failure=failure,
                detail=detail[:300],
                action=action,
            )

    def record_input_stuck(
        self,
        task_ref: str,
        input_refs: Sequence[str],
        *,
        polls: int,
        waited_ms: int,
        cancel: bool,
        lease: Membership | None = None,
    ) -> list[str]:
        """Report these unanswered requests stuck, each once (``task.input_stuck``). Returns the
        ones newly reported (empty: all answered meanwhile, or reported before)."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            check_lease(row, lease, "task")
            rows = tx.conn.execute(
                select(INPUTS.c.id, INPUTS.c.ref).where(
                    self._owned(INPUTS),
                    INPUTS.c.task_ref == task_ref,
                    INPUTS.c.ref.in_(list(input_refs)),
                    INPUTS.c.answered_at_ms.is_(None),
                    INPUTS.c.stuck_at_ms.is_(None),
                )
            ).all()
            if not rows:
                return []
            tx.conn.execute(
                update(INPUTS)
                .where(INPUTS.c.id.in_([r.id for r in rows]))
                .values(stuck_at_ms=self.now)
            )
            stuck = sorted(r.ref for r in rows)
            self._append_task_event(
                tx,
                row,
                ev.TaskInputStuck,
                input_refs=stuck,
                polls=polls,
                waited_ms=waited_ms,
                cancel=cancel,
            )
        return stuck

    def _unanswered_input(self, tx: Tx, task_ref: str, input_ref: str) -> Any:
        request = tx.conn.execute(
            select(INPUTS).where(
                self._owned(INPUTS),
                INPUTS.c.task_ref == task_ref,
                or_(INPUTS.c.ref == input_ref, INPUTS.c.key == input_ref),
            )
        ).first()
        if request is None:
            raise UnknownInputKey(f"task {task_ref!r} has no input request {input_ref!r}")
        if request.answered_at_ms is not None or request.declined_at_ms is not None:
            raise InputAlreadyAnswered(f"input request {request.ref} was already answered")
        return request

    def _input_view(self, task_ref: str, ref: str) -> InputRequestView:
        return next(r for r in self._reads.input_requests(task_ref) if r.ref == ref)

    def mark_answer_delivered(self, task_ref: str, input_ref: str) -> None:
        """``tasks/update`` carrying this answer was acknowledged: drop the kept answer."""
        with self._write() as tx:
            self._task_row(tx.conn, task_ref)
            updated = tx.conn.execute(
                update(INPUTS)
                .where(
                    self._owned(INPUTS),
                    INPUTS.c.task_ref == task_ref,
                    INPUTS.c.ref == input_ref,
                    INPUTS.c.answered_at_ms.is_not(None),
                )
                .values(delivered_at_ms=self.now, answer_json=None)
            )
            if updated.rowcount == 0:
                raise UnknownInputKey(f"task {task_ref!r} has no answered request {input_ref!r}")

    def record_answer_refused(self, task_ref: str, input_ref: str, reason: str) -> None:
        """The server refused the answer: drop it (never redelivered) and reopen the request,
        so a corrected answer is accepted; ``task.input_answer_refused`` says so."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            tx.conn.execute(
                update(INPUTS)
                .where(
                    self._owned(INPUTS),
                    INPUTS.c.task_ref == task_ref,
                    INPUTS.c.ref == input_ref,
                    INPUTS.c.delivered_at_ms.is_(None),
                )
                .values(answer_digest=None, answer_json=None, answered_at_ms=None)
            )
            self._append_task_event(
                tx, row, ev.TaskInputAnswerRefused, input_ref=input_ref, reason=reason[:300]
            )

    def undelivered_answers(self) -> list[InputRequestView]:
        """Answers recorded but not acknowledged by the server (to redeliver after a restart)."""
        return self._reads._inputs_of_tasks(
            (
                INPUTS.c.answered_at_ms.is_not(None),
                INPUTS.c.delivered_at_ms.is_(None),
                TASKS.c.terminal_at_ms.is_(None),
            ),
            order_by=(INPUTS.c.id,),
        )
