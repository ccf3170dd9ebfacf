"""The report harness's tables (prefix ``harness_``), in the same database as the bridge's
ledger: responses, their event logs and idempotency keys (see :mod:`.store`)."""

from __future__ import annotations

from sqlalchemy import Table, Text
from sqlalchemy.orm import registry
from sqlmodel import Column, Field, SQLModel


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


RESPONSES: Table = HarnessResponse.__table__  # type: ignore[attr-defined]
EVENTS: Table = HarnessEvent.__table__  # type: ignore[attr-defined]
IDEMPOTENCY: Table = HarnessIdempotency.__table__  # type: ignore[attr-defined]
TABLES = [RESPONSES, EVENTS, IDEMPOTENCY]
