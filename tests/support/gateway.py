"""A real gateway subprocess (``python -m bridge.gateway``) in front of the real
fastmcp-tasks example servers (reports, payments), and what its tests check it with.

Upstream effects are counted with the payments server's own ``payment_count``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import Client

from bridge._ledger.reads.views import CallView
from bridge._ledger.store import Ledger
from bridge._mcp.wire.shapes import DetailedTask
from tests.support.mcp_client import connect, get_task
from tests.support.processes import REPO_ROOT, ServerProcess

UPSTREAM_TOKEN = "upstream-secret"
ALICE, BOB = "alice-gateway-token", "bob-gateway-token"
DEADLINE_S = 20
POLL_S = 0.05
APPROVE = {"action": "accept", "content": {"approve": True}}


@dataclass
class Gateway:
    proc: ServerProcess
    config: Path
    db: Path
    upstream_env: dict[str, str]
    payments_url: str


@contextmanager
def running_gateway(tmp_path: Path, upstreams: dict[str, ServerProcess]) -> Iterator[Gateway]:
    """A gateway of its own (principals alice and bob, a new ledger) over HTTP, in front of
    ``upstreams``: the example servers (:func:`tests.support.example_servers.example_servers`,
    bearer :data:`UPSTREAM_TOKEN`), shared by a test file's tests, whose payments carry keys of
    their own."""
    config = tmp_path / "gateway.json"
    entry = {"auth": {"credential_ref": "upstream"}}
    config.write_text(
        json.dumps(
            {
                "mcpServers": [
                    {"name": "payments", "url": upstreams["payments"].url, **entry},
                    {"name": "reports", "url": upstreams["reports"].url, **entry},
                ],
                "principals": {
                    "alice": {"token_sha256": hashlib.sha256(ALICE.encode()).hexdigest()},
                    "bob": {"token_sha256": hashlib.sha256(BOB.encode()).hexdigest()},
                },
            }
        )
    )
    db = tmp_path / "ledger.db"
    env = {"BRIDGE_CREDENTIAL_UPSTREAM": UPSTREAM_TOKEN}
    proc = ServerProcess("bridge.gateway", args=["--config", str(config), "--db", str(db)], env=env)
    with proc:
        yield Gateway(proc, config, db, env, upstreams["payments"].url)


async def poll_until(client: Client, handle: str, statuses: set[str]) -> DetailedTask:
    with anyio.fail_after(DEADLINE_S):
        while True:
            state = await get_task(client, handle)
            if state.status in statuses:
                return state
            assert state.status in ("working", "input_required"), state
            await anyio.sleep(POLL_S)


def text_of(result: dict[str, Any] | mcp_types.CallToolResult) -> str:
    if isinstance(result, dict):
        result = mcp_types.CallToolResult.model_validate(result)
    assert not result.is_error, result
    return "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


async def payment_count(gw: Gateway, key: str) -> int:
    async with connect(gw.payments_url, UPSTREAM_TOKEN, tasks=False) as upstream:
        result = await upstream.session.call_tool("payment_count", {"payment_key": key})
    assert result.structured_content is not None
    return int(result.structured_content["result"])


def payment(key: str) -> dict[str, Any]:
    return {"amount": 120, "currency": "EUR", "payee": "ACME", "payment_key": key}


def upstream_task_ids(db: Path, principal: str) -> list[str]:
    ledger = Ledger.open(db)
    try:
        return [t.task_id for t in ledger.for_principal(principal).reads.list_tasks()]
    finally:
        ledger.close()


def dispatches(db: Path, principal: str) -> list[CallView]:
    """Every ``tools/call`` the gateway recorded for ``principal``."""
    ledger = Ledger.open(db)
    try:
        return ledger.for_principal(principal).reads.list_dispatches()
    finally:
        ledger.close()


def answer_with_cli(gw: Gateway, task_ref: str, input_ref: str) -> None:
    """The operator answers with ``bridge answer`` (the client declared no elicitation, so the
    gateway does not ask it: ``tests/test_gateway_inputs.py``)."""
    subprocess.run(
        [
            *(sys.executable, "-m", "bridge.cli", "--db", str(gw.db), "--principal", "alice"),
            *("answer", task_ref, input_ref, "--content", json.dumps(APPROVE["content"])),
            *("--mcp-config", str(gw.config)),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, **gw.upstream_env},
        check=True,
        capture_output=True,
        timeout=DEADLINE_S,
    )


async def pending_input(db: Path) -> tuple[str, str]:
    ledger = Ledger.open(db)
    try:
        with anyio.fail_after(DEADLINE_S):
            while True:
                pending = ledger.for_principal("alice").reads.pending_input_requests()
                if pending:
                    return pending[0].task_ref, pending[0].ref
                await anyio.sleep(POLL_S)
    finally:
        ledger.close()
