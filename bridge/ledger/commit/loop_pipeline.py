"""Group-commit batches sent from the event loop itself (PostgreSQL, psycopg's async connection).

A batch handed to a worker thread spends most of its wall time waiting for the interpreter
lock, which the event loop holds while it serves the calls: with 16 concurrent callers, 7.7 ms
from hand-over to return for a batch whose own CPU was 1.5 ms, and every bridged call waits
for two batches (its intent, its result). Sent from the loop on an asynchronous connection of
its own, a batch's round trip is awaited like any other socket: no hop to a thread, no hand-over
of the lock.

Only batches made entirely of one-statement writes come here
(:class:`~bridge.ledger.commit.driver_sessions.OneStatement`): ``BEGIN`` and every statement in one
round trip, each write's check of what its statement returned, then ``COMMIT``. Whatever goes wrong
(a statement failing, a check refusing, the connection lost or not to be had) rolls the batch back
and raises; the group commit then commits it the worker-thread way, one write per transaction, so
every error surfaces exactly as it does there (:mod:`.group_commit`).

The connection is opened on first use with the parameters of one of the engine's own pooled
connections (host, database, user, password, options: whatever the engine was given), and
opened again with them after it broke. After a failed connect the loop is not tried again for
:data:`RECONNECT_PAUSE_S` (meanwhile batches go to worker threads, as before), and then with
parameters read from the pool afresh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import Engine

from bridge.ledger.commit.driver_sessions import OneStatement, StatementResult, row_dict

if TYPE_CHECKING:  # psycopg is the postgres extra: imported where a connection is opened
    import psycopg

log = logging.getLogger(__name__)

#: After a failed connect, how long batches go to worker threads before the loop tries again.
RECONNECT_PAUSE_S = 5.0


class LoopPipeline:
    """Commits batches of one-statement writes on an asynchronous connection of its own."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._clock = clock
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._conninfo: str | None = None  # taken from the engine's pool on first connect
        self._paused_until = 0.0
        self.connects = 0  # connections opened (statistics for tests)

    def usable(self) -> bool:
        """Whether to send a batch here now: on asyncio (psycopg's async connection runs on
        no other loop), and not within the pause after a failed connect."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # another async library's loop (trio)
            return False
        return self._clock() >= self._paused_until

    async def commit(self, writes: Sequence[OneStatement[Any]]) -> list[Any]:
        """``writes`` in one transaction: the checks' values, in order, once committed.
        Raises (with the transaction rolled back) if anything failed."""
        connection = await self._connected()
        cursors: list[psycopg.AsyncCursor[Any]] = []
        try:
            async with connection.pipeline() as pipeline:
                for write in writes:
                    cursor = connection.cursor()
                    cursors.append(cursor)
                    await cursor.execute(write.statement.sql, write.statement.bind(write.params))
                await pipeline.sync()
            values = [
                write.check(StatementResult(int(cursor.rowcount), await _first_row(cursor)))
                for write, cursor in zip(writes, cursors, strict=True)
            ]
            await connection.commit()
        except BaseException:
            await self._roll_back(connection)
            raise
        finally:
            for cursor in cursors:
                await cursor.close()
        return values

    async def _connected(self) -> psycopg.AsyncConnection[Any]:
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection
        self._connection = None
        import psycopg

        try:
            if self._conninfo is None:  # the pool may have to connect: blocking
                self._conninfo = await anyio.to_thread.run_sync(self._pooled_conninfo)
            connection = await psycopg.AsyncConnection.connect(self._conninfo)
        except Exception as exc:
            self._paused_until = self._clock() + RECONNECT_PAUSE_S
            self._conninfo = None  # read afresh next time (the engine's may have changed)
            # The class only: a driver's message may quote connection parameters.
            log.warning(
                "group commit: no connection from the event loop (%s); batches go to worker "
                "threads for %g s",
                type(exc).__name__,
                RECONNECT_PAUSE_S,
            )
            raise
        self.connects += 1
        self._connection = connection
        return connection

    def _pooled_conninfo(self) -> str:
        """The parameters of one of the engine's pooled connections."""
        from psycopg.conninfo import make_conninfo

        pooled = self._engine.raw_connection()
        try:
            info = pooled.driver_connection.info  # type: ignore[union-attr]
            dsn, password = str(info.dsn), info.password  # the dsn never holds the password
        finally:
            pooled.close()
        return make_conninfo(dsn, password=password) if password else dsn

    async def _roll_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        try:
            await connection.rollback()
        except Exception:  # broken: the next batch connects afresh
            self._drop()
        except BaseException:  # interrupted (the loop shutting down): the same, then on
            self._drop()
            raise

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            connection.pgconn.finish()

    def close(self) -> None:
        """Close the connection (between batches it is idle: no await needed)."""
        self._drop()


async def _first_row(cursor: psycopg.AsyncCursor[Any]) -> dict[str, Any] | None:
    if cursor.description is None:
        return None
    return row_dict(cursor.description, await cursor.fetchone())
