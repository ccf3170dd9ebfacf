"""Admission checks before retrying a consequential call whose outcome is unknown, against a
real fastmcp-tasks server (``tests.servers.orders_server``): ``place_order`` runs and records
its effect, then its reply is cut off, so the bridge sent the request and got nothing back.

The host's admission check decides: ``not_admitted`` retries (with the same operation id as
the server's duplicate-prevention key), ``admitted`` never retries, ``unknown`` waits for the
host. With the key, even a wrong ``not_admitted`` produces exactly one effect on the server.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from mcp import Client

from bridge import (
    Admission,
    AdmissionChecks,
    Bridge,
    BridgeSettings,
    CallView,
    Policies,
    ToolPolicy,
    events as ev,
)
from bridge._config import McpServerConfig
from bridge._errors import InvalidTransition
from bridge._ids import digest_arguments
from bridge._ledger.store import Ledger
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import InlineResult, UnknownOutcome
from bridge._policies import UnknownOutcomePolicy
from tests.conftest import server_with_effects
from tests.servers.orders_server import OPERATION_META_KEY
from tests.support.bridging import FAST, effects
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
RETRY = UnknownOutcomePolicy.RETRY_IF_SAFE
_items = itertools.count()


@pytest.fixture(scope="module")
def orders_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``tests.servers.orders_server``, effects counted like the tasks server's."""
    yield from server_with_effects("tests.servers.orders_server", tmp_path_factory)


class ScriptedCheck:
    """The host's admission check: answers ``verdict`` and keeps what it was asked."""

    def __init__(self, verdict: Admission) -> None:
        self.verdict = verdict
        self.asked: list[CallView] = []

    async def __call__(self, operation: CallView) -> Admission:
        self.asked.append(operation)
        return self.verdict


def _config(server: ServerProcess, *, with_key: bool = True) -> McpServerConfig:
    return McpServerConfig(
        name="orders",
        url=server.url,
        request_timeout_s=5.0,
        operation_id_meta_key=OPERATION_META_KEY if with_key else None,
    )


def _requester(ledger: Ledger, config: McpServerConfig, check: ScriptedCheck) -> TaskRequester:
    checks = AdmissionChecks(per_tool={"orders.place_order": check})
    return TaskRequester(ledger, [config], scheduler=FAST, admission_checks=checks)


async def _drop_next_reply(server: ServerProcess) -> None:
    async with Client(server.url) as client:
        await client.call_tool("drop_replies", {"count": 1})


def _orders_of(server: ServerProcess, item: str) -> int:
    return effects(server.effects_path).count(f"order {item}")  # type: ignore[attr-defined]


def _checked(ledger: Ledger, run_ref: str) -> list[ev.CallAdmissionChecked]:
    events = ledger.for_principal(P).reads.events(run_ref)
    return [e for e in events if isinstance(e, ev.CallAdmissionChecked)]


async def test_not_admitted_retries_with_the_same_key_and_takes_effect_once(
    wall_ledger: Ledger, orders_server: ServerProcess
) -> None:
    run = new_run(wall_ledger.for_principal(P))
    item = f"book-{next(_items)}"
    check = ScriptedCheck(Admission.NOT_ADMITTED)  # wrong on purpose: the order did happen
    async with _requester(wall_ledger, _config(orders_server), check) as requester:
        await _drop_next_reply(orders_server)
        outcome = await requester.call_tool(
            P, run.ref, "orders", "place_order", {"item": item},
            operation_id=f"op-{item}", unknown_outcomes=RETRY,
        )  # fmt: skip
    assert isinstance(outcome, UnknownOutcome) and outcome.admission is Admission.NOT_ADMITTED
    (retried,) = outcome.retries
    assert isinstance(retried, InlineResult) and retried.text() == f"ordered {item}"
    assert _orders_of(orders_server, item) == 1  # the key made the retry a no-op on the server
    (asked,) = check.asked
    assert (
        asked.principal,
        asked.server,
        asked.tool,
        asked.operation_id,
        asked.op_ref,
        asked.args_digest,
    ) == (
        P,
        "orders",
        "place_order",
        f"op-{item}",
        outcome.op_ref,
        digest_arguments({"item": item}),
    )
    assert asked.created_at_ms <= wall_ledger.clock()
    (checked,) = _checked(wall_ledger, run.ref)
    assert (checked.op_ref, checked.admission, checked.decided_by) == (
        outcome.op_ref,
        Admission.NOT_ADMITTED,
        "hook",
    )
    types = [e.type for e in wall_ledger.for_principal(P).reads.events(run.ref)]
    assert types[-3:] == ["call.unknown_outcome", "call.admission_checked", "call.result"]


async def test_without_the_key_the_same_wrong_verdict_orders_twice(
    wall_ledger: Ledger, orders_server: ServerProcess
) -> None:
    """The contrast: the check alone cannot know; the server's key is what saves the day."""
    run = new_run(wall_ledger.for_principal(P))
    item = f"lamp-{next(_items)}"
    config = _config(orders_server, with_key=False)
    async with _requester(wall_ledger, config, ScriptedCheck(Admission.NOT_ADMITTED)) as rq:
        await _drop_next_reply(orders_server)
        outcome = await rq.call_tool(
            P, run.ref, "orders", "place_order", {"item": item}, unknown_outcomes=RETRY
        )
    assert isinstance(outcome, UnknownOutcome) and len(outcome.retries) == 1
    assert _orders_of(orders_server, item) == 2


async def test_admitted_is_never_retried(wall_ledger: Ledger, orders_server: ServerProcess) -> None:
    run = new_run(wall_ledger.for_principal(P))
    item = f"desk-{next(_items)}"
    check = ScriptedCheck(Admission.ADMITTED)
    async with _requester(wall_ledger, _config(orders_server), check) as requester:
        await _drop_next_reply(orders_server)
        # The second call, same operation id: the verdict is on record, nothing is sent.
        outcome, again = [
            await requester.call_tool(
                P,
                run.ref,
                "orders",
                "place_order",
                {"item": item},
                operation_id=f"op-{item}",
                unknown_outcomes=RETRY,
            )
            for _ in range(2)
        ]
    assert isinstance(outcome, UnknownOutcome) and outcome.retries == ()
    assert outcome.admission is Admission.ADMITTED and not outcome.replayed
    assert isinstance(again, UnknownOutcome) and again.replayed and again.retries == ()
    assert again.admission is Admission.ADMITTED and len(check.asked) == 1
    assert _orders_of(orders_server, item) == 1
    (checked,) = _checked(wall_ledger, run.ref)
    assert checked.admission is Admission.ADMITTED and checked.decided_by == "hook"
    with pytest.raises(InvalidTransition):  # an admitted call is never declared otherwise
        await requester.resolve_unknown_outcome(P, outcome.op_ref, Admission.NOT_ADMITTED)


async def test_unknown_waits_for_the_host_and_then_retries_once(
    wall_ledger: Ledger, orders_server: ServerProcess
) -> None:
    item = f"chair-{next(_items)}"
    check = ScriptedCheck(Admission.UNKNOWN)
    policies = Policies(default=ToolPolicy(unknown_outcomes=RETRY))
    async with Bridge(
        wall_ledger,
        BridgeSettings(
            principals=[P],
            mcp_servers=[_config(orders_server)],
            scheduler=FAST,
            policies=policies,
            admission_checks=AdmissionChecks(per_server={"orders": check}),
        ),
    ) as bridge:
        run = new_run(wall_ledger.for_principal(P))
        await _drop_next_reply(orders_server)
        first = await bridge.run(P, run.ref).call_tool("orders", "place_order", {"item": item},
                                       operation_id=f"op-{item}")  # fmt: skip
        assert isinstance(first, UnknownOutcome) and first.retries == ()
        assert first.admission is Admission.UNKNOWN
        # Asked again before the host decided: still unknown, nothing sent.
        second = await bridge.run(P, run.ref).call_tool("orders", "place_order", {"item": item},
                                        operation_id=f"op-{item}")  # fmt: skip
        assert isinstance(second, UnknownOutcome) and second.retries == ()
        await bridge.run(P, run.ref).resolve_unknown_outcome(first.op_ref, Admission.NOT_ADMITTED)
        with pytest.raises(InvalidTransition):  # resolved once
            await bridge.run(P, run.ref).resolve_unknown_outcome(first.op_ref, Admission.ADMITTED)
        third = await bridge.run(P, run.ref).call_tool("orders", "place_order", {"item": item},
                                       operation_id=f"op-{item}")  # fmt: skip
        fourth = await bridge.run(P, run.ref).call_tool("orders", "place_order", {"item": item},
                                        operation_id=f"op-{item}")  # fmt: skip
    assert isinstance(third, UnknownOutcome) and third.admission is Admission.NOT_ADMITTED
    (retried,) = third.retries
    assert isinstance(retried, InlineResult) and retried.text() == f"ordered {item}"
    assert isinstance(fourth, UnknownOutcome)
    (replayed,) = fourth.retries
    assert isinstance(replayed, InlineResult) and replayed.replayed  # the retry, not resent
    assert _orders_of(orders_server, item) == 1
    assert [(c.admission, c.decided_by) for c in _checked(wall_ledger, run.ref)] == [
        (Admission.UNKNOWN, "hook"),
        (Admission.NOT_ADMITTED, "host"),
    ]
    assert len(check.asked) == 1


async def test_a_check_that_fails_leaves_the_outcome_unknown(
    wall_ledger: Ledger, orders_server: ServerProcess
) -> None:
    run = new_run(wall_ledger.for_principal(P))
    item = f"rug-{next(_items)}"

    async def broken(_operation: CallView) -> Admission:
        raise RuntimeError("the order system is down")

    checks = AdmissionChecks(per_tool={"place_order": broken})
    config = _config(orders_server)
    async with TaskRequester(wall_ledger, [config], scheduler=FAST, admission_checks=checks) as rq:
        await _drop_next_reply(orders_server)
        outcome = await rq.call_tool(
            P, run.ref, "orders", "place_order", {"item": item}, unknown_outcomes=RETRY
        )
    assert isinstance(outcome, UnknownOutcome) and outcome.retries == ()
    assert outcome.admission is Admission.UNKNOWN
    assert _orders_of(orders_server, item) == 1
