"""The benchmark command runs end to end (small sizes) and writes its report: a long history
beside live runs, and a prune of it while calls go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import quick_bench

pytestmark = pytest.mark.e2e  # the benchmark driver in a subprocess


def test_bench_quick_run_of_a_long_history_writes_the_report(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "history")
    assert "## 16. A long history" in text
    assert "SQLite (WAL): 2,000 finished runs beside 1,000 live ones" in text
    assert "PostgreSQL 15: 1,000 finished runs beside 1,000 live ones" in text
    assert "prune rate while calls go on" in text and "(2,000 runs)" in text
