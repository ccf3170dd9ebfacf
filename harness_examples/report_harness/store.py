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

All methods are synchronous (call them from a worker thread).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Text, delete, func
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import registry
from sqlmodel import Column, Field, Session, SQLModel, col, select

from bridge.ledger.engine import create_ledger_engine
from bridge.uhp.serving import KeyRecord

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


class HarnessTable(SQLModel, registry=registry()):
    """Base of the harness's tables: their own metadata, apart from the bridge ledger's (whose
    migrations describe ``SQLModel.metadata`` exactly)."""


class HarnessResponse(HarnessTable, table=True):
    __tablename__ = "harness_responses"

    id: str = Field(primary_key=True)
    principal: str = Field(index=True)
    session_id: str = Field(index=True)
    harness_id: str
    status: str = Field(index=True)
    created_at: int
    updated_at: float
    body: str = Field(sa_column=Column(Text, nullable=False))  # the response object (JSON)
    input_items: str = Field(sa_column=Column(Text, nullable=False))  # JSON list
    request: str = Field(sa_column=Column(Text, nullable=False))  # what the agent needs (JSON)
    step: int = 0  # completed steps of the scripted plan
    next_seq: int = 0  # next sequence_number of the event log
    bridge_run_ref: str | None = None
    bridge_cursor: int = 0  # last bridge event seq forwarded into the log
    deleted: bool = False


class HarnessEvent(HarnessTable, table=True):
    __tablename__ = "harness_events"

    response_id: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    type: str
    data: str = Field(sa_column=Column(Text, nullable=False))


class HarnessIdempotency(HarnessTable, table=True):
    __tablename__ = "harness_idempotency"

    principal: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    response_id: str
    fingerprint: str  # of the first request's body (bridge.uhp.serving.request_fingerprint)
    created_at: float


TABLES = [
    HarnessResponse.__table__,  # type: ignore[attr-defined]
    HarnessEvent.__table__,  # type: ignore[attr-defined]
    HarnessIdempotency.__table__,  # type: ignore[attr-defined]
]


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


class IdempotencyConflict(Exception):
    """Another request registered the same Idempotency-Key first."""

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id


class HarnessStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Reads begin a deferred transaction (the ledger's SQLite dialect begins writers with
        # BEGIN IMMEDIATE): another process holding the write lock delays writes, not reads.
        self.reader = engine.execution_options(bridge_read=True)

    @classmethod
    def open(cls, url: str) -> HarnessStore:
        engine = create_ledger_engine(url)  # same tuning as the bridge's ledger (WAL, busy wait)
        HarnessTable.metadata.create_all(engine, tables=TABLES)
        return cls(engine)

    def close(self) -> None:
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
        meta = body["metadata"]
        with Session(self.engine) as s:
            if idempotency_key is not None:
                existing = s.get(HarnessIdempotency, (principal, idempotency_key))
                if existing is not None:
                    raise IdempotencyConflict(existing.response_id)
                s.add(
                    HarnessIdempotency(
                        principal=principal,
                        key=idempotency_key,
                        response_id=body["id"],
                        fingerprint=fingerprint,
                        created_at=time.time(),
                    )
                )
            s.add(
                HarnessResponse(
                    id=body["id"],
                    principal=principal,
                    session_id=meta["session_id"],
                    harness_id=meta["harness_id"],
                    status=body["status"],
                    created_at=body["created_at"],
                    updated_at=time.time(),
                    body=json.dumps(body),
                    input_items=json.dumps(input_items),
                    request=json.dumps(request),
                )
            )
            try:
                s.commit()
            except IntegrityError:
                s.rollback()
                if idempotency_key is None:
                    raise
                existing = s.get(HarnessIdempotency, (principal, idempotency_key))
                if existing is None:
                    raise
                raise IdempotencyConflict(existing.response_id) from None

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

    def set_bridge_run(self, response_id: str, run_ref: str) -> None:
        with Session(self.engine) as s:
            row = s.get(HarnessResponse, response_id)
            assert row is not None
            row.bridge_run_ref = run_ref
            s.add(row)
            s.commit()

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
        *,
        step: int | None = None,
        bridge_cursor: int | None = None,
    ) -> None:
        """Append one event and store the response snapshot it produced, atomically (a delta
        comes without one: ``body_json`` None keeps the last snapshot)."""
        with Session(self.engine) as s:
            row = s.get(HarnessResponse, response_id)
            assert row is not None
            s.add(HarnessEvent(response_id=response_id, seq=seq, type=event_type, data=event_json))
            if body_json is not None:
                row.body = body_json
            row.status = status
            row.next_seq = seq + 1
            row.updated_at = time.time()
            if step is not None:
                row.step = step
            if bridge_cursor is not None:
                row.bridge_cursor = bridge_cursor
            s.add(row)
            s.commit()

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
