"""Shared by the smoke scripts: one real bridged call against the task server.

Run inside a clean venv holding only the wheel (and one extra), from a folder outside the
repository: nothing here imports the repository's own files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

URL = sys.argv[1]
TOKEN = sys.argv[2]
WORK = Path.cwd()


def settings(ledger_url: str | None = None, token: str | None = TOKEN) -> Any:
    from bridge import BridgeSettings, McpServerConfig

    server = McpServerConfig(name="reports", url=URL, credential_ref="smoke")
    return BridgeSettings(
        ledger_url=ledger_url or str(WORK / "smoke-ledger.db"),
        principals=["acme"],
        mcp_servers=[server],
        credentials=lambda _ref: token,
    )


async def bridged_call(bridge: Any, response_id: str = "resp_smoke") -> Any:
    """One task-backed call, waited for: its settled task."""
    from bridge import OutcomeKind, WaitMode

    run = await bridge.register_served_run(
        "acme", response_id=response_id, session_id="hsess_smoke", harness_id="chrn_smoke"
    )
    args = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.05}
    outcome = await run.call_tool("reports", "generate_report", args, wait=WaitMode.WAIT)
    assert outcome.kind is OutcomeKind.TASK_ENDED, outcome
    assert outcome.text().startswith("Quarterly report Q3"), outcome.text()
    return outcome


def absent(*modules: str) -> None:
    """The lean install: none of ``modules`` is importable here."""
    import importlib.util

    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        assert not found, f"{module} is installed, but this venv should not have it"


def missing_extra(extra: str, call: Any) -> None:
    """``call()`` raises MissingExtra naming ``pip install 'uhp-mcp-bridge[extra]'``."""
    from bridge.errors import MissingExtra

    try:
        call()
    except MissingExtra as exc:
        assert f"pip install 'uhp-mcp-bridge[{extra}]'" in str(exc), str(exc)
        assert isinstance(exc, ImportError)
        return
    raise AssertionError(f"expected MissingExtra for [{extra}]")


def done(name: str) -> None:
    print(f"smoke {name}: ok ({os.path.basename(sys.prefix)})")
