"""OpenTelemetry spans for outer responses, MCP tool calls and inner task lifetimes.

* ``uhp.response`` (SERVER for a run the harness serves, CLIENT for a remote one): one per
  outer response; ids of its span are kept in the ledger, so a process that resumes the run
  after a restart continues the same trace (a ``uhp.response`` span marked ``bridge.resumed``,
  child of the recorded one).
* ``tools/call {tool}`` (CLIENT), following the OpenTelemetry MCP conventions:
  ``mcp.method.name``, ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``,
  ``server.address``/``server.port``, ``error.type`` and ``rpc.response.status_code`` on a
  JSON-RPC error. ``mcp.session.id`` is not set (2026-07-28 connections have no session). The
  official SDK nests its own ``MCP send`` span inside and carries the trace context to the server
  in ``params._meta`` (``traceparent``/``tracestate``).
* ``mcp.task`` (INTERNAL): the lifetime of one task handle, from the handle to its terminal
  status (or lost verdict). It is emitted when the handle closes, rebuilt from the ledger — start
  time, one span event per recorded status change, input request, cancel request, lost or
  unknown outcome — so it survives process restarts; it is a child of the outer response and
  *linked* to the ``tools/call`` span that created it (a link, not a fake synchronous child).

The conventions have nothing for tasks yet, so task attributes live under ``bridge.mcp_task.*``
(see docs/guides/trace-nested-tasks.md). Raw task ids and credentials never appear: tasks are
named by their bridge-local reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bridge import events as ev
from bridge._extras import require_extra
from bridge._ledger.reads.views import RunView, TaskView

TRACER_NAME = "uhp-mcp-bridge"

# bridge.* attribute names (no OpenTelemetry convention covers tasks yet)
RUN_REF = "bridge.run.ref"
RESUMED = "bridge.resumed"
HOSTED = "bridge.engine_hosted"  # a run whose lifetime a durable engine's workflow owns
TASK_REF = "bridge.mcp_task.ref"
TASK_STATUS = "bridge.mcp_task.status"
TASK_LOST_REASON = "bridge.mcp_task.lost_reason"
TASK_SERVER = "bridge.mcp_task.server"
TASK_TOOL = "bridge.mcp_task.tool"
TASK_TTL_MS = "bridge.mcp_task.ttl_ms"
TASK_OP_REF = "bridge.mcp_task.op_ref"

_TASK_EVENT_TYPES = {
    "task.status_changed",
    "task.input_required",
    "task.input_answered",
    "task.cancel_requested",
    "task.lost",
    "task.detached",
    "task.terminal",
    "server.unreachable",
    "anomaly",
}


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def enabled() -> bool:
    """Whether the host installed a tracer provider (otherwise skip the ledger reads)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def span_ids(span: Span) -> tuple[str, str] | None:
    if span is trace.INVALID_SPAN:
        return None  # no tracing and no parent span: the usual case, on every tool call
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def remote_context(trace_id: str | None, span_id: str | None) -> Context | None:
    """A parent context for a span whose parent lives in another process (or ended)."""
    if not trace_id or not span_id:
        return None
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def outer_attributes(run: RunView) -> dict[str, Any]:
    attributes: dict[str, Any] = {RUN_REF: run.ref}
    for key, value in (
        ("uhp.response.id", run.response_id),
        ("uhp.session.id", run.session_id),
        ("uhp.harness.id", run.harness_id),
    ):
        if value:
            attributes[key] = value
    return attributes


def start_outer_span(run: RunView, *, served: bool, resumed: bool = False) -> Span:
    attributes = outer_attributes(run)
    if resumed:
        attributes[RESUMED] = True
    return tracer().start_span(
        "uhp.response",
        kind=SpanKind.SERVER if served else SpanKind.CLIENT,
        context=remote_context(run.trace_id, run.span_id) if resumed else None,
        attributes=attributes,
    )


def end_outer_span(span: Span, status: str) -> None:
    span.set_attribute("uhp.response.status", status)
    if status == "failed":
        span.set_status(Status(StatusCode.ERROR, "response failed"))
    span.end()


def tool_call_span(server_url: str | None, tool: str) -> AbstractContextManager[Span]:
    """The CLIENT span of one ``tools/call`` (current while the request is made).

    Without a tracer provider the no-op tracer would only hand back the current span's
    context, non-recording, and make it current again: that span, without the cost.
    """
    if isinstance(trace.get_tracer_provider(), _NO_TRACING):
        current = trace.get_current_span()
        if current is trace.INVALID_SPAN:
            return _NO_SPAN
        if not isinstance(current, trace.NonRecordingSpan):
            current = trace.NonRecordingSpan(current.get_span_context())
        return nullcontext(current)
    return _recording_tool_call_span(server_url, tool)


_NO_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_NO_SPAN = nullcontext(trace.INVALID_SPAN)  # stateless, so shared by every call


@contextmanager
def _recording_tool_call_span(server_url: str | None, tool: str) -> Iterator[Span]:
    attributes: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
    }
    if server_url:
        parts = urlsplit(server_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
        if parts.port:
            attributes["server.port"] = parts.port
    with tracer().start_as_current_span(
        f"tools/call {tool}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def mark_rpc_error(span: Span, code: int | None, kind: str) -> None:
    span.set_attribute("error.type", str(code) if code is not None else kind)
    if code is not None:
        span.set_attribute("rpc.response.status_code", str(code))
    span.set_status(Status(StatusCode.ERROR))


def emit_task_span(
    task: TaskView,
    run: RunView,
    call_trace_id: str | None,
    call_span_id: str | None,
    events: list[ev.BridgeEvent],
    end_ms: int,
) -> None:
    """Emit the lifetime span of a closed task handle, rebuilt from the ledger."""
    links = []
    call = remote_context(call_trace_id, call_span_id)
    if call is not None:
        links.append(Link(trace.get_current_span(call).get_span_context()))
    attributes: dict[str, Any] = {
        TASK_REF: task.ref,
        TASK_STATUS: task.status.value,
        TASK_TOOL: task.tool_name,
        TASK_SERVER: task.server_label,
        TASK_OP_REF: task.op_ref,
        RUN_REF: run.ref,
    }
    if task.ttl_ms is not None:
        attributes[TASK_TTL_MS] = task.ttl_ms
    if task.lost_reason is not None:
        attributes[TASK_LOST_REASON] = task.lost_reason.value
    span = tracer().start_span(
        "mcp.task",
        kind=SpanKind.INTERNAL,
        context=remote_context(run.trace_id, run.span_id),
        links=links,
        attributes=attributes,
        start_time=task.created_at_ms * 1_000_000,
    )
    for event in events:
        if event.type not in _TASK_EVENT_TYPES or getattr(event, "task_ref", None) != task.ref:
            continue
        span.add_event(event.type, _event_attributes(event), timestamp=event.at_ms * 1_000_000)
    if task.lost_reason is not None or task.status.value == "failed":
        span.set_status(Status(StatusCode.ERROR, task.lost_reason or "failed"))
    span.end(end_time=max(end_ms, task.created_at_ms) * 1_000_000)


def _event_attributes(event: ev.BridgeEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {"bridge.event.seq": event.seq}
    for name in ("status", "previous", "reason", "requested_by", "input_ref", "method", "kind"):
        value = getattr(event, name, None)
        if value is not None:
            attributes[f"bridge.event.{name}"] = str(getattr(value, "value", value))
    return attributes


def setup_tracing(service_name: str = "uhp-mcp-bridge", otlp_endpoint: str | None = None) -> None:
    """Install an SDK tracer provider for a process that has none (a convenience for hosts).

    Needs the ``otlp`` extra (``pip install 'uhp-mcp-bridge[otlp]'``: the OpenTelemetry SDK and
    its OTLP/HTTP exporter). With ``otlp_endpoint`` spans go to that collector; otherwise they
    are printed to the console.
    A host that configures OpenTelemetry itself does not need this.
    """
    require_extra("setup_tracing", "otlp", ("opentelemetry.sdk",))
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    exporter: SpanExporter
    if otlp_endpoint is not None:
        require_extra("setup_tracing(otlp_endpoint=...)", "otlp")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=otlp_endpoint)
    else:
        exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
