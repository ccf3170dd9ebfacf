"""The report harness's writes, on the database driver's own connection.

Every streamed event is stored with the response snapshot it produced (see :mod:`.store`); the
events of one step go in one write, so a response of a tool call and a short answer writes
eight times instead of nineteen, and the writes of concurrent runs share transactions (the
runtime commits them through the bridge's group commit, a turn of the event loop at a time).
The ledger's machinery comes from :mod:`bridge.uhp.serving` (its host tables), the supported
import for a host's own tables.
Through the ORM each of those transactions costs about a millisecond of CPU, and 200 concurrent
responses made it most of the harness's time. The statements here are SQLAlchemy Core
constructs over the harness's tables, compiled once for the engine's dialect and run by the
ledger's driver session (``dialect_of(engine).driver_session``): tens of microseconds on
SQLite, where a write lock held elsewhere and a database file deleted under the process are handled
as the bridge's ledger handles them (``refuse_if_unavailable``; on an event loop thread a busy
lock raises ``WriteLockBusy`` for a ``LedgerRunner`` to retry).

All methods are synchronous; :attr:`StoreWrites.inline` says whether they may run on the event
loop (SQLite) or belong in a worker thread (PostgreSQL: network round trips).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, Integer, Text, bindparam, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from bridge.uhp.serving import Cursor, dialect_of, refuse_if_unavailable
from harness_examples.report_harness.tables import EVENTS, IDEMPOTENCY, RESPONSES

#: One of the harness's writes, run on the cursor of the transaction that holds it (it may run
#: twice: alone again after a transaction shared with other writes failed).
StoreWrite = Callable[[Cursor], None]


class IdempotencyConflict(Exception):
    """Another request registered the same Idempotency-Key first."""

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id


class StoreWrites:
    """The harness's write transactions, precompiled for one engine."""

    def __init__(self, engine: Engine) -> None:
        dialect = dialect_of(engine)
        self.inline = dialect.runs_calls_inline
        self._session = dialect.driver_session(engine)
        self._driver_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        compiled = self._session.compile
        r = RESPONSES
        self._snapshot = compiled(
            update(r)
            .where(r.c.id == bindparam("response_id"))
            .values(
                # A delta keeps the last snapshot; step and cursor change only when given.
                body=func.coalesce(bindparam("new_body", type_=Text), r.c.body),
                status=bindparam("new_status"),
                next_seq=bindparam("new_next_seq"),
                updated_at=bindparam("now"),
                step=func.coalesce(bindparam("new_step", type_=Integer), r.c.step),
                bridge_cursor=func.coalesce(
                    bindparam("new_cursor", type_=Integer), r.c.bridge_cursor
                ),
            )
        )
        self._event = compiled(insert(EVENTS))
        self._run_ref = compiled(
            update(r)
            .where(r.c.id == bindparam("response_id"))
            .values(bridge_run_ref=bindparam("run_ref"))
        )
        self._key = compiled(
            select(IDEMPOTENCY.c.response_id).where(
                IDEMPOTENCY.c.principal == bindparam("p"), IDEMPOTENCY.c.key == bindparam("k")
            )
        )
        self._new_key = compiled(insert(IDEMPOTENCY))
        self._new_response = compiled(insert(r))

    def close(self) -> None:
        """Give back this thread's connection (the one the event loop's writes used)."""
        self._session.close()

    @contextmanager
    def _as_sqlalchemy_raises(self) -> Iterator[None]:
        """A driver error leaves as the ORM's would have: ``LedgerUnavailable`` for a database
        that cannot take writes, SQLAlchemy's ``DBAPIError`` (``OperationalError`` for a
        server that is down...) otherwise, so the app's error handlers answer as before."""
        try:
            yield
        except self._driver_error as exc:
            refuse_if_unavailable(exc)
            raise DBAPIError.instance(None, None, exc, self._driver_error) from exc

    def appending(
        self,
        response_id: str,
        first_seq: int,
        events: Sequence[tuple[str, str]],
        body_json: str | None,
        status: str,
        step: int | None,
        bridge_cursor: int | None,
    ) -> StoreWrite:
        """Events ``(type, json)`` numbered from ``first_seq`` on, and the response snapshot
        the last one produced (``body_json`` None: deltas only, the last snapshot stays): a
        write for :meth:`commit_all`."""
        snapshot = {
            "response_id": response_id,
            "new_body": body_json,
            "new_status": status,
            "new_next_seq": first_seq + len(events),
            "now": time.time(),
            "new_step": step,
            "new_cursor": bridge_cursor,
        }
        rows = [
            {"response_id": response_id, "seq": seq, "type": event_type, "data": event_json}
            for seq, (event_type, event_json) in enumerate(events, start=first_seq)
        ]

        def write(cursor: Cursor) -> None:
            if cursor.run(self._snapshot, snapshot) != 1:
                raise LookupError(f"no stored response {response_id!r}")
            for row in rows:
                cursor.run(self._event, row)

        return write

    def setting_bridge_run(self, response_id: str, run_ref: str) -> StoreWrite:
        """The bridge run that records the response's nested work: a write for
        :meth:`commit_all`."""
        params = {"response_id": response_id, "run_ref": run_ref}

        def write(cursor: Cursor) -> None:
            if cursor.run(self._run_ref, params) != 1:
                raise LookupError(f"no stored response {response_id!r}")

        return write

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction for writes (:data:`StoreWrite`): committed on a clean exit, rolled
        back otherwise; a driver error leaves as :meth:`_as_sqlalchemy_raises` says."""
        with self._as_sqlalchemy_raises(), self._session.transaction() as cursor:
            yield cursor

    def commit_all(self, writes: Sequence[StoreWrite]) -> None:
        """``writes`` in one transaction, in order: all of them committed, or (one raised)
        none."""
        with self.transaction() as cursor:
            for write in writes:
                write(cursor)

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
        """A new response and, in the same transaction, its idempotency key record
        (:class:`IdempotencyConflict` when another request registered the key first)."""
        meta = body["metadata"]
        now = time.time()
        response = {
            "id": body["id"],
            "principal": principal,
            "session_id": meta["session_id"],
            "harness_id": meta["harness_id"],
            "status": body["status"],
            "created_at": body["created_at"],
            "updated_at": now,
            "body": json.dumps(body),
            "input_items": json.dumps(input_items),
            "request": json.dumps(request),
            "step": 0,
            "next_seq": 0,
            "bridge_run_ref": None,
            "bridge_cursor": 0,
            "deleted": False,
        }
        key = {"p": principal, "k": idempotency_key}
        with self._as_sqlalchemy_raises():
            self._create(response, key, idempotency_key, fingerprint, now)
        # A new response is work accepted: refused (503) if its commit landed in a ledger file
        # deleted or replaced under the process, instead of acknowledged and lost.
        self._session.confirm_durable()

    def _create(
        self,
        response: dict[str, Any],
        key: dict[str, Any],
        idempotency_key: str | None,
        fingerprint: str,
        now: float,
    ) -> None:
        try:
            with self._session.transaction() as cursor:
                if idempotency_key is not None:
                    first = cursor.scalar(self._key, key)
                    if first is not None:
                        raise IdempotencyConflict(first)
                    record = {
                        "principal": key["p"],
                        "key": idempotency_key,
                        "response_id": response["id"],
                        "fingerprint": fingerprint,
                        "created_at": now,
                    }
                    cursor.run(self._new_key, record)
                cursor.run(self._new_response, response)
        except self._session.integrity_error:
            if idempotency_key is None:
                raise
            with self._session.transaction() as cursor:
                first = cursor.scalar(self._key, key)
            if first is None:
                raise
            raise IdempotencyConflict(first) from None
