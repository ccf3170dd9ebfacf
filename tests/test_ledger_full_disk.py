"""A full disk under a SQLite ledger, EMULATED with SQLite's ``max_page_count`` (the file may
not grow past its size when the cap is set): this machine offers no small filesystem to fill,
and filling the shared one would hurt everyone else on it. SQLite answers a write that needs a
page past the cap exactly as it answers a full disk (``SQLITE_FULL``)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from bridge._errors import LedgerUnavailable
from bridge._ledger.store import Ledger
from tests.support.builders import new_run

REFUSED_WITHIN_S = 1.0


class PageCap:
    """Caps every new connection of a ledger at a page count (``None``: no cap)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pages: int | None = None
        event.listen(ledger.engine, "connect", self._on_connect)

    def _on_connect(self, dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        if self.pages is not None:
            dbapi_connection.execute(f"PRAGMA max_page_count={self.pages}")

    def set(self, pages: int | None) -> None:
        self.pages = pages
        self.ledger._driver.close()  # every connection reopens under the new cap
        self.ledger.engine.dispose()

    def page_count(self) -> int:
        with self.ledger.engine.connect() as conn:
            conn = conn.execution_options(bridge_read=True)
            return int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)


def test_a_full_disk_refuses_writes_at_once_and_writes_resume_when_space_returns(
    tmp_path: Path,
) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    try:
        tenant = ledger.for_principal("acme")
        run = new_run(tenant)
        cap = PageCap(ledger)
        cap.set(cap.page_count() + 2)
        refused_in = None
        for i in range(10_000):
            started = time.monotonic()
            try:
                tenant.runs.record_anomaly(run.ref, "filler", "x" * 2_000 + str(i))
            except LedgerUnavailable as exc:
                refused_in = time.monotonic() - started
                assert exc.reason == "the disk is full"
                break
        assert refused_in is not None, "the capped ledger never filled"
        assert refused_in < REFUSED_WITHIN_S, "a full disk must be refused at once"
        seqs = [e.seq for e in tenant.reads.events(run.ref)]
        assert seqs == list(range(1, len(seqs) + 1)), "no gap, no half-written event"
        with pytest.raises(LedgerUnavailable, match="full"):  # still full: refused again
            tenant.runs.record_anomaly(run.ref, "filler", "y" * 8_000)
        cap.set(None)  # space returns
        tenant.runs.record_anomaly(run.ref, "after", "space returned")
        assert tenant.reads.events(run.ref)[-1].seq == len(seqs) + 1
        assert new_run(tenant).ref
    finally:
        ledger.close()
