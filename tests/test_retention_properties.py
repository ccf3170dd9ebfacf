"""Property: a prune removes exactly the finished runs within its bounds, and never a run that is
open, waiting on input, holding a lost or watched task, with a call in flight, or with a call of
unknown outcome lacking a final verdict."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from hypothesis import given, strategies as st

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.retention.policy import DAY_MS, RetentionPolicy
from bridge._ledger.retention.prune import Prune
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission, LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run, new_task
from tests.support.properties import ledger_property_settings

OUTER = st.sampled_from([None, *OuterStatus])
TASK = st.sampled_from(["working", "input", "completed", "failed", "lost", "detached"])
CALL = st.sampled_from(["pending", "sent", "result", "unknown", "unknown-checked", "resolved"])


@dataclass(frozen=True)
class RunShape:
    outer: OuterStatus | None
    tasks: tuple[str, ...]
    calls: tuple[str, ...]
    age_days: int

    @property
    def finished(self) -> bool:
        return (
            self.outer is not None
            and self.outer.is_terminal
            and all(t in ("completed", "failed", "detached") for t in self.tasks)
            and all(c in ("result", "resolved") for c in self.calls)
        )


shapes = st.builds(
    RunShape,
    outer=OUTER,
    tasks=st.lists(TASK, max_size=3).map(tuple),
    calls=st.lists(CALL, max_size=2).map(tuple),
    age_days=st.integers(0, 20),
)


def build(tenant: TenantLedger, clock: FakeClock, shape: RunShape) -> str:
    run = new_run(tenant)
    for kind in shape.tasks:
        task = new_task(tenant, run.ref)
        if kind == "input":
            asks = {"k": {"method": "elicitation/create", "params": {"message": "?"}}}
            obs = TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests=asks)
            tenant.tasks.observe_task(task.ref, obs)
        elif kind in ("completed", "failed"):
            tenant.tasks.observe_task(
                task.ref, TaskObservation(TaskStatus(kind), result={"content": []})
            )
        elif kind == "lost":
            tenant.tasks.mark_task_lost(task.ref, LostReason.NOT_FOUND, "gone")
        elif kind == "detached":
            tenant.tasks.detach_task(task.ref, "host")
    for kind in shape.calls:
        op = tenant.calls.begin_dispatch(
            run.ref,
            server_endpoint=ENDPOINT,
            server_name="reports",
            tool_name="t",
            arguments={"n": secrets.token_hex(4)},
        )
        if kind == "pending":
            continue
        tenant.calls.mark_dispatch_sent(op.ref)
        if kind == "result":
            tenant.calls.record_immediate_result(op.ref, {"content": []})
        elif kind.startswith("unknown") or kind == "resolved":
            tenant.calls.mark_dispatch_unknown(op.ref, "dropped")
            if kind != "unknown":
                tenant.calls.record_admission(op.ref, Admission.UNKNOWN, "host")
            if kind == "resolved":
                tenant.calls.record_admission(op.ref, Admission.ADMITTED, "host")
    if shape.outer is not None and shape.outer is not OuterStatus.IN_PROGRESS:
        tenant.runs.observe_outer(run.ref, shape.outer)
    return run.ref


@ledger_property_settings(40)
@given(
    runs=st.lists(shapes, max_size=8),
    keep=st.one_of(st.none(), st.integers(0, 4)),
    batch=st.integers(1, 4),
)
def test_prune_removes_exactly_the_finished_runs_within_bounds(
    sqlite_ledger: Ledger, clock: FakeClock, runs: list[RunShape], keep: int | None, batch: int
) -> None:
    tenant = sqlite_ledger.for_principal("p" + secrets.token_hex(6))
    start = clock.now_ms
    built = []
    for shape in sorted(runs, key=lambda s: -s.age_days):  # the oldest first
        clock.now_ms = start + (20 - shape.age_days) * DAY_MS
        built.append((build(tenant, clock, shape), shape))
    clock.now_ms = start + 20 * DAY_MS + 1
    policy = RetentionPolicy(max_age_days=7, keep_runs=keep, min_age_days=1, batch_runs=batch)
    job = Prune(sqlite_ledger, tenant.principal, policy)
    while job.step():
        pass
    # Expected: finished runs older than 7 days, or beyond the newest `keep` ended runs (status
    # terminal, whatever their tasks), never one younger than a day.
    ended_runs = [(ref, s) for ref, s in built if s.outer is not None and s.outer.is_terminal]
    ended_runs.sort(key=lambda item: item[0], reverse=True)  # newest first: (time, ref) desc
    ended = [ref for ref, _ in sorted(ended_runs, key=lambda item: item[1].age_days)]
    beyond = set(ended[keep:]) if keep is not None else set()
    expected = {
        ref
        for ref, s in built
        if s.finished and s.age_days >= 1 and (s.age_days >= 7 or ref in beyond)
    }
    left = {r.ref for r in tenant.reads.list_runs(limit=1000)}
    assert {ref for ref, _ in built} - left == expected
