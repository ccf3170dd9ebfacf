"""``bridge gateway`` as a real subprocess (``python -m bridge.gateway``, SIGKILL-able) in front
of the real fastmcp-tasks example servers (reports, payments), for the gateway tests; upstream
effects are counted with the payments server's own ``payment_count``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types

from tests.support.example_servers import example_servers
from tests.support.mcp_client import connect
from tests.support.processes import ServerProcess

UPSTREAM_TOKEN = "upstream-secret"
ALICE, BOB = "alice-gateway-token", "bob-gateway-token"


@dataclass
class Gateway:
    proc: ServerProcess
    config: Path
    db: Path
    upstream_env: dict[str, str]
    payments_url: str


@contextmanager
def running_gateway(tmp_path: Path) -> Iterator[Gateway]:
    """The gateway for principals alice (``ALICE``) and bob (``BOB``) over both examples."""
    with example_servers(tmp_path / "payments.db", UPSTREAM_TOKEN) as upstreams:
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
        proc = ServerProcess(
            "bridge.gateway", args=["--config", str(config), "--db", str(db)], env=env
        )
        with proc:
            yield Gateway(proc, config, db, env, upstreams["payments"].url)


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
