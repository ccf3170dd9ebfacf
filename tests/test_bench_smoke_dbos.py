"""``python -m bench.run --quick --only dbos`` runs and reports sections 13-14 (bridged calls
inside DBOS workflows) with figures in them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.processes import quick_bench

pytestmark = pytest.mark.e2e


def test_quick_bench_reports_the_dbos_sections(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "dbos")
    assert "## 13. DBOS: a task call in a workflow" in text
    assert "## 14. DBOS: 20 open handles in concurrent workflows" in text
    ratios = re.findall(r"\| \*\*(\d+\.\d\d)\*\* \|", text)
    assert len(ratios) == 2, text  # wall and CPU, bridged / plain
    polls = re.search(r"\| polls \(`tasks/get` sent\) in the window \| (\d+) ", text)
    assert polls is not None and int(polls.group(1)) > 0, text
    sustained = re.search(r"\| polls/s sustained [^|]* \| (\d+\.\d) \| demand ", text)
    assert sustained is not None and float(sustained.group(1)) > 0, text
