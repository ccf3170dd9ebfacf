"""[otlp]: setup_tracing records the spans of a real bridged call (console exporter); the
OTLP/HTTP exporter imports."""

import anyio
from common import bridged_call, done, settings
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: F401
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from bridge import setup_tracing

seen: list[str] = []


class Keep(SpanExporter):
    def export(self, spans: "list[ReadableSpan]") -> SpanExportResult:  # type: ignore[override]
        seen.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS


setup_tracing("smoke")
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(Keep()))  # type: ignore[attr-defined]


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


anyio.run(main)
assert any("generate_report" in name or "tools/call" in name for name in seen), seen
done("otlp")
