"""``bridge gateway`` in front of an upstream that reports progress while it answers a
``tools/call`` directly: a client that asked for progress (a ``progressToken``) gets the
upstream's notifications, in order, with their totals and messages."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import ALICE, DEADLINE_S
from tests.support.mcp_client import connect
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway_url(tmp_path: Path) -> Iterator[str]:
    with ServerProcess("tests.servers.tasks_server") as upstream:
        config = tmp_path / "gateway.json"
        alice = {"token_sha256": hashlib.sha256(ALICE.encode()).hexdigest()}
        config.write_text(
            json.dumps(
                {
                    "mcpServers": [{"name": "tasks", "url": upstream.url}],
                    "principals": {"alice": alice},
                }
            )
        )
        args = ["--config", str(config), "--db", str(tmp_path / "ledger.db")]
        with ServerProcess("bridge.gateway", args=args) as gateway:
            yield gateway.url


async def test_upstream_progress_on_a_direct_answer_reaches_the_client(gateway_url: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with connect(gateway_url, ALICE, tasks=False) as client:
        result = await client.session.call_tool(
            "tasks__progress_echo",
            {"text": "done", "steps": 3},
            read_timeout_seconds=DEADLINE_S,
            progress_callback=progress,
        )
        silent = await client.session.call_tool("tasks__progress_echo", {"text": "q", "steps": 2})
    assert not result.is_error and result.content[0].text == "done"  # type: ignore[union-attr]
    assert seen == [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]
    assert not silent.is_error  # without a progressToken nothing is relayed, the call is served
