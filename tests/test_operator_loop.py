"""The operator's loop against real servers, on SQLite and PostgreSQL: a lost task's input is
closed (answering it is refused and sends nothing; attention shows the lost task, never the
input); a refused answer then a corrected one is taken (one payment); after the server refused
an answer, recovery sends nothing; attention's items leave once acted upon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode, events as ev
from bridge._errors import AnswerRefused, InvalidAnswer, TaskWasLost
from bridge._ledger.input_bounds import MAX_OPEN_INPUTS_PER_TASK, TOO_LARGE, TOO_MANY
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, TaskStatus
from bridge._runtime.step_results import TaskPending
from tests.support.bridging import FAST, adversarial_stats, effects, wait_closed, wait_until
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
LEDGERS = ["wall_ledger", "wall_pg_ledger"]


def _settings(name: str, url: str) -> BridgeSettings:
    return BridgeSettings(
        principals=[P], mcp_servers=[McpServerConfig(name=name, url=url)], scheduler=FAST
    )


async def _asking(
    bridge: Bridge, ledger: Ledger, server: str, tool: str, args: dict[str, Any]
) -> Any:
    run = await bridge.register_served_run(
        P, response_id="resp_op", session_id=None, harness_id=None
    )
    handle = await run.call_tool(server, tool, args, wait=WaitMode.DETACH)
    assert isinstance(handle, TaskPending)
    (asked,) = await wait_until(run.pending_inputs, timeout=30, what="the input request")
    return run, handle.task, asked


@pytest.mark.parametrize("ledger_fixture", LEDGERS)
async def test_a_lost_tasks_input_is_closed_and_answering_it_sends_nothing(
    ledger_fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ledger: Ledger = request.getfixturevalue(ledger_fixture)
    tenant = ledger.for_principal(P)
    effects_file = tmp_path / "effects.log"
    with ServerProcess(
        "tests.servers.tasks_server", args=["--effects-file", str(effects_file)]
    ) as server:
        async with Bridge(ledger, _settings("pay", server.url)) as bridge:
            args = {"amount": 120, "payment_key": "pay-lost"}
            run, handle, asked = await _asking(bridge, ledger, "pay", "approve_payment", args)
            kinds = [(i.kind, i.ref) for i in await bridge.attention()]
            assert kinds == [("input_waiting", asked.input_ref)]
            server.restart()  # its in-memory tasks are gone: tasks/get answers -32602
            await wait_closed(tenant, handle.ref, timeout=30)
            task = tenant.reads.get_task(handle.ref)
            assert task.lost_reason is LostReason.NOT_FOUND
            # Lost everywhere: no view shows the input waiting; answering it is refused.
            assert await run.pending_inputs() == [] and await bridge.pending_inputs(P) == []
            assert all(r.declined_at_ms for r in tenant.reads.input_requests(handle.ref))  # closed
            with pytest.raises(TaskWasLost, match="was lost"):
                await run.pending_input(handle.ref, asked.input_ref)
            with pytest.raises(TaskWasLost, match="nothing was recorded or sent"):
                await asked.accept({"approve": True})
            items = await bridge.attention()
            assert [(i.kind, i.ref) for i in items] == [("lost_task", handle.ref)]
            await run.acknowledge(handle.ref, by="alice")
            assert await bridge.attention() == []
    assert effects(effects_file) == []  # never paid
    closed = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputDeclined)]
    assert [(e.input_ref, e.reason, e.answered) for e in closed] == [
        (asked.input_ref, "task_lost", False)
    ]
    (request_row,) = tenant.reads.input_requests(handle.ref)
    assert request_row.answered_at_ms is None and request_row.answer is None


@pytest.mark.parametrize("ledger_fixture", LEDGERS)
async def test_a_refused_answer_then_a_corrected_one_is_taken(
    ledger_fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ledger: Ledger = request.getfixturevalue(ledger_fixture)
    tenant = ledger.for_principal(P)
    effects_file = tmp_path / "effects.log"
    with ServerProcess(
        "tests.servers.tasks_server", args=["--effects-file", str(effects_file)]
    ) as server:
        async with Bridge(ledger, _settings("pay", server.url)) as bridge:
            args = {"amount": 75, "payment_key": "pay-fix"}
            run, handle, asked = await _asking(bridge, ledger, "pay", "approve_payment", args)
            with pytest.raises(InvalidAnswer, match="approve"):
                await asked.accept(texts={"approve": "perhaps"})
            assert tenant.reads.input_requests(handle.ref, pending_only=True) != []
            again = await run.pending_input(handle.ref, asked.input_ref)
            receipt = await again.accept(texts={"approve": "yes"})
            assert receipt.delivered
            await wait_closed(tenant, handle.ref, timeout=30)
            assert await bridge.attention() == []
    assert tenant.reads.get_task(handle.ref).status is TaskStatus.COMPLETED
    assert effects(effects_file) == ["payment pay-fix 75"]


@pytest.mark.parametrize("ledger_fixture", LEDGERS)
async def test_after_the_server_refused_an_answer_recovery_sends_nothing(
    ledger_fixture: str, request: pytest.FixtureRequest, adversarial_server: ServerProcess
) -> None:
    wall_ledger: Ledger = request.getfixturevalue(ledger_fixture)
    tenant = wall_ledger.for_principal(P)
    settings = _settings("fake", adversarial_server.url)
    async with Bridge(wall_ledger, settings) as bridge:
        run, handle, asked = await _asking(bridge, wall_ledger, "fake", "refuse_update", {})
        with pytest.raises(AnswerRefused):
            await asked.accept({})
        refused = (await adversarial_stats(adversarial_server.url))["updates"]["refused"]
        # The refused answer was dropped: the request waits again, for a person, and the
        # refusal is an anomaly the operator sees.
        items = [(i.kind, i.ref) for i in await bridge.attention()]
        assert items[0] == ("input_waiting", asked.input_ref)
        assert [kind for kind, _ in items[1:]] == ["anomaly"]
    async with Bridge(wall_ledger, settings) as recovered:  # recovers on start
        report = recovered.last_recovery
        assert report is not None and report.answers_to_redeliver == 0
        scheduler = recovered._requester.scheduler
        await wait_until(lambda: scheduler.stats.polls >= 5, what="polls after recovery")
        stats = await adversarial_stats(adversarial_server.url)
        assert stats["updates"]["refused"] == refused  # nothing was sent again
        await recovered.run(P, run.ref).cancel_task(handle.ref)
    assert tenant.inputs.undelivered_answers() == []


async def test_inputs_are_bounded_and_what_is_beyond_is_an_anomaly(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    """One reply asking thousands of inputs records at most the bound (one anomaly, however
    often it is polled again); a question of megabytes is kept as a marker, never whole."""
    tenant = wall_ledger.for_principal(P)
    async with Bridge(wall_ledger, _settings("fake", adversarial_server.url)) as bridge:
        run = await bridge.register_served_run(P, response_id="resp_flood", session_id=None,
                                               harness_id=None)  # fmt: skip
        flood = await run.call_tool("fake", "flood_inputs", {}, wait=WaitMode.DETACH)
        huge = await run.call_tool("fake", "huge_question", {}, wait=WaitMode.DETACH)
        assert isinstance(flood, TaskPending) and isinstance(huge, TaskPending)

        def anomalies() -> list[str]:
            return [e.kind for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly)]

        await wait_until(lambda: len(anomalies()) >= 2, timeout=30, what="both anomalies")
        scheduler = bridge._requester.scheduler
        polls = scheduler.stats.polls
        await wait_until(lambda: scheduler.stats.polls >= polls + 6, what="more polls")
        items = await bridge.attention()
        await run.cancel_task(flood.task.ref)
        await run.cancel_task(huge.task.ref)
    assert sorted(anomalies()) == [TOO_LARGE, TOO_MANY]  # each once
    assert len(tenant.reads.input_requests(flood.task.ref)) == MAX_OPEN_INPUTS_PER_TASK
    asked = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputRequired)]
    assert len(asked) == MAX_OPEN_INPUTS_PER_TASK + 1
    (kept,) = tenant.reads.input_requests(huge.task.ref)
    assert len(json.dumps(kept.params)) < 8 * 1024 and kept.params["bridge.truncated"] is True
    kinds = [item.kind for item in items]
    assert kinds.count("input_waiting") == MAX_OPEN_INPUTS_PER_TASK + 1
    assert kinds.count("anomaly") == 2
    (too_large,) = [i for i in items if i.ref == kept.ref]
    assert too_large.question is not None and too_large.question.startswith("[question too large")
