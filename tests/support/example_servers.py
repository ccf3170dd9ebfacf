"""The example MCP servers of ``harness_examples/mcp_servers`` (reports, payments) as real
bearer-protected subprocesses, started in parallel, for tests that run against them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import ServerProcess, running_together

REPORT_MODULE = "harness_examples.mcp_servers.report_server"
PAYMENTS_MODULE = "harness_examples.mcp_servers.payments_server"


@contextmanager
def example_servers(payments_db: Path, token: str) -> Iterator[dict[str, ServerProcess]]:
    """``{"reports": …, "payments": …}``, both requiring ``Bearer <token>``; the payments
    ledger (``payment_count``) is ``payments_db``. Logs are removed after a clean stop."""
    procs = {
        "reports": ServerProcess(REPORT_MODULE, args=["--token", token]),
        "payments": ServerProcess(
            PAYMENTS_MODULE,
            args=["--ledger", str(payments_db)],
            env={"PAYMENTS_SERVER_TOKEN": token},
        ),
    }
    with running_together(procs):
        yield procs
    for proc in procs.values():
        proc.remove_logs()
