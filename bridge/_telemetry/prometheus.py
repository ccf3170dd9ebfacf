"""An optional Prometheus scrape endpoint (``--metrics HOST:PORT`` on the console and the
gateway; extra ``[metrics]``): the OpenTelemetry SDK's meter provider with the Prometheus
reader, served by ``prometheus_client`` on a socket of its own (not the app's: a scrape needs
no console or gateway token, and should not be reachable where they are)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry import metrics

from bridge._extras import require_extra


def serve_prometheus(
    host: str, port: int, port_file: Path | None = None
) -> tuple[int, Callable[[], None]]:
    """Install the SDK's meter provider (process-wide) and serve ``/metrics``: the bound port,
    and the call that stops serving. ``port_file``: where the bound port is written (port 0)."""
    require_extra("the Prometheus scrape endpoint (--metrics)", "metrics")
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    server, thread = start_http_server(port, addr=host)
    bound = int(server.server_port)
    if port_file is not None:
        port_file.write_text(f"{bound}\n", encoding="utf-8")

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return bound, stop


def metrics_address(value: str) -> tuple[str, int]:
    """``--metrics HOST:PORT`` (an argparse type)."""
    import argparse

    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def add_metrics_arguments(parser: Any) -> None:
    """``--metrics HOST:PORT`` and ``--metrics-port-file F`` on a server's command line."""
    parser.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (extra [metrics])",
    )
    parser.add_argument(
        "--metrics-port-file", type=Path, help="write the metrics port here once it serves"
    )


def start_metrics(args: Any) -> Callable[[], None] | None:
    """Start the scrape endpoint the parsed ``args`` ask for (``None``: none asked)."""
    if args.metrics is None:
        return None
    host, port = args.metrics
    _bound, stop = serve_prometheus(host, port, args.metrics_port_file)
    return stop
