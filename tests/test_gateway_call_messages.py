"""``bridge gateway`` in front of an upstream that logs and elicits while it answers a
``tools/call`` directly: the log messages reach the gateway's client (above the level it set
with ``logging/setLevel``), an elicitation reaches a client that declared elicitation and its
answer goes back upstream, and a client that did not declare it gets a clear refusal."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from tests.support.gateway import ALICE, DEADLINE_S
from tests.support.legacy_venv import LegacyServerProcess
from tests.support.mcp_client import connect
from tests.support.processes import ServerProcess
from tests.test_mcp_legacy_tasks import MODULE as LEGACY_MODULE, legacy_python

__all__ = ["legacy_python"]  # the fixture, shared with the legacy task tests

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def _gateway(tmp_path: Path, name: str, upstream_url: str) -> Iterator[str]:
    config = tmp_path / "gateway.json"
    alice = {"token_sha256": hashlib.sha256(ALICE.encode()).hexdigest()}
    servers = [{"name": name, "url": upstream_url}]
    config.write_text(json.dumps({"mcpServers": servers, "principals": {"alice": alice}}))
    args = ["--config", str(config), "--db", str(tmp_path / "ledger.db")]
    with ServerProcess("bridge.gateway", args=args) as gateway:
        yield gateway.url


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """In front of a 2026-07-28 server (it logs to a request that asks for a level)."""
    with (
        ServerProcess("tests.servers.conformance_server") as upstream,
        _gateway(tmp_path_factory.mktemp("gateway"), "conf", upstream.url) as url,
    ):
        yield url


@pytest.fixture(scope="module")
def legacy_gateway_url(
    legacy_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """In front of a 2025-11-25 server: it elicits on the call's own stream."""
    tmp_path = tmp_path_factory.mktemp("legacy")
    args = ["--effects-file", str(tmp_path / "effects.log")]
    with (
        LegacyServerProcess(LEGACY_MODULE, python=legacy_python, args=args) as upstream,
        _gateway(tmp_path, "legacy", upstream.url) as url,
    ):
        yield url


def _text(result: Any) -> str:
    assert not result.is_error, result
    return str(result.content[0].text)


async def test_upstream_log_messages_on_a_direct_answer_reach_the_client(
    gateway_url: str,
) -> None:
    seen: list[tuple[str, Any]] = []

    async def logged(params: mcp_types.LoggingMessageNotificationParams) -> None:
        seen.append((params.level, params.data["msg"]))

    async with connect(
        gateway_url, ALICE, tasks=False, logging_callback=logged, mode="legacy"
    ) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.session.call_tool("conf__test_tool_with_logging", {})
    assert _text(result) == "Tool with logging executed successfully"
    assert seen == [
        ("info", "Tool execution started"),
        ("info", "Tool processing data"),
        ("info", "Tool execution completed"),
    ]


async def test_log_messages_below_the_set_level_are_not_passed_on(gateway_url: str) -> None:
    seen: list[Any] = []

    async def logged(params: mcp_types.LoggingMessageNotificationParams) -> None:
        seen.append(params.data["msg"])

    async with connect(
        gateway_url, ALICE, tasks=False, logging_callback=logged, mode="legacy"
    ) as client:
        with anyio.fail_after(DEADLINE_S):
            await client.session.set_logging_level("warning")
            result = await client.session.call_tool("conf__test_tool_with_logging", {})
    assert _text(result) == "Tool with logging executed successfully"
    assert seen == []


async def test_upstream_elicitation_reaches_a_client_that_declared_it(
    legacy_gateway_url: str,
) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        return mcp_types.ElicitResult(action="accept", content={"approve": True, "note": "ok"})

    async with connect(
        legacy_gateway_url, ALICE, tasks=False, elicitation_callback=answer, mode="legacy"
    ) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.session.call_tool("legacy__confirm_inline", {"amount": "5 EUR"})
    assert _text(result) == "5 EUR accept ok"  # the client's answer went back upstream
    (params,) = asked
    assert isinstance(params, mcp_types.ElicitRequestFormParams)
    assert params.message == "Confirm 5 EUR?"
    assert "io.github.uhp-bridge/call-mark" not in (params.meta or {})  # the mark stays inside


async def test_upstream_elicitation_is_refused_clearly_without_the_capability(
    legacy_gateway_url: str,
) -> None:
    async with connect(legacy_gateway_url, ALICE, tasks=False, mode="legacy") as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.session.call_tool("legacy__confirm_inline", {"amount": "6 EUR"})
    text = str(result.content[0].text)  # type: ignore[union-attr]
    assert result.is_error and "did not declare form elicitation" in text, text
