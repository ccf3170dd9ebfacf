"""The live ``uhp.response`` spans of the runs this process serves or follows."""

from __future__ import annotations

from collections import OrderedDict

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from bridge._ledger.reads.views import RunView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge._telemetry import spans as telemetry

# How many engine-hosted runs keep their parent context here: a worker serves one run per
# workflow for as long as it lives, so the most recent ones only (the rest read the ledger).
HOSTED_CONTEXTS = 4096


class OuterSpans:
    def __init__(self, ledger: Ledger, db: LedgerRunner) -> None:
        self._ledger = ledger
        self._db = db
        self._spans: dict[str, Span] = {}  # run_ref -> live uhp.response span
        # run_ref -> parent context of an engine-hosted run's steps (None: not traced)
        self._hosted: OrderedDict[str, Context | None] = OrderedDict()

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

    async def start_hosted(self, principal: str, run: RunView) -> None:
        """A served run whose lifetime a durable engine owns (one per workflow): nothing here
        sees it end, so its ``uhp.response`` span marks its registration and ends at once;
        its steps, in whichever worker, are children of that span (its recorded ids)."""
        if run.ref in self._hosted:
            self._hosted.move_to_end(run.ref)
            return
        if run.trace_id is None:
            span = telemetry.start_outer_span(run, served=True)
            span.set_attribute(telemetry.HOSTED, True)
            ids = telemetry.span_ids(span)
            span.end()
            if ids is not None:
                tenant = self._ledger.for_principal(principal)
                await self._db(tenant.runs.record_trace_context, run.ref, *ids)
                run = await self._db(tenant.reads.get_run, run.ref)
        self._hosted[run.ref] = telemetry.remote_context(run.trace_id, run.span_id)
        while len(self._hosted) > HOSTED_CONTEXTS:
            self._hosted.popitem(last=False)

    def end(self, run_ref: str, status: OuterStatus) -> None:
        span = self._spans.pop(run_ref, None)
        if span is not None:
            telemetry.end_outer_span(span, status.value)

    async def context(self, principal: str, run_ref: str) -> Context | None:
        """The parent context of a step of this run (its live span, or its recorded one)."""
        span = self._spans.get(run_ref)
        if span is not None:
            return trace.set_span_in_context(span)
        if run_ref in self._hosted:
            return self._hosted[run_ref]
        run = await self._db(self._ledger.for_principal(principal).reads.get_run, run_ref)
        return telemetry.remote_context(run.trace_id, run.span_id)

    def suspend_all(self) -> None:
        """The process stops: end every span, marked suspended (the run goes on later)."""
        for span in self._spans.values():
            span.set_attribute("bridge.suspended", True)
            span.end()
        self._spans.clear()
