"""Durable state of the report harness: responses, their event logs and idempotency keys.

Own tables (prefix ``harness_``) in the same database as the bridge's ledger (SQLite file or
PostgreSQL URL). Every stream event is appended together with the response snapshot it
produced, in one transaction, so the stored response and the stored event log never disagree:
after a crash the log is the exact prefix of what clients may have seen, and the response row
says how far the scripted agent got (``step``) and how far the bridge's event log was forwarded
(``bridge_cursor``). Deltas (:data:`DELTA_EVENTS`) are the exception that keeps streaming
linear: one is appended without a snapshot, and reading an unfinished response folds the
deltas after its last snapshot into it (:func:`fold_delta`), so every read still sees the text
streamed so far.

All methods are synchronous. Reads run in a worker thread; the writes of a response
(:mod:`.writes`) may run on the event loop where :attr:`HarnessStore.writes_inline` says so
(SQLite), in a worker thread otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, func
from sqlmodel import Session, col, select

from bridge.uhp.serving import Cursor, KeyRecord, create_ledger_engine
from harness_examples.report_harness.tables import (
    TABLES,
    HarnessEvent,
    HarnessIdempotency,
    HarnessResponse,
    HarnessTable,
)
from harness_examples.report_harness.writes import StoreWrite, StoreWrites

TERMINAL = frozenset({"completed", "failed", "incomplete", "cancelled"})
#: Events stored without a response snapshot (what they add is derived on read).
DELTA_EVENTS = frozenset({"response.output_text.delta", "response.function_call_arguments.delta"})


def fold_delta(body: dict[str, Any], event: dict[str, Any]) -> None:
    """Apply one delta event to the response ``body`` it was emitted for."""
    item = body["output"][event["output_index"]]
    if event["type"] == "response.output_text.delta":
        item["content"][event["content_index"]]["text"] += event["delta"]
    else:
        item["arguments"] += event["delta"]


@dataclass(frozen=True)
class StoredResponse:
    id: str
    principal: str
    session_id: str
    harness_id: str
    status: str
    body: dict[str, Any]
    input_items: list[Any]
    request: dict[str, Any]
    step: int
    next_seq: int
    bridge_run_ref: str | None
    bridge_cursor: int
    deleted: bool

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def of(cls, row: HarnessResponse, pending_deltas: Sequence[str] = ()) -> StoredResponse:
        body = json.loads(row.body)
        for delta in pending_deltas:
            fold_delta(body, json.loads(delta))
        return cls(
            id=row.id,
            principal=row.principal,
            session_id=row.session_id,
            harness_id=row.harness_id,
            status=row.status,
            body=body,
            input_items=json.loads(row.input_items),
            request=json.loads(row.request),
            step=row.step,
            next_seq=row.next_seq,
            bridge_run_ref=row.bridge_run_ref,
            bridge_cursor=row.bridge_cursor,
            deleted=row.deleted,
        )


def _read(s: Session, row: HarnessResponse) -> StoredResponse:
    """The response as stored; an unfinished one with the deltas after its last snapshot."""
    if row.status in TERMINAL:
        return StoredResponse.of(row)
    last_snapshot = s.exec(
        select(func.max(HarnessEvent.seq)).where(
            HarnessEvent.response_id == row.id, col(HarnessEvent.type).not_in(DELTA_EVENTS)
        )
    ).one()
    pending = s.exec(
        select(HarnessEvent.data)
        .where(
            HarnessEvent.response_id == row.id,
            HarnessEvent.seq > (-1 if last_snapshot is None else last_snapshot),
        )
        .order_by(col(HarnessEvent.seq))
    ).all()
    return StoredResponse.of(row, pending)


class HarnessStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Reads begin a deferred transaction (the ledger's SQLite dialect begins writers with
        # BEGIN IMMEDIATE): another process holding the write lock delays writes, not reads.
        self.reader = engine.execution_options(bridge_read=True)
        self.writes = StoreWrites(engine)  # the hot writes, on the driver's own connection

    @property
    def writes_inline(self) -> bool:
        """Whether :meth:`create` and the writes of a :meth:`transaction` may run on the event
        loop (SQLite: tens of microseconds each) rather than in a worker thread."""
        return self.writes.inline

    @classmethod
    def open(cls, url: str) -> HarnessStore:
        engine = create_ledger_engine(url)  # same tuning as the bridge's ledger (WAL, busy wait)
        HarnessTable.metadata.create_all(engine, tables=TABLES)
        return cls(engine)

    def close(self) -> None:
        self.writes.close()
        self.engine.dispose()

    # -- responses ---------------------------------------------------------------------
    def create(
        self,
        *,
        principal: str,
        body: dict[str, Any],
        input_items: list[Any],
        request: dict[str, Any],
        idempotency_key: str | None,
        fingerprint: str,
    ) -> None:
        """Store a new response and, in the same transaction, its idempotency key record."""
        self.writes.create(
            principal=principal,
            body=body,
            input_items=input_items,
            request=request,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
        )

    def get(self, response_id: str, principal: str | None = None) -> StoredResponse | None:
        """The response, or None when unknown, deleted or owned by another principal."""
        with Session(self.reader) as s:
            row = s.get(HarnessResponse, response_id)
            if row is None or row.deleted:
                return None
            if principal is not None and row.principal != principal:
                return None
            return _read(s, row)

    def idempotent(self, principal: str, key: str) -> KeyRecord | None:
        """What the key maps to for this principal (the kit decides whether it is a replay)."""
        with Session(self.reader) as s:
            row = s.get(HarnessIdempotency, (principal, key))
            return KeyRecord(row.response_id, row.fingerprint) if row is not None else None

    def session(self, principal: str, session_id: str) -> list[StoredResponse]:
        with Session(self.reader) as s:
            rows = s.exec(
                select(HarnessResponse)
                .where(
                    HarnessResponse.principal == principal,
                    HarnessResponse.session_id == session_id,
                )
                .order_by(col(HarnessResponse.created_at), col(HarnessResponse.updated_at))
            ).all()
            return [_read(s, r) for r in rows]

    def in_progress(self) -> list[StoredResponse]:
        with Session(self.reader) as s:
            rows = s.exec(
                select(HarnessResponse).where(HarnessResponse.status == "in_progress")
            ).all()
            return [_read(s, r) for r in rows]

    def mark_deleted(self, response_ids: list[str]) -> None:
        with Session(self.engine) as s:
            for rid in response_ids:
                row = s.get(HarnessResponse, rid)
                if row is not None:
                    row.deleted = True
                    s.add(row)
            s.commit()

    # -- the event log -----------------------------------------------------------------
    def append(
        self,
        response_id: str,
        seq: int,
        event_type: str,
        event_json: str,
        body_json: str | None,
        status: str,
    ) -> None:
        """Append one event and store the response snapshot it produced, atomically (a delta
        comes without one: ``body_json`` None keeps the last snapshot)."""
        event = (event_type, event_json)
        self.commit_all([self.appending(response_id, seq, [event], body_json, status)])

    def appending(
        self,
        response_id: str,
        first_seq: int,
        events: Sequence[tuple[str, str]],
        body_json: str | None,
        status: str,
        *,
        step: int | None = None,
        bridge_cursor: int | None = None,
    ) -> StoreWrite:
        """The write appending ``(type, json)`` events numbered from ``first_seq`` on and the
        snapshot the last one produced, for :meth:`commit_all`. ``body_json`` must be the body
        as of the last event: None only when every event is a delta (a read folds deltas after
        the last snapshot, so a snapshot taken after a trailing delta would have it applied
        twice)."""
        if not events:
            raise ValueError("no events to append")
        ends_in_delta = events[-1][0] in DELTA_EVENTS
        if (body_json is None) != ends_in_delta or (
            ends_in_delta and any(t not in DELTA_EVENTS for t, _ in events)
        ):
            raise ValueError(
                "a snapshot goes with events that end in a non-delta; deltas alone go without"
            )
        return self.writes.appending(
            response_id, first_seq, events, body_json, status, step, bridge_cursor
        )

    def setting_bridge_run(self, response_id: str, run_ref: str) -> StoreWrite:
        return self.writes.setting_bridge_run(response_id, run_ref)

    def transaction(self) -> AbstractContextManager[Cursor]:
        """One transaction for the writes of :meth:`appending` and :meth:`setting_bridge_run`
        (what a group commit shares between concurrent runs)."""
        return self.writes.transaction()

    def commit_all(self, writes: Sequence[StoreWrite]) -> None:
        """``writes`` (from :meth:`appending`, :meth:`setting_bridge_run`) in one transaction:
        all committed, or none."""
        self.writes.commit_all(writes)

    def events_after(self, response_id: str, after_seq: int) -> list[tuple[int, str, str]]:
        """``(seq, type, json)`` of the events with ``seq > after_seq``, in order."""
        with Session(self.reader) as s:
            rows = s.exec(
                select(HarnessEvent)
                .where(HarnessEvent.response_id == response_id, HarnessEvent.seq > after_seq)
                .order_by(col(HarnessEvent.seq))
            ).all()
            return [(r.seq, r.type, r.data) for r in rows]

    def purge(self, response_id: str) -> None:
        """Forget a response entirely (not used by the API, which soft-deletes)."""
        with Session(self.engine) as s:
            s.exec(delete(HarnessEvent).where(col(HarnessEvent.response_id) == response_id))
            s.exec(delete(HarnessResponse).where(col(HarnessResponse.id) == response_id))
            s.commit()
