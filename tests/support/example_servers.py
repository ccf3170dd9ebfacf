"""The example MCP servers of ``harness_examples/mcp_servers`` as test subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import ServerProcess

REPORT_MODULE = "harness_examples.mcp_servers.report_server"
PAYMENTS_MODULE = "harness_examples.mcp_servers.payments_server"


@contextmanager
def example_mcp_servers(payments_db: Path, token: str) -> Iterator[dict[str, ServerProcess]]:
    """``reports`` and ``payments`` (its ledger ``payments_db``), both requiring bearer
    ``token``, started in parallel; stopped and their logs removed on exit."""
    procs = {
        "reports": ServerProcess(REPORT_MODULE, args=["--token", token]),
        "payments": ServerProcess(
            PAYMENTS_MODULE,
            args=["--ledger", str(payments_db)],
            env={"PAYMENTS_SERVER_TOKEN": token},
        ),
    }
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for started in [pool.submit(p.start) for p in procs.values()]:
                started.result()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()
    for proc in procs.values():
        proc.remove_logs()
