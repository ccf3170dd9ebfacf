"""The MCP side against the in-repo ADVERSARIAL FAKE: wire behaviour no real server produces.

Each bad input must end in a typed error or an explicit event, and nothing already recorded may
be lost or turned into success.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge import events as ev
from bridge._config import McpServerConfig, SchedulerConfig
from bridge._errors import InvalidTaskResponse
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, LostReason, TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import TaskHandle, UnknownOutcome
from bridge._policies import UnknownOutcomePolicy
from tests.support.bridging import FAST, adversarial_stats, event_types, wait_closed, wait_until
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"


def _config(server: ServerProcess, **overrides: object) -> McpServerConfig:
    settings: dict[str, object] = {"name": "fake", "url": server.url, "request_timeout_s": 5.0}
    settings.update(overrides)
    return McpServerConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture
async def requester(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> AsyncIterator[TaskRequester]:
    async with TaskRequester(wall_ledger, [_config(adversarial_server)], scheduler=FAST) as opened:
        yield opened


def _anomalies(ledger: Ledger, run_ref: str) -> list[ev.Anomaly]:
    tenant = ledger.for_principal(PRINCIPAL)
    return [e for e in tenant.reads.events(run_ref) if isinstance(e, ev.Anomaly)]


async def test_status_regression_is_an_anomaly_and_the_result_is_kept(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "regress", {})
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    # Re-check the closed handle: the server now claims "working".
    task = await requester.scheduler.poll_once(PRINCIPAL, tenant.reads.get_task(outcome.task_ref))
    assert task.status is TaskStatus.COMPLETED and task.result["content"][0]["text"] == "done"
    assert [a.kind for a in _anomalies(wall_ledger, run.ref)] == ["task_status_regression"]


async def test_reused_input_key_is_flagged_once_and_not_resurfaced(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "reuse_key", {})
    assert isinstance(outcome, TaskHandle)
    (asked,) = await wait_until(
        lambda: [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputRequired)]
    )
    assert (
        await requester.answer_input(PRINCIPAL, outcome.task_ref, asked.input_ref, {"ok": 1})
    ).delivered
    await wait_until(lambda: _anomalies(wall_ledger, run.ref))
    polls = requester.scheduler.stats.polls
    await wait_until(lambda: requester.scheduler.stats.polls >= polls + 5)
    assert [a.kind for a in _anomalies(wall_ledger, run.ref)] == ["reused_input_key"]
    assert event_types(tenant, run.ref).count("task.input_required") == 1
    (request,) = tenant.reads.input_requests(outcome.task_ref)
    assert request.params["message"] == "first?"  # the first request stays on record


async def test_malformed_create_is_a_typed_error_and_an_unknown_outcome(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with pytest.raises(InvalidTaskResponse) as raised:
        await requester.call_tool(PRINCIPAL, run.ref, "fake", "malformed_create", {})
    dispatch = tenant.reads.get_dispatch(raised.value.op_ref)
    assert dispatch.state is CallState.UNKNOWN and dispatch.result is None
    assert tenant.reads.list_tasks(run_ref=run.ref) == []
    assert [a.kind for a in _anomalies(wall_ledger, run.ref)] == ["malformed_reply"]
    assert "call.unknown_outcome" in event_types(tenant, run.ref)


async def test_malformed_get_is_reported_once_and_the_handle_kept(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "malformed_get", {})
    assert isinstance(outcome, TaskHandle)
    await wait_until(lambda: _anomalies(wall_ledger, run.ref))
    failures = requester.scheduler.stats.failures
    await wait_until(lambda: requester.scheduler.stats.failures >= failures + 3)
    (anomaly,) = _anomalies(wall_ledger, run.ref)
    assert anomaly.kind == "malformed_reply" and "exploded" in anomaly.detail
    task = tenant.reads.get_task(outcome.task_ref)
    assert task.status is TaskStatus.WORKING and task.is_open  # nothing invented


async def test_task_on_an_undeclared_request_is_invalid(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with pytest.raises(InvalidTaskResponse) as raised:
        await requester.call_tool(
            PRINCIPAL, run.ref, "fake", "undeclared_task", {}, declare_tasks=False
        )
    assert tenant.reads.get_dispatch(raised.value.op_ref).state is CallState.UNKNOWN
    assert tenant.reads.list_tasks(run_ref=run.ref) == []
    assert [a.kind for a in _anomalies(wall_ledger, run.ref)] == ["task_on_undeclared_request"]


async def test_poll_interval_zero_cannot_make_it_spin(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    floor = SchedulerConfig(floor_ms=200, jitter=0.0)
    async with TaskRequester(wall_ledger, [_config(adversarial_server)], scheduler=floor) as rq:
        before = (await adversarial_stats(adversarial_server.url))["gets"].get("poll_zero", 0)
        start = wall_ledger.clock()
        outcome = await rq.call_tool(PRINCIPAL, run.ref, "fake", "poll_zero", {})
        assert isinstance(outcome, TaskHandle)
        await wait_until(lambda: rq.scheduler.stats.polls >= 4)
        after = (await adversarial_stats(adversarial_server.url))["gets"]["poll_zero"]
        elapsed = wall_ledger.clock() - start
    assert after - before <= elapsed // 200 + 1  # at most one poll per floor interval


async def test_huge_poll_interval_is_capped_by_the_ceiling(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    ceiling = SchedulerConfig(ceiling_ms=150)
    async with TaskRequester(wall_ledger, [_config(adversarial_server)], scheduler=ceiling) as rq:
        outcome = await rq.call_tool(PRINCIPAL, run.ref, "fake", "poll_huge", {})
        assert isinstance(outcome, TaskHandle)
        # Uncapped, the next poll would be 10**12 ms away: any deadline proves the cap.
        await wait_until(lambda: rq.scheduler.stats.polls >= 3, timeout=30)
    assert tenant.reads.get_task(outcome.task_ref).is_open


async def test_ttl_expiry_marks_the_handle_lost(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "ttl_short", {})
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    task = tenant.reads.get_task(outcome.task_ref)
    assert task.lost_reason is LostReason.TTL_EXPIRED and task.status is TaskStatus.WORKING
    assert event_types(tenant, run.ref)[-1] == "task.lost"


async def test_vanishing_task_is_lost_not_found(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "vanishing", {})
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    assert tenant.reads.get_task(outcome.task_ref).lost_reason is LostReason.NOT_FOUND


async def test_reply_that_never_arrives_is_unknown_and_not_repeated(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    config = _config(adversarial_server, request_timeout_s=0.5)
    before = (await adversarial_stats(adversarial_server.url))["calls"].get("never_reply", 0)
    async with TaskRequester(wall_ledger, [config], scheduler=FAST) as rq:
        outcome = await rq.call_tool(
            PRINCIPAL,
            run.ref,
            "fake",
            "never_reply",
            {},
            unknown_outcomes=UnknownOutcomePolicy.RETRY_IF_SAFE,  # not safe: not retried
        )
    assert isinstance(outcome, UnknownOutcome) and outcome.retries == ()
    assert tenant.reads.get_dispatch(outcome.op_ref).state is CallState.UNKNOWN
    event = tenant.reads.events(run.ref)[-1]
    assert isinstance(event, ev.CallUnknownOutcome)
    after = (await adversarial_stats(adversarial_server.url))["calls"]["never_reply"]
    assert after - before == 1


async def test_unknown_outcome_retried_only_for_an_allow_listed_tool(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    config = _config(
        adversarial_server, request_timeout_s=0.5, retry_safe_tools=frozenset({"never_reply"})
    )
    before = (await adversarial_stats(adversarial_server.url))["calls"].get("never_reply", 0)
    async with TaskRequester(
        wall_ledger, [config], scheduler=FAST, unknown_outcomes=UnknownOutcomePolicy.RETRY_IF_SAFE
    ) as rq:
        outcome = await rq.call_tool(PRINCIPAL, run.ref, "fake", "never_reply", {})
    assert isinstance(outcome, UnknownOutcome) and len(outcome.retries) == 1
    assert isinstance(outcome.retries[0], UnknownOutcome)
    after = (await adversarial_stats(adversarial_server.url))["calls"]["never_reply"]
    assert after - before == 2  # the original and exactly one retry
    assert event_types(tenant, run.ref).count("call.unknown_outcome") == 2


@pytest.mark.e2e
async def test_server_unreachable_past_grace_is_reported_not_lost(wall_ledger: Ledger) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with ServerProcess("tests.servers.adversarial_server") as server:
        async with TaskRequester(wall_ledger, [_config(server)], scheduler=FAST) as rq:
            outcome = await rq.call_tool(PRINCIPAL, run.ref, "fake", "poll_zero", {})
            assert isinstance(outcome, TaskHandle)
            server.kill()
            await wait_until(lambda: "server.unreachable" in event_types(tenant, run.ref))
            task = tenant.reads.get_task(outcome.task_ref)
            assert task.is_open and task.lost_reason is None
            assert event_types(tenant, run.ref).count("server.unreachable") == 1


async def test_tasks_requests_carry_the_mcp_name_header(
    requester: TaskRequester, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "poll_huge", {})
    assert isinstance(outcome, TaskHandle)
    assert await requester.cancel_task(PRINCIPAL, outcome.task_ref)
    await wait_closed(tenant, outcome.task_ref)
    counts = (await adversarial_stats(adversarial_server.url))["name_header"]
    assert counts.get("missing_or_wrong", 0) == 0 and counts["ok"] >= 2
