"""The baseline every polling figure is read against: the raw official SDK calling ``tasks/get``.

One shared client, ``concurrency`` callers in a loop, nothing else in the process. The client
stays open between measurement windows, so a benchmark can alternate short raw windows with
windows of the process it compares (the two then see the same machine conditions; on these
shared machines the raw rate alone drifts by a quarter within a minute).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bridge._mcp.inputs.handlers import InputHandlers
from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.shapes import DetailedTask, GetTaskRequest, TaskIdParams

WARM_UP_CALLS = 20
# What a bridged caller declares to compare with :func:`raw_call_client`: no input kinds (the
# bridge's default declares form elicitation), so the bridged `tools/call` carries the same
# capabilities as the raw one, which declares the tasks extension only.
NO_INPUT_KINDS = InputHandlers(form=None)
RAW_TASK_ID = "bench-1000-0"  # the fast Tasks server answers any id of this form


@dataclass(frozen=True)
class Window:
    """Polls completed in one measurement window, its wall time and the client's CPU time."""

    polls: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.polls / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_per_poll_s(self) -> float:
        return self.cpu_s / max(self.polls, 1)


@asynccontextmanager
async def raw_call_client(url: str) -> AsyncIterator[Client]:
    """The raw official SDK client a bridged ``tools/call`` is compared with: one client, the
    tasks extension declared (call it with ``allow_claimed=True``), nothing else."""
    async with (
        create_mcp_http_client() as http,
        Client(
            streamable_http_client(url, http_client=http), extensions=[TasksClientExtension()]
        ) as client,
    ):
        yield client


class RawPoller:
    """``async with RawPoller(url) as raw: window = await raw.measure(1.0)``."""

    def __init__(self, url: str, concurrency: int = 16, task_id: str = RAW_TASK_ID) -> None:
        self.url = url
        self.concurrency = concurrency
        self._request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
        self._stack = AsyncExitStack()
        self._client: Client | None = None

    async def __aenter__(self) -> RawPoller:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(create_mcp_http_client())
            transport = streamable_http_client(self.url, http_client=http)
            client = Client(transport, extensions=[TasksClientExtension()])
            self._client = await stack.enter_async_context(client)
            for _ in range(WARM_UP_CALLS):
                await self._client.session.send_request(self._request, DetailedTask)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._client = None
        await self._stack.aclose()

    async def measure(self, seconds: float) -> Window:
        client = self._client
        if client is None:
            raise RuntimeError("RawPoller is not open")
        request = self._request
        return await callers_window(
            lambda: client.session.send_request(request, DetailedTask), self.concurrency, seconds
        )


async def callers_window(
    call: Callable[[], Awaitable[object]], concurrency: int, seconds: float
) -> Window:
    """``concurrency`` callers repeating ``call`` for ``seconds``: completed calls, wall, CPU."""
    done = 0
    deadline = time.perf_counter() + seconds
    cpu0, wall0 = time.process_time(), time.perf_counter()

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(caller)
    return Window(done, time.perf_counter() - wall0, time.process_time() - cpu0)


async def raw_poll_capacity(url: str, seconds: float, concurrency: int) -> Window:
    """The raw SDK's ``tasks/get`` calls per second over one window."""
    async with RawPoller(url, concurrency) as raw:
        return await raw.measure(seconds)
