"""Webhooks for attention items: the outbox row is written with the event that creates the item,
a deliverer pushes it to a real receiver on loopback that verifies each signature with the
``standardwebhooks`` package, a receiver that is down gets the item later (same id), and an
endpoint that keeps failing becomes a ``webhook_undeliverable`` anomaly on the item's run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bridge import Bridge, BridgeSettings, ReplicaConfig, WebhookEndpoint, events as ev
from bridge._ledger.attention_events import WEBHOOK_UNDELIVERABLE
from bridge._ledger.coordination.deliverer_lease import hold_deliverer, release_deliverer
from bridge._ledger.coordination.leases import ReplicaRegistry
from bridge._ledger.store import Ledger
from tests.support.builders import new_run
from tests.support.postgres import fresh_database
from tests.support.webhooks import Receiver, new_secret, one_of_each_kind, receiving

pytestmark = pytest.mark.anyio

SECRET = new_secret()


def _credentials(ref: str) -> str | None:
    return SECRET if ref == "acme-hook" else None


@asynccontextmanager
async def _bridge(path: Path, receiver: Receiver, **endpoint: int) -> AsyncIterator[Bridge]:
    hook = WebhookEndpoint(principal="acme", url=receiver.url, secret_ref="acme-hook", **endpoint)
    settings = BridgeSettings(
        ledger_url=path,
        principals=["acme", "globex"],
        webhooks=[hook],
        credentials=_credentials,
        recover_on_start=False,
    )
    async with Bridge.open(settings) as bridge:
        yield bridge


def _types(ledger: Ledger, run_ref: str) -> Sequence[str]:
    return [e.type for e in ledger.for_principal("acme").reads.events(run_ref)]


async def test_each_attention_item_is_pushed_signed_with_its_stable_id(db_url: str) -> None:
    with receiving(SECRET) as receiver:
        async with _bridge(db_url, receiver) as bridge:
            tenant = bridge._ledger.for_principal("acme")
            expected = one_of_each_kind(tenant)
            await receiver.until(lambda _r: tenant.outbox.webhook_outbox_figures().delivered == 4)
            # Another principal without an endpoint: its items stay in its outbox, unsent.
            one_of_each_kind(bridge._ledger.for_principal("globex"))
            figures = tenant.outbox.webhook_outbox_figures()
    assert receiver.rejected == 0
    by_id = {r.id: r for r in receiver.received}
    assert set(by_id) == set(expected.values())
    for kind, item_id in expected.items():
        payload = by_id[item_id].payload
        assert payload["type"] == f"attention.{kind}"
        assert payload["data"]["id"] == item_id and payload["data"]["principal"] == "acme"
        assert payload["data"]["kind"] == kind
    assert (figures.pending, figures.delivered, figures.undeliverable) == (0, 4, 0)


async def test_the_outbox_row_commits_with_its_event_or_not_at_all(db_url: str) -> None:
    ledger = Ledger.open(db_url)
    try:
        tenant = ledger.for_principal("acme")
        run = new_run(tenant)
        with pytest.raises(RuntimeError, match="fails after"), tenant._write() as tx:
            tenant._append(tx, run.ref, ev.Anomaly(kind="malformed_reply", detail="x"))
            raise RuntimeError("the write fails after the append")
        assert tenant.outbox.due_webhooks() == [] and _types(ledger, run.ref) == ["run.registered"]
        tenant.runs.record_anomaly(run.ref, "malformed_reply", "x")
        assert [i.kind for i in tenant.outbox.due_webhooks()] == ["anomaly"]
    finally:
        ledger.close()


async def test_a_receiver_down_for_a_while_gets_every_item_later(tmp_path: Path) -> None:
    with receiving(SECRET) as receiver:
        receiver.set_mode("fail")
        async with _bridge(
            tmp_path / "ledger.db", receiver, first_retry_ms=50, max_retry_ms=200
        ) as bridge:
            tenant = bridge._ledger.for_principal("acme")
            expected = one_of_each_kind(tenant)
            await receiver.until(lambda r: r.requests >= 2 * len(expected))  # each refused twice
            receiver.set_mode("ok")
            await receiver.until(lambda _r: tenant.outbox.webhook_outbox_figures().delivered == 4)
            due = tenant.outbox.due_webhooks()
            figures = tenant.outbox.webhook_outbox_figures()
    assert due == [] and figures.delivered == 4 and figures.undeliverable == 0
    assert receiver.rejected == 0


async def test_an_endpoint_that_keeps_failing_becomes_an_anomaly(tmp_path: Path) -> None:
    with receiving(SECRET) as receiver:
        receiver.set_mode("fail")
        async with _bridge(
            tmp_path / "ledger.db", receiver, first_retry_ms=20, max_retry_ms=40, max_attempts=3
        ) as bridge:
            tenant = bridge._ledger.for_principal("acme")
            run = new_run(tenant)
            tenant.runs.record_anomaly(run.ref, "malformed_reply", "not JSON")
            await receiver.until(lambda r: r.requests >= 3)

            def given_up() -> bool:
                return WEBHOOK_UNDELIVERABLE in [
                    getattr(e, "kind", None) for e in tenant.reads.events(run.ref)
                ]

            await receiver.until(lambda _r: given_up())
            figures = tenant.outbox.webhook_outbox_figures()
            requests = receiver.requests
            # The failing endpoint is in front of the operator: an anomaly item in attention,
            # with its next step, until someone acknowledges it.
            items = await bridge.attention("acme")
            failing = [
                i for i in items if i.kind == "anomaly" and WEBHOOK_UNDELIVERABLE in i.summary
            ]
            assert len(failing) == 1 and failing[0].run_ref == run.ref and failing[0].next_step
            await bridge.run("acme", run.ref).acknowledge(failing[0].ref, by="oncall")
            assert [
                i for i in await bridge.attention("acme") if WEBHOOK_UNDELIVERABLE in i.summary
            ] == []
    assert requests == 3 and receiver.received == []
    assert (figures.pending, figures.delivered, figures.undeliverable) == (0, 0, 1)
    anomaly = [e for e in _events(tmp_path, run.ref) if isinstance(e, ev.Anomaly)][-1]
    assert anomaly.kind == WEBHOOK_UNDELIVERABLE and "after 3 attempts" in anomaly.detail
    assert "HTTP 503" in anomaly.detail and SECRET not in anomaly.detail


def _events(tmp_path: Path, run_ref: str) -> list[ev.BridgeEvent]:
    ledger = Ledger.open(tmp_path / "ledger.db")
    try:
        tenant = ledger.for_principal("acme")
        # The anomaly it became is not itself pushed (it would go to the failing endpoint).
        assert tenant.outbox.webhook_outbox_figures().pending == 0
        return tenant.reads.events(run_ref)
    finally:
        ledger.close()


async def test_a_secret_reference_that_resolves_to_nothing_is_an_error_not_a_silent_push(
    tmp_path: Path,
) -> None:
    with receiving(SECRET) as receiver:
        hook = WebhookEndpoint(
            principal="acme", url=receiver.url, secret_ref="missing", max_attempts=1
        )
        settings = BridgeSettings(
            ledger_url=tmp_path / "ledger.db",
            principals=["acme"],
            webhooks=[hook],
            credentials=_credentials,
            recover_on_start=False,
        )
        async with Bridge.open(settings) as bridge:
            tenant = bridge._ledger.for_principal("acme")
            run = new_run(tenant)
            tenant.runs.record_anomaly(run.ref, "malformed_reply", "x")
            await receiver.until(
                lambda _r: tenant.outbox.webhook_outbox_figures().undeliverable == 1, timeout=30
            )
            detail = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly)][
                -1
            ].detail
    assert receiver.requests == 0
    assert "'missing' resolved to nothing" in detail


def test_one_deliverer_holds_the_lease_per_ledger(db_url: str) -> None:
    ledger = Ledger.open(db_url)
    try:
        registry = ReplicaRegistry(ledger)
        a = registry.register("a", 60_000)
        b = registry.register("b", 60_000)
        assert hold_deliverer(ledger, a) and hold_deliverer(ledger, a)  # kept while alive
        assert not hold_deliverer(ledger, b)
        a_again = registry.register("a", 60_000)  # a restarted: its old incarnation is gone
        assert hold_deliverer(ledger, b) and not hold_deliverer(ledger, a_again)
        release_deliverer(ledger, b)
        assert hold_deliverer(ledger, a_again)
        registry.retire(a_again)  # an expired membership holds nothing
        assert hold_deliverer(ledger, b)
    finally:
        ledger.close()


def test_endpoint_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookEndpoint(principal="acme", url="ftp://x", secret_ref="r")
    with pytest.raises(ValueError, match="secret_ref"):
        WebhookEndpoint(principal="acme", url="http://127.0.0.1/", secret_ref="")
    hook = WebhookEndpoint(principal="acme", url="http://127.0.0.1/", secret_ref="r")
    with pytest.raises(ValueError, match="does not serve"):
        BridgeSettings(principals=["globex"], webhooks=[hook])
    with pytest.raises(ValueError, match="one webhook endpoint per principal"):
        BridgeSettings(principals=["acme"], webhooks=[hook, hook])
    assert [hook.retry_delay_ms(n) for n in (1, 2, 3)] == [1_000, 2_000, 4_000]
    assert hook.retry_delay_ms(40) == hook.max_retry_ms


@pytest.mark.postgres
async def test_two_replicas_deliver_each_item_once(postgres_admin_url: str) -> None:
    """Two bridges in leased mode on one PostgreSQL ledger, both with the endpoint: one holds
    the deliverer's lease, and each item reaches the receiver once (no crash, no repeat),
    whichever replica wrote it."""
    with fresh_database(postgres_admin_url) as url, receiving(SECRET) as receiver:
        hook = WebhookEndpoint(principal="acme", url=receiver.url, secret_ref="acme-hook")

        def settings(replica: str) -> BridgeSettings:
            return BridgeSettings(
                ledger_url=url,
                principals=["acme"],
                webhooks=[hook],
                credentials=_credentials,
                replica=ReplicaConfig(replica, lease_ms=3_000, claim_every_ms=200),
            )

        async with Bridge.open(settings("r1")) as first, Bridge.open(settings("r2")) as second:
            expected: set[str] = set()
            for bridge in (first, second):  # items written by both replicas
                tenant = bridge._ledger.for_principal("acme")
                expected |= set(one_of_each_kind(tenant).values())
            tenant = first._ledger.for_principal("acme")

            def settled(r: Receiver) -> bool:
                figures = tenant.outbox.webhook_outbox_figures()
                return expected <= r.ids() and figures.pending == 0

            await receiver.until(settled)  # (the replicas find the tasks' server gone: more)
            holders = [b._deliverer for b in (first, second)]
    assert len(receiver.received) == len(receiver.ids())  # each item once
    assert sorted(h.holds_lease for h in holders if h is not None) == [False, True]
