"""Admission verdicts on dispatches whose outcome is unknown (request sent, no handle).

A verdict is an event on the dispatch's run (``call.admission_checked``), written only while
the dispatch is ``unknown``: the dispatch itself never moves again (a settled dispatch is
final), and the verdict says what may be done about it. A final verdict (``admitted`` or
``not_admitted``) is given once; ``unknown`` may be given any number of times until then.
"""

from __future__ import annotations

import json
from typing import Literal

from sqlalchemy import Connection, select

from bridge import events as ev
from bridge._errors import InvalidTransition
from bridge._ledger._base import EVENTS
from bridge._ledger.runs import RunWrites
from bridge._lifecycle import Admission, CallState

_CHECKED: str = ev.CallAdmissionChecked.model_fields["type"].default


class AdmissionWrites(RunWrites):
    """Record and read admission verdicts."""

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
        assert isinstance(appended, ev.CallAdmissionChecked)
        return appended

    def admission_of(self, op_ref: str) -> Admission | None:
        """The latest admission verdict on ``op_ref`` (``None``: never checked)."""
        dispatch = self.get_dispatch(op_ref)
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
