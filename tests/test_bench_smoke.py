"""The benchmark command runs end to end (small sizes) and writes its report:
the polling and call sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import quick_bench

pytestmark = pytest.mark.e2e  # the benchmark driver in a subprocess


def test_bench_quick_run_writes_the_report(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "call", "scheduler", "polls", "stream", "concurrent-calls")
    assert "Run started " in text and " at `" in text  # the run names what it measured
    assert "**ratio bridged / raw**" in text
    assert "Scheduler: 1,000 open handles" in text
    assert "lateness p50 / p99 / max" in text and "No handle was polled twice" in text
    assert "Polls per CPU-second: raw SDK `Client`, lean `tasks/get`, scheduler" in text
    assert "Following a UHP stream" in text
    assert "16 concurrent callers: bridged `tools/call` vs the raw SDK" in text


def test_bench_quick_webhook_latency(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "webhooks")
    assert "Webhook delivery latency with 20 active runs" in text
    assert "| 40 | 40 (in " in text  # every item committed reached the receiver
