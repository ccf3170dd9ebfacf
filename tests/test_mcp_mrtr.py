"""MRTR against the official SDK's server: a ``tools/call`` answered with an
``InputRequiredResult`` before any task is a typed, durable input of the call, retried with the
answers and the server's (sealed) ``requestState`` — never an unknown outcome."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from _pytest.logging import LogCaptureFixture
from sqlalchemy import select

from bridge import Bridge, BridgeSettings, events as ev
from bridge._config import McpServerConfig
from bridge._errors import (
    InputAlreadyAnswered,
    InvalidAnswer,
    InvalidTaskResponse,
    NotFound,
    NoToolResult,
)
from bridge._ledger.rounds import ROUNDS
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState
from bridge._outcomes import ELICITATION, AnswerDelivery, InlineResult, InputPending
from bridge._policies import Policies, ToolPolicy, WaitMode
from bridge._redaction import STATE_REDACTED
from bridge._runtime.step_results import TaskSettled
from bridge.uhp._adapter import to_uhp_event
from tests.support.bridging import FAST, effects, wait_until
from tests.support.builders import new_run
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
SERVER = "tasks"  # the crash driver's server name: the recorded dispatches carry it
YES = {"approve": True}


@pytest.fixture(scope="module")
def mrtr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    effects_path = tmp_path_factory.mktemp("mrtr") / "effects.log"
    server = ServerProcess("tests.servers.mrtr_server", args=["--effects-file", str(effects_path)])
    server.effects_path = effects_path  # type: ignore[attr-defined]
    with server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_of_either_kind(request: pytest.FixtureRequest) -> Ledger:
    """The same behaviour on both backends (PostgreSQL: row locks, writes off the loop)."""
    fixture = "wall_ledger" if request.param == "sqlite" else "wall_pg_ledger"
    return cast(Ledger, request.getfixturevalue(fixture))


def _bridge(
    ledger: Ledger, server: ServerProcess, *, owns_ledger: bool = False, **options: Any
) -> Bridge:
    servers = [McpServerConfig(name=SERVER, url=server.url)]
    settings = BridgeSettings(principals=[P], mcp_servers=servers, scheduler=FAST, **options)
    return Bridge(ledger, settings, owns_ledger=owns_ledger)


@pytest.fixture
async def bridge(
    ledger_of_either_kind: Ledger, mrtr_server: ServerProcess
) -> AsyncIterator[Bridge]:
    async with _bridge(ledger_of_either_kind, mrtr_server) as opened:
        yield opened


def _paid(server: ServerProcess, amount: int) -> int:
    return effects(server.effects_path).count(f"paid {amount}")  # type: ignore[attr-defined]


def _events(tenant: TenantLedger, run_ref: str, kind: type[ev.BridgeEvent]) -> list[Any]:
    return [e for e in tenant.reads.events(run_ref) if isinstance(e, kind)]


def _text(outcome: object) -> str:
    assert isinstance(outcome, InlineResult), outcome
    return outcome.text()


async def test_input_required_is_a_typed_input_of_the_call_not_unknown(
    bridge: Bridge, ledger_of_either_kind: Ledger
) -> None:
    tenant = ledger_of_either_kind.for_principal(P)
    run = new_run(tenant)
    pending = await bridge.run(P, run.ref).call_tool(SERVER, "approve_payment", {"amount": 11})
    assert isinstance(pending, InputPending) and pending.leg == 1
    with pytest.raises(NoToolResult):
        pending.text()
    dispatch = tenant.reads.get_dispatch(pending.op_ref)
    assert dispatch.state is CallState.INPUT_REQUIRED and dispatch.unknown_reason is None
    (asked,) = pending.inputs
    assert (asked.method, asked.message, asked.task_ref) == (ELICITATION, "Pay 11 EUR?", None)
    assert asked.op_ref == pending.op_ref and asked.requested_schema is not None
    (event,) = _events(tenant, run.ref, ev.CallInputRequired)
    assert (event.op_ref, event.leg, event.input_ref) == (pending.op_ref, 1, asked.input_ref)
    assert bridge.run(P, event.run_ref).input_request(event).input_ref == asked.input_ref
    uhp = to_uhp_event(event)
    assert uhp is not None and uhp["type"] == "bridge.mcp_call.input_required"
    assert (uhp["op_ref"], uhp["leg"]) == (pending.op_ref, 1)
    assert [r.input_ref for r in await bridge.run(P, run.ref).pending_inputs()] == [asked.input_ref]
    assert not _events(tenant, run.ref, ev.CallUnknownOutcome)
    assert "requestState" not in tenant.reads.events(run.ref)[-1].model_dump_json()


async def test_accept_retries_with_answers_and_state_once(
    bridge: Bridge,
    ledger_of_either_kind: Ledger,
    mrtr_server: ServerProcess,
    caplog: LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # the SDK logs whole messages, requestState included
    tenant = ledger_of_either_kind.for_principal(P)
    run = new_run(tenant)
    arguments = {"amount": 12}
    paid_before = _paid(mrtr_server, 12)  # the server outlives one test (both backends)
    pending = await bridge.run(P, run.ref).call_tool(
        SERVER, "approve_payment", arguments, operation_id="pay-12"
    )
    assert isinstance(pending, InputPending)
    intruder = ledger_of_either_kind.for_principal("intruder")
    assert (
        intruder.rounds.pending_call_inputs() == [] and intruder.rounds.calls_ready_to_retry() == []
    )
    with pytest.raises(NotFound):  # another tenant's call is not there to answer
        await bridge._requester.answer_input("intruder", pending.op_ref, "approval", {})
    with pytest.raises(InvalidAnswer):  # checked against the schema: nothing recorded
        await pending.inputs[0].accept({"approve": "yes"})
    receipt = await pending.inputs[0].accept(YES)
    assert receipt.delivery is AnswerDelivery.RETRIED and receipt.delivered
    assert (receipt.op_ref, receipt.task_ref) == (pending.op_ref, None)
    assert _text(receipt.outcome) == "paid 12"  # the server read its own state back
    assert tenant.reads.get_dispatch(pending.op_ref).state is CallState.RESULT
    assert [e.type for e in tenant.reads.events(run.ref)][-3:] == [
        "call.input_required",
        "call.input_answered",
        "call.result",
    ]
    with pytest.raises(InputAlreadyAnswered):
        await pending.inputs[0].accept(YES)
    with pytest.raises(InputAlreadyAnswered):  # by the server's key too
        await bridge._requester.answer_input(P, pending.op_ref, "approval", {"action": "accept"})
    again = await bridge.run(P, run.ref).call_tool(
        SERVER, "approve_payment", arguments, operation_id="pay-12"
    )
    assert isinstance(again, InlineResult) and again.replayed and again.text() == "paid 12"
    assert _paid(mrtr_server, 12) == paid_before + 1  # one operation, one payment
    with ledger_of_either_kind.engine.connect() as conn:
        (state,) = conn.execute(select(ROUNDS.c.request_state)).one()
    assert state and state != "payment:12"  # the SDK sealed it; the bridge echoed it as is
    assert state not in caplog.text and STATE_REDACTED in caplog.text
    assert len(_events(tenant, run.ref, ev.CallInputAnswered)) == 1
    assert await bridge.run(P, run.ref).pending_inputs() == []


async def test_decline_is_sent_and_the_server_decides(
    bridge: Bridge, ledger_of_either_kind: Ledger, mrtr_server: ServerProcess
) -> None:
    run = new_run(ledger_of_either_kind.for_principal(P))
    pending = await bridge.run(P, run.ref).call_tool(SERVER, "approve_payment", {"amount": 13})
    assert isinstance(pending, InputPending)
    receipt = await pending.inputs[0].decline()
    assert _text(receipt.outcome) == "not paid (decline)"
    assert _paid(mrtr_server, 13) == 0


async def test_a_second_round_is_a_new_leg_with_its_own_inputs(
    bridge: Bridge, ledger_of_either_kind: Ledger
) -> None:
    tenant = ledger_of_either_kind.for_principal(P)
    run = new_run(tenant)
    first = await bridge.run(P, run.ref).call_tool(SERVER, "sign_report", {"title": "Q3"})
    assert isinstance(first, InputPending)
    named = await first.inputs[0].accept({"name": "Ann"})
    second = named.outcome
    assert isinstance(second, InputPending) and second.leg == 2
    assert second.op_ref == first.op_ref
    (confirm,) = await bridge.run(P, run.ref).pending_inputs()
    assert confirm.input_ref == second.inputs[0].input_ref and confirm.message is not None
    assert "Ann" in confirm.message
    done = await confirm.accept(YES)
    assert _text(done.outcome) == "Q3 signed by Ann (accept)"
    legs = [(e.leg, e.input_ref) for e in _events(tenant, run.ref, ev.CallInputRequired)]
    assert legs == [(1, first.inputs[0].input_ref), (2, confirm.input_ref)]
    assert [e.leg for e in _events(tenant, run.ref, ev.CallInputAnswered)] == [1, 2]
    assert len(_events(tenant, run.ref, ev.CallResult)) == 1


async def test_ask_mode_pauses_the_step_until_the_host_answers(
    ledger_of_either_kind: Ledger, mrtr_server: ServerProcess
) -> None:
    policies = Policies(default=ToolPolicy(wait=WaitMode.ASK))
    async with _bridge(ledger_of_either_kind, mrtr_server, policies=policies) as bridge:
        run = new_run(ledger_of_either_kind.for_principal(P))
        paid_before = _paid(mrtr_server, 14)
        async with anyio.create_task_group() as tg:  # answers from the events, as a UI would
            tg.start_soon(_answer_first_call_input, bridge, run.ref, YES)
            with anyio.fail_after(20):
                step = await bridge.run(P, run.ref).call_tool(
                    SERVER, "approve_payment", {"amount": 14}
                )
        assert _text(step) == "paid 14"
    assert _paid(mrtr_server, 14) == paid_before + 1


@pytest.fixture(scope="module")
def mrtr_tasks_server() -> Iterator[ServerProcess]:
    """FastMCP + fastmcp-tasks, asking through MRTR before it creates the task."""
    with ServerProcess("tests.servers.mrtr_tasks_server") as server:
        yield server


async def test_the_answered_leg_may_create_a_task_that_is_then_waited_for(
    ledger_of_either_kind: Ledger, mrtr_tasks_server: ServerProcess
) -> None:
    policies = Policies(default=ToolPolicy(wait=WaitMode.ASK))
    tenant = ledger_of_either_kind.for_principal(P)
    async with _bridge(ledger_of_either_kind, mrtr_tasks_server, policies=policies) as bridge:
        run = new_run(tenant)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_answer_first_call_input, bridge, run.ref, {})
            with anyio.fail_after(20):
                step = await bridge.run(P, run.ref).call_tool(
                    SERVER, "approved_export", {"rows": 3}
                )
    assert isinstance(step, TaskSettled) and step.text() == "exported 3 rows"
    assert tenant.reads.get_dispatch(step.op_ref).state is CallState.TASK
    types = [e.type for e in tenant.reads.events(run.ref)]
    assert types[1:4] == ["call.input_required", "call.input_answered", "task.created"]
    assert types[-1] == "task.terminal" and "call.unknown_outcome" not in types


async def _answer_first_call_input(bridge: Bridge, run_ref: str, content: Any) -> None:
    """The host side of an ``ask`` step: answer the call's input from the event stream."""
    async for event in bridge.run(P, run_ref).subscribe():
        if isinstance(event, ev.CallInputRequired):
            await bridge.run(P, event.run_ref).input_request(event).accept(content)
            return


async def test_oversized_request_state_is_refused_not_stored(
    bridge: Bridge, ledger_of_either_kind: Ledger
) -> None:
    tenant = ledger_of_either_kind.for_principal(P)
    run = new_run(tenant)
    with pytest.raises(InvalidTaskResponse):
        await bridge.run(P, run.ref).call_tool(SERVER, "oversized_state", {})
    (dispatch,) = tenant.reads.list_dispatches(run_ref=run.ref)
    assert dispatch.state is CallState.UNKNOWN
    (anomaly,) = _events(tenant, run.ref, ev.Anomaly)
    assert anomaly.kind == "oversized_request_state" and anomaly.op_ref == dispatch.ref


async def test_a_fresh_bridge_lists_and_answers_the_pending_input(
    tmp_path: Path, mrtr_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    async with _bridge(Ledger.open(db), mrtr_server, owns_ledger=True) as first:
        run = new_run(first._ledger.for_principal(P))
        pending = await first.run(P, run.ref).call_tool(SERVER, "approve_payment", {"amount": 15})
        assert isinstance(pending, InputPending)
    async with _bridge(Ledger.open(db), mrtr_server, owns_ledger=True) as second:
        report = second.last_recovery
        assert report is not None and report.calls_marked_unknown == 0
        assert [i.ref for i in report.pending_call_inputs] == [pending.inputs[0].input_ref]
        (again,) = await second.pending_inputs(P)
        assert _text((await again.accept(YES)).outcome) == "paid 15"
    assert _paid(mrtr_server, 15) == 1


def _killed_at(
    tmp_path: Path, server: ServerProcess, amount: int, crash: str
) -> tuple[Ledger, TenantLedger, str]:
    """A ledger whose one call's process was SIGKILLed at ``crash``: ledger, tenant, run."""
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal(P)
    run = new_run(tenant)
    _call_and_die(db, server, run.ref, amount, crash)
    return ledger, tenant, run.ref


def _call_and_die(db: Path, server: ServerProcess, run_ref: str, amount: int, crash: str) -> None:
    """One bridged call in a process that SIGKILLs itself at ``crash`` (and answers, if the
    crash point comes after the answer)."""
    answer = ["--answer"] if crash == "after_call_answer_recorded" else []
    options = {
        "--db": str(db),
        "--server-url": server.url,
        "--run-ref": run_ref,
        "--tool": "approve_payment",
        "--args": json.dumps({"amount": amount}),
        "--operation-id": f"killed-{amount}",
        "--crash": crash,
    }
    command = [sys.executable, "-m", "tests.support.crash_driver", *answer]
    command += [part for option in options.items() for part in option]
    died = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]


async def test_sigkill_after_the_round_then_answer_after_restart(
    tmp_path: Path, mrtr_server: ServerProcess
) -> None:
    ledger, tenant, run_ref = _killed_at(tmp_path, mrtr_server, 16, "after_input_round")
    async with _bridge(ledger, mrtr_server) as bridge:
        (request,) = await bridge.run(P, run_ref).pending_inputs()
        receipt = await request.accept(YES)
        assert _text(receipt.outcome) == "paid 16"
    assert _paid(mrtr_server, 16) == 1
    assert len(_events(tenant, run_ref, ev.CallInputRequired)) == 1
    ledger.close()


async def test_sigkill_between_answer_and_retry_resumes_the_retry_once(
    tmp_path: Path, mrtr_server: ServerProcess
) -> None:
    ledger, tenant, run_ref = _killed_at(tmp_path, mrtr_server, 17, "after_call_answer_recorded")
    (dispatch,) = tenant.reads.list_dispatches(run_ref=run_ref)
    assert dispatch.state is CallState.INPUT_REQUIRED  # answered, the leg never left
    assert _paid(mrtr_server, 17) == 0
    async with _bridge(ledger, mrtr_server) as bridge:
        report = bridge.last_recovery
        assert report is not None and report.answers_to_redeliver == 1
        await wait_until(lambda: tenant.reads.get_dispatch(dispatch.ref).state is CallState.RESULT)
        assert await bridge.pending_inputs(P) == []
        again = await bridge.run(P, run_ref).call_tool(
            SERVER, "approve_payment", {"amount": 17}, operation_id="killed-17"
        )
        assert isinstance(again, InlineResult) and again.replayed
    assert _paid(mrtr_server, 17) == 1  # the answered leg went out once, after the restart
    assert len(_events(tenant, run_ref, ev.CallResult)) == 1
    ledger.close()
