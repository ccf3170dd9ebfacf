"""What differs per database is chosen once, as ``ledger.dialect``; SQLite's durability is an
option of ``Ledger.open``."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from bridge._ledger.schema.dialects import PostgresDialect, SqliteDialect
from bridge._ledger.store import Ledger
from tests.support.postgres import fresh_database


def _synchronous(ledger: Ledger) -> int:
    with ledger.engine.connect() as conn:
        return int(conn.execute(text("PRAGMA synchronous")).scalar_one())


def _call_path_synchronous(ledger: Ledger) -> int:
    """The setting on a pooled connection as the call path's driver session takes it."""
    raw = ledger.engine.raw_connection()
    try:
        cursor = raw.driver_connection.cursor()
        value = int(cursor.execute("PRAGMA synchronous").fetchone()[0])
        cursor.close()
        return value
    finally:
        raw.close()


def test_sqlite_synchronous_defaults_to_normal(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    try:
        assert _synchronous(ledger) == 1  # NORMAL
    finally:
        ledger.close()


def test_sqlite_synchronous_full_is_applied_to_every_connection(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db", sqlite_synchronous="FULL")
    try:
        assert _synchronous(ledger) == 2  # FULL
        assert _call_path_synchronous(ledger) == 2
        tenant = ledger.for_principal("acme")
        run = tenant.runs.open_run("local:h", response_id="resp_1")
        op = tenant.calls.begin_dispatch(run.ref, server_endpoint="e", tool_name="t", arguments={})
        assert tenant.reads.get_dispatch(op.ref).ref == op.ref  # the call path works on it
    finally:
        ledger.close()


def test_sqlite_synchronous_refuses_other_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NORMAL or FULL"):
        Ledger.open(tmp_path / "ledger.db", sqlite_synchronous="OFF")  # type: ignore[arg-type]


def test_the_dialect_is_chosen_once_per_ledger(sqlite_ledger: Ledger) -> None:
    assert isinstance(sqlite_ledger.dialect, SqliteDialect)
    assert sqlite_ledger.dialect.runs_calls_inline is True
    assert sqlite_ledger.dialect.locks_rows_for_update is False


@pytest.mark.postgres
def test_postgresql_dialect_ignores_sqlite_synchronous(postgres_admin_url: str) -> None:
    with fresh_database(postgres_admin_url) as url:
        ledger = Ledger.open(url, sqlite_synchronous="FULL")
        try:
            assert isinstance(ledger.dialect, PostgresDialect)
            assert ledger.dialect.runs_calls_inline is False
            assert ledger.dialect.locks_rows_for_update is True
            run = ledger.for_principal("acme").runs.open_run("local:h", response_id="resp_1")
            assert ledger.for_principal("acme").reads.get_run(run.ref).ref == run.ref
        finally:
            ledger.close()
