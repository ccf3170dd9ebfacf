"""The live ``uhp.response`` spans of the runs this process serves or follows."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from bridge._ledger.reads.views import RunView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge._telemetry import spans as telemetry


class OuterSpans:
    def __init__(self, ledger: Ledger, db: LedgerRunner) -> None:
        self._ledger = ledger
        self._db = db
        self._spans: dict[str, Span] = {}  # run_ref -> live uhp.response span

    async def start(self, principal: str, run: RunView, *, served: bool) -> RunView:
        """Start the run's ``uhp.response`` span; a run already traced (by an earlier process)
        continues its recorded trace."""
        if run.ref in self._spans:
            return run
        resumed = run.trace_id is not None
        span = telemetry.start_outer_span(run, served=served, resumed=resumed)
        self._spans[run.ref] = span
        ids = telemetry.span_ids(span)
        if ids is not None and not resumed:
            tenant = self._ledger.for_principal(principal)
            await self._db(tenant.runs.record_trace_context, run.ref, *ids)
            return await self._db(tenant.reads.get_run, run.ref)
        return run

    def end(self, run_ref: str, status: OuterStatus) -> None:
        span = self._spans.pop(run_ref, None)
        if span is not None:
            telemetry.end_outer_span(span, status.value)

    async def context(self, principal: str, run_ref: str) -> Context | None:
        """The parent context of a step of this run (its live span, or its recorded one)."""
        span = self._spans.get(run_ref)
        if span is not None:
            return trace.set_span_in_context(span)
        run = await self._db(self._ledger.for_principal(principal).reads.get_run, run_ref)
        return telemetry.remote_context(run.trace_id, run.span_id)

    def suspend_all(self) -> None:
        """The process stops: end every span, marked suspended (the run goes on later)."""
        for span in self._spans.values():
            span.set_attribute("bridge.suspended", True)
            span.end()
        self._spans.clear()
