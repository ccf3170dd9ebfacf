"""OpenTelemetry metrics of the bridge, through the metrics API only (a host's meter provider,
or ``--metrics`` on the console and the gateway, records them; without one they cost a no-op).

Counted as they happen: polls and their lateness, webhook deliveries by outcome and their
latency from the commit of the item to the receiver's 2xx. Read from the ledger at each
collection (observable gauges, one query per principal): attention items by kind (inputs
waiting, unknown outcomes, lost tasks, anomalies), the oldest waiting input's age, the webhook
outbox by state. Ledger commit latency is recorded by the ledger itself
(:mod:`bridge._ledger.commit.latency`). No label carries a raw task id or a run's ids.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from functools import cache

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from bridge._ledger.reads.attention_figures import AttentionFigures, attention_figures
from bridge._ledger.store import Ledger

METER_NAME = "uhp_mcp_bridge"


@cache
def _meter() -> metrics.Meter:
    return metrics.get_meter(METER_NAME)


@cache
def _polls() -> metrics.Counter:
    return _meter().create_counter("bridge.polls", unit="{poll}", description="tasks/get polls")


@cache
def _lateness() -> metrics.Histogram:
    return _meter().create_histogram(
        "bridge.poll.lateness", unit="s", description="How long after its due time a poll left"
    )


@cache
def _deliveries() -> metrics.Counter:
    return _meter().create_counter(
        "bridge.webhook.deliveries",
        unit="{attempt}",
        description="Webhook delivery attempts by outcome (delivered, failed, undeliverable)",
    )


@cache
def _delivery_latency() -> metrics.Histogram:
    return _meter().create_histogram(
        "bridge.webhook.delivery.latency",
        unit="s",
        description="From the commit of an attention item to its endpoint's 2xx",
    )


def record_poll(lateness_ms: int | None) -> None:
    _polls().add(1)
    if lateness_ms is not None:
        _lateness().record(max(0, lateness_ms) / 1000)


def record_webhook(outcome: str, kind: str, latency_ms: int | None = None) -> None:
    _deliveries().add(1, {"outcome": outcome, "kind": kind})
    if latency_ms is not None:
        _delivery_latency().record(max(0, latency_ms) / 1000, {"kind": kind})


class LedgerGauges:
    """The ledgers whose figures the observable gauges report: each open bridge, console or
    gateway adds its ledger and principals, and removes them when it closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: list[tuple[Ledger, tuple[str, ...]]] = []
        self._registered = False

    def add(self, ledger: Ledger, principals: Sequence[str]) -> Callable[[], None]:
        """Report ``ledger``'s figures for ``principals``; returns the call that stops it."""
        source = (ledger, tuple(principals))
        with self._lock:
            self._sources.append(source)
            if not self._registered:
                self._register()
                self._registered = True

        def remove() -> None:
            with self._lock:
                if source in self._sources:
                    self._sources.remove(source)

        return remove

    def _register(self) -> None:
        meter = _meter()
        meter.create_observable_gauge(
            "bridge.attention.items",
            callbacks=[self._attention],
            unit="{item}",
            description="Items waiting on a person, by kind",
        )
        meter.create_observable_gauge(
            "bridge.input.oldest_waiting_age",
            callbacks=[self._oldest_input],
            unit="s",
            description="Age of the oldest input request nobody answered (0: none waits)",
        )
        meter.create_observable_gauge(
            "bridge.webhook.outbox",
            callbacks=[self._outbox],
            unit="{item}",
            description="Webhook outbox rows by state (pending, delivered, undeliverable)",
        )

    def _principals(self) -> Iterable[tuple[Ledger, str]]:
        with self._lock:
            sources = list(self._sources)
        for ledger, principals in sources:
            for principal in principals:
                yield ledger, principal

    def _figures(self) -> Iterable[tuple[Ledger, str, AttentionFigures]]:
        for ledger, principal in self._principals():
            with ledger.engine.connect() as conn:
                yield ledger, principal, attention_figures(conn, principal)

    def _attention(self, _options: CallbackOptions) -> Iterable[Observation]:
        for _ledger, principal, figures in self._figures():
            for kind, count in figures.by_kind.items():
                yield Observation(count, {"principal": principal, "kind": kind})

    def _oldest_input(self, _options: CallbackOptions) -> Iterable[Observation]:
        for ledger, principal, figures in self._figures():
            oldest = figures.oldest_input_ms
            age = 0.0 if oldest is None else max(0, ledger.clock() - oldest) / 1000
            yield Observation(age, {"principal": principal})

    def _outbox(self, _options: CallbackOptions) -> Iterable[Observation]:
        for ledger, principal in self._principals():
            figures = ledger.for_principal(principal).outbox.webhook_outbox_figures()
            states = {
                "pending": figures.pending,
                "delivered": figures.delivered,
                "undeliverable": figures.undeliverable,
            }
            for state, count in states.items():
                yield Observation(count, {"principal": principal, "state": state})


#: The one registry of the process (instruments are created once per meter provider).
LEDGER_GAUGES = LedgerGauges()
