"""Helpers for tests that drive the MCP side against real servers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from bridge._config import SchedulerConfig
from bridge._facade import Bridge
from bridge._ledger.store import TenantLedger

# Fast but bounded polling for tests: real servers answer in milliseconds.
FAST = SchedulerConfig(
    floor_ms=20,
    default_interval_ms=50,
    ceiling_ms=500,
    backoff_base_ms=50,
    backoff_max_ms=300,
    unreachable_grace_ms=300,
)


async def served_run(bridge: Bridge, principal: str) -> str:
    """A fresh served run of ``principal`` (random response and session ids); its ref."""
    name = uuid.uuid4().hex[:8]
    run = await bridge.register_served_run(
        principal, response_id=f"resp_{name}", session_id=f"hsess{name}", harness_id="chrn_test"
    )
    return run.ref


async def wait_until(
    predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
    *,
    timeout: float = 15.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy, failing after ``timeout``."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if isinstance(value, Awaitable):
                value = await value
            if value:
                return value
            await anyio.sleep(interval)


async def wait_closed(tenant: TenantLedger, task_ref: str, timeout: float = 15.0) -> Any:
    """Wait until the task is no longer open (terminal stored, lost, or detached)."""
    return await wait_until(
        lambda: not tenant.reads.get_task(task_ref).is_open,
        timeout=timeout,
        what=f"{task_ref} closed",
    )


def event_types(tenant: TenantLedger, run_ref: str) -> list[str]:
    return [e.type for e in tenant.reads.events(run_ref)]


def effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def adversarial_stats(url: str) -> dict[str, dict[str, int]]:
    """The adversarial server's own counters (tasks/get per tool, tools/call per tool)."""
    async with Client(url) as client:
        result = await client.call_tool("stats", {})
    text = result.content[0].text  # type: ignore[union-attr]
    counts: dict[str, dict[str, int]] = json.loads(text)
    return counts


def finished_spans_text(exporter: Any) -> str:
    """Every finished span's name, attributes and events as one JSON text (to grep for leaks)."""
    return json.dumps(
        [
            {
                "name": s.name,
                "attributes": dict(s.attributes or {}),
                "events": [(e.name, dict(e.attributes or {})) for e in s.events],
            }
            for s in exporter.get_finished_spans()
        ],
        default=str,
    )
