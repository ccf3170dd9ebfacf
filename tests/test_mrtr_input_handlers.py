"""MRTR inputs (a call's, before any task) go through the same typed input handlers as a
task's, against the official SDK's MRTR server (tests/servers/mrtr_server.py): a handler's
answer completes the call without the host, an undeclared kind gets the default decline (and
the call's outcome is what the server does with it), a raising handler is recorded and then
declined, and a sampling request — no wire decline — stays with the host."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types
import pytest

from bridge import (
    Accept,
    Bridge,
    BridgeSettings,
    FormElicitation,
    InlineResult,
    InputHandlers,
    InputPolicy,
    McpServerConfig,
    Policies,
    ToolPolicy,
    UnansweredInput,
    WaitMode,
    events as ev,
)
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState
from bridge._outcomes import SAMPLING, InputPending
from tests.support.bridging import FAST, wait_until
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
SERVER = "mrtr"
ASK = Policies(default=ToolPolicy(wait=WaitMode.ASK))


@pytest.fixture(scope="module")
def mrtr_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.mrtr_server") as server:
        yield server


def _bridge(
    ledger: Ledger,
    server: ServerProcess,
    handlers: InputHandlers,
    policy: InputPolicy | None = None,
) -> Bridge:
    policies = Policies(default=ASK.default, inputs=policy or InputPolicy())
    return Bridge(
        ledger,
        BridgeSettings(
            principals=[P],
            mcp_servers=[McpServerConfig(name=SERVER, url=server.url)],
            scheduler=FAST,
            policies=policies,
            input_handlers=handlers,
        ),
    )


def _events(tenant: TenantLedger, run_ref: str, kind: type[Any]) -> list[Any]:
    return [e for e in tenant.reads.events(run_ref) if isinstance(e, kind)]


async def _ask_step(bridge: Bridge, run_ref: str, tool: str, args: dict[str, Any]) -> str:
    """An ``ask`` step nobody on the host side answers: it ends only if the bridge does."""
    with anyio.fail_after(20):
        step = await bridge.run(P, run_ref).call_tool(SERVER, tool, args)
    assert isinstance(step, InlineResult), step
    return step.text()


async def test_a_form_handler_answers_and_the_call_completes_without_the_host(
    wall_ledger: Ledger, mrtr_server: ServerProcess
) -> None:
    asked: list[FormElicitation] = []

    async def approve(question: FormElicitation) -> Accept:
        asked.append(question)
        return Accept({"approve": True})

    tenant = wall_ledger.for_principal(P)
    async with _bridge(wall_ledger, mrtr_server, InputHandlers(form=approve)) as bridge:
        run = new_run(tenant)
        assert await _ask_step(bridge, run.ref, "approve_payment", {"amount": 21}) == "paid 21"
        # Without the ask policy the call still returns InputPending at once (the handler
        # answers concurrently), and its next leg is sent by the handler's answer.
        pending = await bridge.run(P, run.ref).call_tool(
            SERVER, "approve_payment", {"amount": 22}, wait=WaitMode.WAIT
        )
        assert isinstance(pending, InputPending)

        async def retried() -> bool:
            return tenant.reads.get_dispatch(pending.op_ref).state is CallState.RESULT

        await wait_until(retried, what="the handler's answer sent the next leg")
        assert await bridge.run(P, run.ref).pending_inputs() == []
    (first, second) = asked
    assert (first.message, first.server, first.task_ref) == ("Pay 21 EUR?", SERVER, None)
    assert second.op_ref == pending.op_ref and first.op_ref != second.op_ref
    assert first.requested_schema["required"] == ["approve"]
    assert len(_events(tenant, run.ref, ev.CallInputAnswered)) == 2
    assert not _events(tenant, run.ref, ev.CallInputDeclined)
    texts = [e for e in _events(tenant, run.ref, ev.CallResult) if not e.is_error]
    assert len(texts) == 2


async def test_an_undeclared_kind_is_declined_by_default_and_the_server_decides(
    wall_ledger: Ledger, mrtr_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(P)
    # Nobody answers forms: elicitation is not declared, and an MRTR ask of it is declined.
    async with _bridge(wall_ledger, mrtr_server, InputHandlers(form=None)) as bridge:
        run = new_run(tenant)
        text = await _ask_step(bridge, run.ref, "approve_payment", {"amount": 23})
    assert text == "not paid (decline)"  # what this server does with a decline
    (declined,) = _events(tenant, run.ref, ev.CallInputDeclined)
    assert (declined.reason, declined.answered, declined.leg) == ("undeclared", True, 1)
    (required,) = _events(tenant, run.ref, ev.CallInputRequired)
    assert declined.input_ref == required.input_ref and declined.op_ref == required.op_ref
    assert tenant.reads.get_dispatch(required.op_ref).state is CallState.RESULT
    types = [e.type for e in tenant.reads.events(run.ref)]
    assert types.index("call.input_declined") < types.index("call.input_answered")
    assert "call.unknown_outcome" not in types


async def test_a_raising_handler_is_recorded_then_declined(
    wall_ledger: Ledger, mrtr_server: ServerProcess
) -> None:
    async def broken(question: FormElicitation) -> Accept:
        raise RuntimeError("the approval UI is down")

    tenant = wall_ledger.for_principal(P)
    async with _bridge(wall_ledger, mrtr_server, InputHandlers(form=broken)) as bridge:
        run = new_run(tenant)
        text = await _ask_step(bridge, run.ref, "approve_payment", {"amount": 24})
    assert text == "not paid (decline)"
    (failed,) = _events(tenant, run.ref, ev.CallInputHandlerFailed)
    assert (failed.failure, failed.action) == ("raised", "declined")
    assert failed.detail == "RuntimeError: the approval UI is down"
    (declined,) = _events(tenant, run.ref, ev.CallInputDeclined)
    assert (declined.reason, declined.answered) == ("handler_failed", True)


async def test_a_failed_handler_may_leave_the_input_for_the_host(
    wall_ledger: Ledger, mrtr_server: ServerProcess
) -> None:
    async def wrong(question: FormElicitation) -> Accept:
        return Accept({"approve": "maybe"})  # fails the requested schema: nothing recorded

    tenant = wall_ledger.for_principal(P)
    policy = InputPolicy(handler_failed=UnansweredInput.LEAVE_PENDING)
    async with _bridge(wall_ledger, mrtr_server, InputHandlers(form=wrong), policy) as bridge:
        run = new_run(tenant)
        pending = await bridge.run(P, run.ref).call_tool(
            SERVER, "approve_payment", {"amount": 25}, wait=WaitMode.WAIT
        )
        assert isinstance(pending, InputPending)
        failed = await wait_until(
            lambda: _events(tenant, run.ref, ev.CallInputHandlerFailed), what="handler failed"
        )
        assert (failed[0].failure, failed[0].action) == ("invalid_answer", "left_pending")
        (waiting,) = await bridge.run(P, run.ref).pending_inputs()
        receipt = await waiting.accept({"approve": True})
        assert receipt.outcome is not None and receipt.outcome.text() == "paid 25"
    assert not _events(tenant, run.ref, ev.CallInputDeclined)


async def test_a_declined_sampling_request_stays_with_the_host(
    wall_ledger: Ledger, mrtr_server: ServerProcess
) -> None:
    """Sampling has no wire decline: the decline is recorded, nothing is sent, and the call
    (which holds nothing on the server) waits for the host instead of being given up."""
    tenant = wall_ledger.for_principal(P)
    async with _bridge(wall_ledger, mrtr_server, InputHandlers()) as bridge:
        run = new_run(tenant)
        pending = await bridge.run(P, run.ref).call_tool(
            SERVER, "summarise", {"text": "q3"}, wait=WaitMode.WAIT
        )
        assert isinstance(pending, InputPending)
        declined = await wait_until(
            lambda: _events(tenant, run.ref, ev.CallInputDeclined), what="sampling declined"
        )
        assert (declined[0].reason, declined[0].answered) == ("undeclared", False)
        assert tenant.reads.get_dispatch(pending.op_ref).state is CallState.INPUT_REQUIRED
        (waiting,) = await bridge.run(P, run.ref).pending_inputs()
        assert waiting.method == SAMPLING and waiting.input_ref == declined[0].input_ref
        answer = mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text="all good"),
            model="host-model",
        )
        receipt = await waiting.respond(answer.model_dump(by_alias=True, exclude_none=True))
        assert receipt.outcome is not None and receipt.outcome.text() == "summary: all good"
