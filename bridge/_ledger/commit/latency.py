"""How long the ledger's commits take, as an OpenTelemetry histogram (the metrics API only:
nothing is recorded until the host, or ``--metrics``, installs a meter provider)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from opentelemetry import metrics


@cache
def _histogram() -> metrics.Histogram:
    meter = metrics.get_meter("uhp_mcp_bridge.ledger")
    return meter.create_histogram(
        "bridge.ledger.commit.duration",
        unit="s",
        description="Time from a ledger write's start to its commit",
    )


@contextmanager
def timed_commit(route: str) -> Iterator[None]:
    """Record the duration of the write inside, labelled by ``route`` (``core``, ``driver``,
    ``call_path``), only if it committed."""
    started = time.perf_counter()
    yield
    _histogram().record(time.perf_counter() - started, {"route": route})
