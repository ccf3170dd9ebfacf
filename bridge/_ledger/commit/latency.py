"""How long the ledger's commits take, as an OpenTelemetry histogram (the metrics API only:
nothing is recorded until the host, or ``--metrics``, installs a meter provider).

A write takes ``started = perf_counter()`` before it begins and calls :func:`record_commit`
once it committed (a write that failed records nothing): two calls, no context manager, on
paths where a commit takes tens of microseconds.
"""

from __future__ import annotations

from functools import cache
from time import perf_counter

from opentelemetry import metrics

# The routes a write takes (built once: the attributes of every record).
ROUTES = {route: {"route": route} for route in ("core", "driver", "call_path")}


@cache
def _histogram() -> metrics.Histogram:
    meter = metrics.get_meter("uhp_mcp_bridge.ledger")
    return meter.create_histogram(
        "bridge.ledger.commit.duration",
        unit="s",
        description="Time from a ledger write's start to its commit",
    )


def record_commit(route: str, started: float) -> None:
    """Record a commit by ``route`` (``core``, ``driver``, ``call_path``) that began at
    ``started`` (a ``perf_counter()`` reading)."""
    _histogram().record(perf_counter() - started, ROUTES[route])
