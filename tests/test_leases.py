"""Replica membership, claims and fencing in the ledger, on both backends.

Expiry is driven without waiting: a membership registered or renewed with ``lease_ms=0`` has
already lapsed on the database's clock.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, text
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import CompileError

from bridge._errors import LeaseLost
from bridge._ledger.coordination.leases import ReplicaRegistry, TenantLeases, db_now_ms
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task
from tests.support.postgres import wait_for_lock_waiters

LEASE_MS = 60_000
GATE_KEY = 4242  # the advisory lock a claim is made to wait on (PostgreSQL test below)


def _open_tasks(ledger: Ledger, count: int, principal: str = "acme") -> list[str]:
    """Open tasks created (and so first due) one millisecond apart, oldest first."""
    tenant = ledger.for_principal(principal)
    run = new_run(tenant)
    clock = ledger.clock
    refs = []
    for _ in range(count):
        refs.append(new_task(tenant, run.ref).ref)
        if isinstance(clock, FakeClock):
            clock.advance(1)
    return refs


def test_register_bumps_the_incarnation_and_renewal_needs_a_live_membership(
    ledger: Ledger,
) -> None:
    registry = ReplicaRegistry(ledger)
    first = registry.register("replica-a", LEASE_MS)
    second = registry.register("replica-a", LEASE_MS)
    assert second.incarnation == first.incarnation + 1
    assert not registry.renew(first, LEASE_MS), "an older incarnation cannot renew"
    assert registry.renew(second, LEASE_MS)
    assert registry.live_replicas() == [second]
    lapsed = registry.register("replica-b", 0)
    assert not registry.renew(lapsed, LEASE_MS), "a lapsed membership cannot come back"
    assert registry.live_replicas() == [second]


def test_claims_split_open_tasks_oldest_due_first_and_never_twice(ledger: Ledger) -> None:
    refs = _open_tasks(ledger, 30)
    tenant = ledger.for_principal("acme")
    registry = ReplicaRegistry(ledger)
    a = registry.register("replica-a", LEASE_MS)
    b = registry.register("replica-b", LEASE_MS)
    leases = TenantLeases(tenant)
    first = leases.claim_tasks(a, 20)
    second = leases.claim_tasks(b, 20)
    assert [t.ref for t in first] == refs[:20], "oldest due first"
    assert [t.ref for t in second] == refs[20:]
    assert leases.claim_tasks(a, 20) == [] and leases.claim_tasks(b, 20) == []
    assert leases.holder("task", refs[0]) == a and leases.holder("task", refs[-1]) == b


@pytest.mark.postgres
def test_a_claim_leaves_alone_a_task_its_holder_took_after_the_claim_began(
    pg_ledger: Ledger,
) -> None:
    """PostgreSQL re-checks a row another transaction changed after a claim began against the
    claim's own snapshot, where a replica that restarted (or registered) since is missing or
    an older incarnation. Here B's claim of two tasks is held (a trigger waits on a lock the
    test holds) after its first row, while A restarts and claims the second; then B goes on.
    B must skip the row A now holds: read as "holder gone", it took it too."""
    refs = _open_tasks(pg_ledger, 2)
    leases = TenantLeases(pg_ledger.for_principal("acme"))
    registry = ReplicaRegistry(pg_ledger)
    b = registry.register("replica-b", LEASE_MS)
    registry.register("replica-a", LEASE_MS)  # A's earlier incarnation, in B's snapshot
    with pg_ledger.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION hold_replica_b() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN IF NEW.lease_owner = 'replica-b' THEN"
                f" PERFORM pg_advisory_xact_lock({GATE_KEY}); END IF; RETURN NEW; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER hold_replica_b BEFORE UPDATE ON bridge_inner_tasks"
                " FOR EACH ROW EXECUTE FUNCTION hold_replica_b()"
            )
        )
    # The gate is a transaction's lock: however the block ends, closing the connection
    # releases it before the pool waits for B.
    with ThreadPoolExecutor(max_workers=1) as pool, pg_ledger.engine.connect() as gate:
        gate.execute(text(f"SELECT pg_advisory_xact_lock({GATE_KEY})"))
        b_claim = pool.submit(leases.claim_tasks, b, 2)
        wait_for_lock_waiters(pg_ledger.engine, 1)  # B has its snapshot and holds refs[0]
        a = registry.register("replica-a", LEASE_MS)  # a restart: incarnation 2
        a_took = leases.claim_tasks(a, 2)  # refs[0] is B's (locked, skipped)
        gate.commit()  # B goes on
        b_took = b_claim.result(timeout=30)
    assert [t.ref for t in a_took] == [refs[1]]
    assert [t.ref for t in b_took] == [refs[0]], "B took the task A had just claimed"
    assert leases.holder("task", refs[1]) == a and leases.holder("task", refs[0]) == b


def test_a_lapsed_or_restarted_replica_releases_its_tasks_to_the_others(ledger: Ledger) -> None:
    refs = _open_tasks(ledger, 5)
    leases = TenantLeases(ledger.for_principal("acme"))
    registry = ReplicaRegistry(ledger)
    doomed = registry.register("replica-a", LEASE_MS)
    survivor = registry.register("replica-b", LEASE_MS)
    assert len(leases.claim_tasks(doomed, 10)) == 5
    assert leases.claim_tasks(survivor, 10) == []
    # replica-a restarts under a new incarnation: its old rows are claimable at once
    restarted = registry.register("replica-a", LEASE_MS)
    assert [t.ref for t in leases.claim_tasks(restarted, 2)] == refs[:2]
    # ... and when a membership lapses, its rows go to whoever claims next
    registry.renew(restarted, 0)
    assert [t.ref for t in leases.claim_tasks(survivor, 10)] == refs
    assert leases.claim_tasks(restarted, 10) == [], "a lapsed replica claims nothing"


def test_a_stale_holder_cannot_write_an_observation(ledger: Ledger) -> None:
    (ref,) = _open_tasks(ledger, 1)
    tenant = ledger.for_principal("acme")
    leases = TenantLeases(tenant)
    registry = ReplicaRegistry(ledger)
    old = registry.register("replica-a", 0)  # lapses at once
    assert leases.claim_tasks(old, 1) == [], "a lapsed replica claims nothing"
    old = registry.register("replica-a", LEASE_MS)
    assert [t.ref for t in leases.claim_tasks(old, 1)] == [ref]
    registry.renew(old, 0)  # paused past its lease
    new = registry.register("replica-b", LEASE_MS)
    assert [t.ref for t in leases.claim_tasks(new, 1)] == [ref]

    completed = TaskObservation(status=TaskStatus.COMPLETED, result={"content": []})
    working = TaskObservation(status=TaskStatus.WORKING, status_message="late news")
    before = tenant.reads.events(tenant.reads.get_task(ref).run_ref)
    with pytest.raises(LeaseLost):
        tenant.tasks.observe_task(ref, working, lease=old)
    with pytest.raises(LeaseLost):
        tenant.tasks.mark_task_lost(ref, LostReason.NOT_FOUND, "stale", lease=old)
    with pytest.raises(LeaseLost):
        tenant.tasks.record_server_unreachable(ref, 0, "stale", lease=old)
    with pytest.raises(LeaseLost):
        tenant.runs.record_anomaly(
            tenant.reads.get_task(ref).run_ref, "x", "stale", task_ref=ref, lease=old
        )
    assert tenant.reads.events(tenant.reads.get_task(ref).run_ref) == before, "nothing written"
    tenant.tasks.observe_task(ref, completed, lease=new)
    assert tenant.reads.get_task(ref).status is TaskStatus.COMPLETED


def test_runs_are_leased_and_fenced_the_same_way(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    server = "http://127.0.0.1:9/uhp"
    run = tenant.runs.open_run(server, response_id="resp_1", status=OuterStatus.IN_PROGRESS)
    tenant.runs.open_run("local:x", response_id="resp_2", status=OuterStatus.IN_PROGRESS)
    leases = TenantLeases(tenant)
    registry = ReplicaRegistry(ledger)
    a = registry.register("replica-a", LEASE_MS)
    b = registry.register("replica-b", LEASE_MS)
    assert [r.ref for r in leases.claim_runs(a, [server], 10)] == [run.ref], "remote runs only"
    assert leases.claim_runs(b, [server], 10) == []
    assert tenant.runs.record_outer_sequence(run.ref, 5, lease=a)
    with pytest.raises(LeaseLost):
        tenant.runs.record_outer_sequence(run.ref, 9, lease=b)
    with pytest.raises(LeaseLost):
        tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED, lease=b)
    with pytest.raises(LeaseLost):
        tenant.runs.record_stream_lost(run.ref, "cut", 9, lease=b)
    assert tenant.reads.get_run(run.ref).last_sequence == 5
    registry.retire(a)  # clean shutdown hands the run over at once
    assert [r.ref for r in leases.claim_runs(b, [server], 10)] == [run.ref]


def test_adopt_takes_a_new_task_only_if_nobody_live_holds_it(ledger: Ledger) -> None:
    (ref,) = _open_tasks(ledger, 1)
    leases = TenantLeases(ledger.for_principal("acme"))
    registry = ReplicaRegistry(ledger)
    a = registry.register("replica-a", LEASE_MS)
    b = registry.register("replica-b", LEASE_MS)
    assert leases.adopt_task(a, ref)
    assert not leases.adopt_task(b, ref)
    assert leases.holder("task", ref) == a


def test_claims_never_cross_tenants(ledger: Ledger) -> None:
    _open_tasks(ledger, 3, principal="globex")
    registry = ReplicaRegistry(ledger)
    member = registry.register("replica-a", LEASE_MS)
    assert TenantLeases(ledger.for_principal("acme")).claim_tasks(member, 10) == []
    assert len(TenantLeases(ledger.for_principal("globex")).claim_tasks(member, 10)) == 3


def test_leases_refuse_what_they_cannot_honour(ledger: Ledger) -> None:
    with pytest.raises(ValueError):
        ReplicaRegistry(ledger).register("", LEASE_MS)  # a replica needs a stable id
    with pytest.raises(CompileError):  # no database clock to lease on
        str(select(db_now_ms()).compile(dialect=mysql.dialect()))


def test_an_even_share_counts_live_replicas_open_tasks_and_what_each_holds(
    ledger: Ledger,
) -> None:
    _open_tasks(ledger, 10)
    _open_tasks(ledger, 7, principal="other")  # another tenant's tasks are not counted
    registry = ReplicaRegistry(ledger)
    a = registry.register("replica-a", LEASE_MS)
    b = registry.register("replica-b", LEASE_MS)
    registry.register("replica-lapsed", 0)  # not live: not counted
    leases = TenantLeases(ledger.for_principal("acme"))
    assert leases.even_share_room(a) == 5 and leases.even_share_room(b) == 5
    leases.claim_tasks(a, 3)
    assert leases.even_share_room(a) == 2 and leases.even_share_room(b) == 5
    leases.claim_tasks(b, 7)
    assert leases.even_share_room(b) == 0, "holding more than its share leaves no room"
    registry.renew(b, 0)  # b lapses: a's share is now everything
    assert leases.even_share_room(a) == 7
