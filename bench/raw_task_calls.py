"""The baseline of the concurrent harness responses: the raw official SDK doing the same MCP work.

``n`` task-tool calls at once through one SDK ``Client`` (declaring the Tasks extension, as the
bridge does), each then polled with ``tasks/get`` at the interval its task advertises until it
is terminal: what any MCP client must do to run these tools, with no ledger, no harness and no
UHP. Its wall time is the tool's duration plus the raw polling cost (the answer arrives up to
one interval after the tool ended, plus the exchanges); its CPU is what the MCP work alone
costs a client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.shapes import CreateTaskResult, DetailedTask, GetTaskRequest, TaskIdParams

TERMINAL = frozenset({"completed", "failed", "cancelled"})


async def call_until_terminal(session: Any, key: str, seconds: float) -> str:
    """One ``work`` call on an open SDK session, polled with ``tasks/get`` at the interval its
    task advertises until it is terminal: the plain step or activity a framework without task
    handles runs. Returns the tool's text, as a framework hands it to the model."""
    created = await session.call_tool("work", {"key": key, "seconds": seconds}, allow_claimed=True)
    assert isinstance(created, CreateTaskResult), created
    status, interval = created.status, created.poll_interval_ms or 1000
    request = GetTaskRequest(params=TaskIdParams(task_id=created.task_id))
    reply: Any = created
    while status not in TERMINAL:
        await anyio.sleep(interval / 1000)
        reply = await session.send_request(request, DetailedTask)
        status, interval = reply.status, reply.poll_interval_ms or interval
    return str(reply.result["content"][0]["text"])


@dataclass(frozen=True)
class RawRound:
    """``calls`` calls made at once: wall time until the last was known terminal, the client's
    CPU time, ``tasks/get`` sent, and how many ended ``completed``."""

    calls: int
    wall_s: float
    cpu_s: float
    polls: int
    completed: int


async def raw_task_calls(url: str, keys: list[str], seconds: float, tool: str = "work") -> RawRound:
    """Call ``tool(key, seconds)`` for every key at once and poll each task to its end."""
    polls = 0
    completed = 0
    async with create_mcp_http_client() as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, extensions=[TasksClientExtension()]) as client:
            session = client.session

            async def one(key: str) -> None:
                nonlocal polls, completed
                created = await session.call_tool(
                    tool, {"key": key, "seconds": seconds}, allow_claimed=True
                )
                assert isinstance(created, CreateTaskResult), created
                status: str = created.status
                interval = created.poll_interval_ms or 1000
                request = GetTaskRequest(params=TaskIdParams(task_id=created.task_id))
                while status not in TERMINAL:
                    await anyio.sleep(interval / 1000)
                    reply = await session.send_request(request, DetailedTask)
                    polls += 1
                    status, interval = reply.status, reply.poll_interval_ms or interval
                completed += status == "completed"

            cpu0, wall0 = time.process_time(), time.perf_counter()
            async with anyio.create_task_group() as group:
                for key in keys:
                    group.start_soon(one, key)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return RawRound(len(keys), wall, cpu, polls, completed)
