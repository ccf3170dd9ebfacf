"""The gateway's plain ``tools/call`` (a client without the Tasks extension) while it waits:
the upstream task's input request forwarded to the client as elicitation, and progress.

Driven by the official MCP SDK client (2026-07-28 core: the gateway asks with an
``InputRequiredResult``, which the client's ``call_tool`` answers through its elicitation
callback and sends again) against the real fastmcp-tasks example servers.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from bridge.gateway._calls import OPERATION_ID_META_KEY
from tests.support.gateway import ALICE, Gateway, payment, payment_count, text_of as text_of_result
from tests.support.mcp_client import connect

DEADLINE_S = 30


class Elicitations:
    """An elicitation callback answering every request the same way, recording each ask."""

    def __init__(self, answer: mcp_types.ElicitResult) -> None:
        self.answer = answer
        self.asked: list[mcp_types.ElicitRequestParams] = []

    async def __call__(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.asked.append(params)
        return self.answer


async def pay_with(
    gw: Gateway, key: str, answer: mcp_types.ElicitResult, mode: str = "auto"
) -> tuple[str, Any]:
    callback = Elicitations(answer)
    async with connect(
        gw.proc.url, ALICE, tasks=False, elicitation_callback=callback, mode=mode
    ) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.call_tool("payments__approve_payment", payment(key))
    (asked,) = callback.asked  # asked exactly once
    return text_of_result(result), asked


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])  # MRTR round; inline elicitation/create
async def test_input_is_forwarded_as_elicitation_and_accepted(gateway: Gateway, mode: str) -> None:
    accept = mcp_types.ElicitResult(action="accept", content={"approve": True})
    key = f"pay-elicit-{mode}"  # the upstream servers are the file's: a key per test
    text, asked = await pay_with(gateway, key, accept, mode)
    assert isinstance(asked, mcp_types.ElicitRequestFormParams)
    assert asked.message == f"Approve payment of 120 EUR to ACME (key {key})?"
    assert asked.requested_schema["properties"]["approve"]["type"] == "boolean"
    assert text == f"approved {key}"
    assert await payment_count(gateway, key) == 1


@pytest.mark.anyio
async def test_declined_elicitation_declines_upstream(gateway: Gateway) -> None:
    text, _ = await pay_with(gateway, "pay-no", mcp_types.ElicitResult(action="decline"))
    assert text == "declined pay-no"
    assert await payment_count(gateway, "pay-no") == 0


@pytest.mark.anyio
async def test_progress_is_reported_while_a_long_task_runs(gateway: Gateway) -> None:
    arguments = {"quarter": "2026-Q4", "sections": 4, "seconds_per_section": 0.6}
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.call_tool(
                "reports__generate_report", arguments, progress_callback=on_progress
            )
    assert "2026-Q4" in text_of_result(result)
    assert len(seen) >= 2, seen  # the start, then at least one tick of a >2 s wait
    progresses = [p for p, _ in seen]
    assert progresses == sorted(progresses) and len(set(progresses)) == len(progresses)
    assert all(m is not None and m.startswith("working") for _, m in seen), seen


@pytest.mark.anyio
async def test_a_repeated_call_is_not_asked_again_for_an_answered_input(gateway: Gateway) -> None:
    meta: Any = {OPERATION_ID_META_KEY: "order-9-payment"}
    arguments = payment("pay-once")
    first = Elicitations(mcp_types.ElicitResult(action="accept", content={"approve": True}))
    async with (
        connect(gateway.proc.url, ALICE, tasks=False, elicitation_callback=first) as client,
        anyio.create_task_group() as group,
    ):
        group.start_soon(
            lambda: client.call_tool("payments__approve_payment", arguments, meta=meta)
        )
        with anyio.fail_after(DEADLINE_S):
            while await payment_count(gateway, "pay-once") == 0:  # answered and delivered
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()  # the client goes away before (or as) it hears back
    assert len(first.asked) == 1
    again = Elicitations(mcp_types.ElicitResult(action="decline"))
    async with connect(gateway.proc.url, ALICE, tasks=False, elicitation_callback=again) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.call_tool("payments__approve_payment", arguments, meta=meta)
    assert again.asked == []
    assert text_of_result(result) == "approved pay-once"
    assert await payment_count(gateway, "pay-once") == 1


@pytest.mark.anyio
async def test_an_answer_off_the_schema_is_refused_and_not_recorded(gateway: Gateway) -> None:
    off_schema = mcp_types.ElicitResult(action="accept", content={"approve": "yes"})
    with pytest.raises(BaseExceptionGroup) as failed:  # raised inside the client's group
        await pay_with(gateway, "pay-bad", off_schema)
    (refused,) = failed.value.subgroup(MCPError).exceptions
    while isinstance(refused, BaseExceptionGroup):
        (refused,) = refused.exceptions
    assert isinstance(refused, MCPError) and refused.error.code == mcp_types.INVALID_PARAMS
    assert "approve: 'yes' is not of type 'boolean'" in refused.error.message
    accept = mcp_types.ElicitResult(action="accept", content={"approve": True})
    text, _ = await pay_with(gateway, "pay-bad", accept)  # still pending: asked again
    assert text == "approved pay-bad"
    assert await payment_count(gateway, "pay-bad") == 1
