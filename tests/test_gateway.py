"""``bridge gateway``: the bridge as the MCP server of MCP clients, tested end to end.

The gateway runs as a real subprocess (``python -m bridge.gateway``, SIGKILL-able) in front of
the real fastmcp-tasks example servers (reports, payments); it is driven by the official MCP
SDK client with the Tasks extension declared and without it. Upstream effects are counted with
the payments server's own ``payment_count``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

from bridge._mcp.wire.shapes import TASKS_EXTENSION, CancelTaskRequest, TaskIdParams
from bridge.gateway._calls import OPERATION_ID_META_KEY
from tests.support.gateway import (
    ALICE,
    APPROVE,
    BOB,
    DEADLINE_S,
    Gateway,
    answer_with_cli,
    payment,
    payment_count,
    pending_input,
    poll_until,
    text_of,
    upstream_task_ids,
)
from tests.support.mcp_client import connect, get_task, start_task, update_task
from tests.support.processes import loads_native_code_of


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_gateway_runs_on_uvloop(gateway: Gateway) -> None:
    """``bridge gateway`` starts its loop with ``backend_options()``: uvloop, seen in the
    running process."""
    assert gateway.proc.pid is not None
    assert loads_native_code_of(gateway.proc.pid, "uvloop")


@pytest.mark.anyio
async def test_tools_are_listed_under_server_prefixes(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        names = {t.name for t in (await client.session.list_tools()).tools}
    assert {"payments__approve_payment", "payments__payment_count"} <= names
    assert "reports__generate_report" in names


@pytest.mark.anyio
async def test_unknown_token_is_refused(gateway: Gateway) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 401 as a transport error
        async with connect(gateway.proc.url, "not-a-token", tasks=False) as client:
            await client.session.list_tools()


@pytest.mark.anyio
async def test_long_task_completes_for_both_client_kinds(gateway: Gateway) -> None:
    arguments = {"quarter": "2026-Q3", "sections": 3, "seconds_per_section": 0.3}
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "reports__generate_report", arguments)
        done = await poll_until(client, created.task_id, {"completed", "failed", "cancelled"})
        assert done.status == "completed" and done.result is not None
        with_tasks = text_of(done.result)
    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        without_tasks = text_of(
            await client.session.call_tool("reports__generate_report", arguments)
        )
    assert "2026-Q3" in with_tasks and with_tasks == without_tasks
    assert created.task_id not in upstream_task_ids(gateway.db, "alice")


@pytest.mark.anyio
async def test_handle_survives_a_gateway_crash_and_is_the_callers_only(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "payments__approve_payment", payment("pay-crash"))
        handle = created.task_id
        await poll_until(client, handle, {"input_required"})
    assert handle not in upstream_task_ids(gateway.db, "alice")  # bridge-issued, not upstream's

    gateway.proc.restart()  # SIGKILL mid-task, then the same port again

    async with connect(gateway.proc.url, BOB, tasks=True) as intruder:
        for probe in (handle, handle[:-1] + ("A" if handle[-1] != "A" else "B")):
            with pytest.raises(MCPError) as refused:
                await get_task(intruder, probe)
            assert refused.value.error.code == mcp_types.INVALID_PARAMS
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        asking = await get_task(client, handle)
        assert asking.status == "input_required" and asking.input_requests
        (key,) = asking.input_requests
        assert asking.input_requests[key]["method"] == "elicitation/create"
        # tasks/update is an ack: a key the task does not ask, or one answered, is ignored.
        await update_task(client, handle, {"no-such-key": APPROVE})
        assert (await get_task(client, handle)).status == "input_required"
        await update_task(client, handle, {key: APPROVE})
        await update_task(client, handle, {key: APPROVE})
        done = await poll_until(client, handle, {"completed", "failed", "cancelled"})
        assert done.result is not None and text_of(done.result) == "approved pay-crash"
        assert done.ttl_ms is not None and done.poll_interval_ms is not None
    assert await payment_count(gateway, "pay-crash") == 1


@pytest.mark.anyio
async def test_plain_client_repeats_a_cut_off_call_by_operation_id(gateway: Gateway) -> None:
    meta: Any = {OPERATION_ID_META_KEY: "order-7-payment"}
    arguments = payment("pay-plain")
    async with (
        connect(gateway.proc.url, ALICE, tasks=False) as client,
        anyio.create_task_group() as group,
    ):
        group.start_soon(
            lambda: client.session.call_tool("payments__approve_payment", arguments, meta=meta)
        )
        task_ref, input_ref = await pending_input(gateway.db)
        group.cancel_scope.cancel()  # the client gives up: its call is cut off
    answer_with_cli(gateway, task_ref, input_ref)
    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        with anyio.fail_after(DEADLINE_S):
            again = await client.session.call_tool(
                "payments__approve_payment", arguments, meta=meta
            )
    assert text_of(again) == "approved pay-plain"
    assert again.meta is not None and again.meta[OPERATION_ID_META_KEY] == "order-7-payment"
    assert await payment_count(gateway, "pay-plain") == 1


@pytest.mark.anyio
async def test_tasks_methods_need_the_declaration_and_an_mcp_name_naming_the_task(
    gateway: Gateway,
) -> None:
    """``tasks/*`` from a client that did not declare the Tasks extension: ``-32021`` naming
    it (never a task body it cannot read, never a -32602); a ``Mcp-Name`` that names another
    task than the body's ``taskId``: ``-32020``."""
    arguments = {"quarter": "2026-Q1", "sections": 1, "seconds_per_section": 0.05}
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        handle = (await start_task(client, "reports__generate_report", arguments)).task_id
        await poll_until(client, handle, {"completed"})
    async with connect(gateway.proc.url, ALICE, tasks=False) as plain:
        for request in (
            get_task(plain, handle),
            update_task(plain, handle, {"k": {"action": "decline"}}),
            plain.session.send_request(
                CancelTaskRequest(params=TaskIdParams(task_id=handle)), mcp_types.Result
            ),
        ):
            with pytest.raises(MCPError) as refused:
                await request
            assert refused.value.error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
            assert TASKS_EXTENSION in str(refused.value.error.data)
    envelope = {
        PROTOCOL_VERSION_META_KEY: "2026-07-28",
        CLIENT_CAPABILITIES_META_KEY: {"extensions": {TASKS_EXTENSION: {}}},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/get",
        "params": {"taskId": handle, "_meta": envelope},
    }
    headers = {
        "Authorization": f"Bearer {ALICE}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
    }
    async with httpx2.AsyncClient(timeout=DEADLINE_S) as http:
        cases = ((handle + "x", mcp_types.HEADER_MISMATCH), (handle, None), (None, None))
        for name, code in cases:  # None: no header at all (clients that omit it are served)
            named = {} if name is None else {"Mcp-Name": name}
            reply = await http.post(gateway.proc.url, json=body, headers={**headers, **named})
            answer = _json_rpc_answer(reply)
            if code is None:  # the same request naming its own task is served
                assert answer["result"]["taskId"] == handle, answer
            else:
                assert answer["error"]["code"] == code, answer


def _json_rpc_answer(reply: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a reply sent as JSON or as one SSE ``data:`` event."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(reply.json())
