"""2025-11-25 tasks that need input, against the official SDK 1.30 (``ServerTaskContext.elicit``).

The server moves the task to ``input_required`` and sends its ``elicitation/create`` (with the
related-task ``_meta``) on the stream of a ``tasks/result`` the client holds open. The bridge must
hold that stream in the background when a poll sees ``input_required``, record the question as the
task's input request (same ``task.input_required`` event, same typed ``InputRequest``, same
handlers), answer the server with the recorded answer, and take the held reply as the result;
after a restart the question stays pending and the server's re-ask is the same request. Never
``tasks/list``, never ``tasks/update`` (that is the Tasks extension's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge import (
    Accept,
    Bridge,
    BridgeSettings,
    FormElicitation,
    InputHandlers,
    TaskPending,
    TaskStatus,
    WaitMode,
)
from bridge._config import McpServerConfig
from bridge._mcp.wire.generations import EXPERIMENTAL_TASKS_VERSION
from bridge._outcomes import InputRequest
from tests.support.bridging import FAST, effects, event_types, wait_until
from tests.support.legacy_venv import LegacyServerProcess
from tests.test_mcp_legacy_tasks import _methods, legacy_python, legacy_server

__all__ = ["legacy_python", "legacy_server"]  # the fixtures, shared with the task tests

pytestmark = pytest.mark.anyio
P = "acme"
QUESTION = "Approve a payment of {}?"


def _open(path: Path, server: LegacyServerProcess, handlers: InputHandlers | None = None) -> Bridge:
    return Bridge.open(
        BridgeSettings(
            ledger_url=path,
            principals=[P],
            mcp_servers=[McpServerConfig(name="legacy", url=server.url)],
            scheduler=FAST,
            input_handlers=handlers,
        )
    )


async def _start_payment(bridge: Bridge, amount: str) -> tuple[str, str]:
    run = await bridge.register_served_run(
        P, response_id=f"resp_{amount[:2]}", session_id="hsess_pay", harness_id="chrn_t"
    )
    step = await run.call_tool(
        "legacy", "approve_payment", {"amount": amount}, wait=WaitMode.DETACH
    )
    assert isinstance(step, TaskPending)
    assert step.task.task_generation == EXPERIMENTAL_TASKS_VERSION
    return run.ref, step.task.ref


async def _pending_one(bridge: Bridge, run_ref: str) -> InputRequest:
    async def listed() -> list[InputRequest]:
        return await bridge.run(P, run_ref).pending_inputs()

    [request] = await wait_until(listed, what="the question listed")
    return request


async def _settled_text(bridge: Bridge, task_ref: str) -> str:
    [task] = await (await bridge.run_of(P, task_ref)).wait_for([task_ref], timeout=15)
    assert task.status is TaskStatus.COMPLETED
    return str(task.result["content"][0]["text"])


def _assert_asked_typed(request: InputRequest, task_ref: str, amount: str) -> None:
    assert request.task_ref == task_ref and request.method == "elicitation/create"
    assert request.message == QUESTION.format(amount)
    schema = request.requested_schema
    assert schema is not None and schema["required"] == ["approve"]
    assert "_meta" not in request.params  # related-task: the raw task id, never recorded


def _no_raw_task_id(bridge: Bridge, run_ref: str, task_ref: str) -> None:
    tenant = bridge._ledger.for_principal(P)
    raw = tenant.reads.get_task(task_ref).task_id
    assert all(raw not in repr(event) for event in tenant.reads.events(run_ref))


async def test_the_host_answers_a_legacy_question_and_the_task_completes(
    tmp_path: Path, legacy_server: LegacyServerProcess
) -> None:
    async with _open(tmp_path / "bridge.db", legacy_server) as bridge:
        run_ref, task_ref = await _start_payment(bridge, "40 EUR")
        request = await _pending_one(bridge, run_ref)
        _assert_asked_typed(request, task_ref, "40 EUR")
        tenant = bridge._ledger.for_principal(P)
        assert tenant.reads.get_task(task_ref).status is TaskStatus.INPUT_REQUIRED
        [recorded] = tenant.reads.input_requests(task_ref)
        assert recorded.key.startswith("elicitation/create#")  # derived: no inputRequests key
        await request.accept({"approve": True, "note": "ok"})
        assert await _settled_text(bridge, task_ref) == "payment of 40 EUR approved ok"
        # The answer counts as delivered once the task's end is seen: at once when the held
        # tasks/result brings it, just after the terminal state when a poll sees the end first.
        [delivered] = await wait_until(
            lambda: [
                r for r in tenant.reads.input_requests(task_ref) if r.delivered_at_ms is not None
            ],
            what="the answer marked delivered",
        )
        assert delivered.answer is None
        types = event_types(tenant, run_ref)
        assert types.count("task.input_required") == 1 and types[-1] == "task.terminal"
        assert types.index("task.input_answered") < types.index("task.terminal")
        _no_raw_task_id(bridge, run_ref, task_ref)
    methods = await _methods(legacy_server)
    assert "tasks/list" not in methods and "tasks/update" not in methods
    # The held tasks/result carried the question and then the result; a poll that saw the
    # terminal status before the held reply was recorded may have fetched it once more.
    assert methods["tasks/result"] in (1, 2)


async def test_a_registered_form_handler_answers_without_the_host(
    tmp_path: Path, legacy_server: LegacyServerProcess
) -> None:
    seen: list[FormElicitation] = []

    async def approve(asked: FormElicitation) -> Accept:
        seen.append(asked)
        return Accept({"approve": True, "note": "by policy"})

    handlers = InputHandlers(form=approve)
    async with _open(tmp_path / "bridge.db", legacy_server, handlers) as bridge:
        run_ref, task_ref = await _start_payment(bridge, "12 EUR")
        assert await _settled_text(bridge, task_ref) == "payment of 12 EUR approved by policy"
        assert await bridge.run(P, run_ref).pending_inputs() == []
        types = event_types(bridge._ledger.for_principal(P), run_ref)
        assert types.count("task.input_required") == types.count("task.input_answered") == 1
    [asked] = seen
    assert asked.message == QUESTION.format("12 EUR") and asked.task_ref == task_ref
    assert asked.server == "legacy" and asked.requested_schema["required"] == ["approve"]
    assert "tasks/list" not in await _methods(legacy_server)


@pytest.mark.e2e  # the bridge is closed and reopened on one ledger while the question is open
async def test_a_restarted_bridge_still_lists_the_question_and_its_answer_completes(
    tmp_path: Path, legacy_server: LegacyServerProcess
) -> None:
    path = tmp_path / "bridge.db"
    asked_file: Path = legacy_server.effects_path  # type: ignore[attr-defined]
    async with _open(path, legacy_server) as first:
        run_ref, task_ref = await _start_payment(first, "7 EUR")
        before = await _pending_one(first, run_ref)
        _assert_asked_typed(before, task_ref, "7 EUR")
    assert effects(asked_file) == ["asked 7 EUR"]
    async with _open(path, legacy_server) as second:
        # Listed from the ledger at once; the re-opened tasks/result gets the question again.
        again = await _pending_one(second, run_ref)
        assert again.input_ref == before.input_ref
        await wait_until(lambda: effects(asked_file) == ["asked 7 EUR"] * 2, what="re-asked")
        assert [r.input_ref for r in await second.run(P, run_ref).pending_inputs()] == [
            before.input_ref
        ]
        await again.accept({"approve": True})
        assert await _settled_text(second, task_ref) == "payment of 7 EUR approved"
        tenant = second._ledger.for_principal(P)
        types = event_types(tenant, run_ref)
        assert types.count("task.input_required") == 1  # the re-ask is the same request
        _no_raw_task_id(second, run_ref, task_ref)
    methods = await _methods(legacy_server)
    assert "tasks/list" not in methods and "tasks/update" not in methods
    # One held per bridge (the second carried the result), maybe one fetched by a poll.
    assert methods["tasks/result"] in (2, 3)


async def test_an_elicitation_during_a_direct_call_reaches_the_form_handler(
    tmp_path: Path, legacy_server: LegacyServerProcess
) -> None:
    """A server that asks on a directly answered call's own stream (no task): the registered
    form handler answers it (checked like every handler's answer); with no handler the
    server is told clearly that none is registered."""
    seen: list[FormElicitation] = []

    async def approve(asked: FormElicitation) -> Accept:
        seen.append(asked)
        return Accept({"approve": True, "note": "inline"})

    async with _open(tmp_path / "one.db", legacy_server, InputHandlers(form=approve)) as bridge:
        run = await bridge.register_served_run(
            P, response_id="resp_in", session_id="hsess_in", harness_id="chrn_t"
        )
        step = await run.call_tool("legacy", "confirm_inline", {"amount": "3 EUR"})
        assert step.text() == "3 EUR accept inline"
    [asked] = seen
    assert asked.message == "Confirm 3 EUR?" and asked.server == "legacy"
    assert asked.task_ref is None and asked.input_ref.startswith("direct#")
    assert asked.requested_schema["required"] == ["approve"]
    # The host answers recorded task inputs, which this is not: refused, saying what to do.
    async with _open(tmp_path / "two.db", legacy_server) as bridge:
        run = await bridge.register_served_run(
            P, response_id="resp_in2", session_id="hsess_in2", harness_id="chrn_t"
        )
        refused = await run.call_tool("legacy", "confirm_inline", {"amount": "4 EUR"})
        assert "form handler" in refused.text() and "none is registered" in refused.text()
