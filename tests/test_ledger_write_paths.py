"""Every route of the call path's writes gives the same ledger: property-based.

The write-ahead commits of a bridged call (``stage_dispatch``, ``stage_immediate_result``,
``stage_task_created``; ``mark_dispatch_sent``, ``record_call_error``) are defined once, staged,
and reach the database by one of these routes:

* immediate: the public synchronous names (``begin_dispatch``, ``record_immediate_result``,
  ``record_task_created``) commit the staged write alone, on the driver's own connection;
* inline: ``LedgerRunner(inline=True).commit`` (SQLite on the event loop) commits it alone too;
* grouped: ``LedgerRunner(inline=False).commit`` hands it to the ledger's group commit, in a
  worker thread (or, on PostgreSQL, sent from the event loop);
* the reference: the same statements through SQLAlchemy Core (``tests/support/core_session.py``).

For any generated sequence of operations, interleaved with writes that only have a Core path
(``mark_dispatch_unknown``, ``record_anomaly``), outer observations (``observe_outer``,
precompiled too) and task observations (``observe_task``: precompiled, or through Core when it
records input requests), every route must, against the reference:

* return the same views and raise the same errors;
* leave identical rows in every table, and identical events (same payload text);
* store every event exactly as its pydantic model serialises it (what ``_append`` writes), so a
  call-path event, built as a dict without the model, cannot drift from the model.

All ledgers share one database; each example writes under fresh principals (one per route) and
the comparison maps each side's random references to the order they were created in.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from hypothesis import given, strategies as st
from sqlalchemy import select

from bridge import events as ev
from bridge._errors import BridgeError
from bridge._ledger.commit.group_commit import StagedCommit
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import DISPATCHES, EVENTS, INPUTS, RUNS, TASKS, Ledger, TenantLedger
from bridge._lifecycle import OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT
from tests.support.core_session import CoreSession
from tests.support.postgres import fresh_database
from tests.support.properties import ledger_property_settings


@dataclass(frozen=True)
class Begin:
    run: int
    operation: int | None  # a caller-chosen operation id (reused ids exercise idempotency)
    arguments: int
    sent: bool
    dispatcher: bool


@dataclass(frozen=True)
class MarkSent:
    dispatch: int


@dataclass(frozen=True)
class Result:
    dispatch: int
    with_intent: bool
    is_error: bool
    size: int  # past the ledger's 4 KiB bound the stored result is a truncation marker


@dataclass(frozen=True)
class CallError:
    dispatch: int


@dataclass(frozen=True)
class TaskCreated:
    dispatch: int
    status: TaskStatus
    ttl_ms: int | None
    leased: bool
    handle: int  # a reused handle is refused (DuplicateTaskHandle, an anomaly recorded)


@dataclass(frozen=True)
class Unknown:
    dispatch: int


@dataclass(frozen=True)
class Anomaly:
    run: int


@dataclass(frozen=True)
class Outer:
    run: int
    status: OuterStatus  # a regression is an anomaly, an end may carry an error
    sequence: int | None
    with_error: bool


@dataclass(frozen=True)
class Observe:
    task: int
    status: TaskStatus  # a regression is an anomaly; an end stores its outcome (or flags it)
    quotes_id: bool  # the server's message quotes the raw task id (stored scrubbed)
    with_outcome: bool
    inputs: int  # input requests on an input_required observation (reused keys included)
    interval_ms: int | None


@dataclass(frozen=True)
class Tick:
    ms: int


Op = (
    Begin | MarkSent | Result | CallError | TaskCreated | Unknown | Anomaly | Outer | Observe | Tick
)

# A script is a series of calls: each begins a dispatch, then takes a few steps on it or on the
# one before (negative indexes count from the newest), interleaved with Core-only writes.
recent = st.integers(-2, -1)
begins = st.builds(
    Begin,
    st.integers(0, 1),
    st.one_of(st.none(), st.integers(0, 2)),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
)
steps = st.one_of(
    st.builds(MarkSent, recent),
    st.builds(Result, recent, st.booleans(), st.booleans(), st.sampled_from([1, 10, 5000])),
    st.builds(CallError, recent),
    st.builds(
        TaskCreated,
        recent,
        st.sampled_from([TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED, TaskStatus.COMPLETED]),
        st.sampled_from([None, 1, 60_000]),
        st.booleans(),
        st.integers(0, 3),
    ),
    st.builds(Unknown, recent),
    st.builds(Anomaly, st.integers(0, 1)),
    st.builds(
        Outer,
        st.integers(0, 1),
        st.sampled_from(list(OuterStatus)),
        st.one_of(st.none(), st.integers(0, 9)),
        st.booleans(),
    ),
    st.builds(
        Observe,
        st.integers(0, 3),
        st.sampled_from(list(TaskStatus)),
        st.booleans(),
        st.booleans(),
        st.integers(0, 2),
        st.sampled_from([None, 500, 2_000]),
    ),
    st.builds(Tick, st.integers(0, 5_000)),
)


def scripts(max_calls: int) -> st.SearchStrategy[list[Op]]:
    calls = st.lists(st.tuples(begins, st.lists(steps, max_size=3)), max_size=max_calls)
    return calls.map(lambda cs: [op for begin, rest in cs for op in (begin, *rest)])


MEMBER = Membership("replica-a", 3)
T = TypeVar("T")

#: A route: None for the immediate (synchronous) names, else the runner whose ``commit`` takes
#: the staged write (inline: committed alone; in worker threads: through the group commit).
Route = LedgerRunner | None


class Side:
    """One ledger's run of a script: its tenant, the references it created, what it returned."""

    def __init__(self, tenant: TenantLedger, route: Route) -> None:
        self.tenant = tenant
        self.route = route
        self.refs: list[str] = []  # every reference, in creation order
        self.runs: list[str] = []
        self.dispatches: list[Any] = []  # views, as begin_dispatch returned them
        self.tasks: list[Any] = []  # views, as record_task_created returned them
        self.outcomes: list[Any] = []

    def created(self, ref: str) -> None:
        if ref not in self.refs:
            self.refs.append(ref)

    async def write(
        self, immediate: Callable[[], T], staged: Callable[[], StagedCommit[Any, Any, T]]
    ) -> T:
        """A call-path write by this side's route."""
        if self.route is None:
            return immediate()
        return await self.route.commit(self.tenant.group_commit, staged())


def _result(op: Result) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": "x" * op.size}],
        "structuredContent": {"b": 1, "a": [op.size, None, True]},
        "isError": op.is_error,
    }


async def _apply(side: Side, op: Op, clock: FakeClock) -> Any:
    tenant = side.tenant
    if isinstance(op, Tick):
        clock.advance(op.ms)
        return None
    if isinstance(op, Begin | Anomaly | Outer):
        run_ref = side.runs[op.run]
        if isinstance(op, Anomaly):
            return tenant.runs.record_anomaly(run_ref, "test", "interleaved Core append")
        if isinstance(op, Outer):
            error = {"code": "boom", "detail": ["é", 1.5]} if op.with_error else None
            return tenant.runs.observe_outer(run_ref, op.status, sequence=op.sequence, error=error)
        fields: dict[str, Any] = {
            "server_endpoint": ENDPOINT,
            "server_name": "reports" if op.arguments else None,
            "tool_name": "generate_report",
            "arguments": {"quarter": op.arguments, "notes": ["é", 1.5]},
            "operation_id": None if op.operation is None else f"op-{op.operation}",
            "sent": op.sent,
            "trace_id": "a" * 32,
            "span_id": "b" * 16,
            "dispatcher": MEMBER if op.dispatcher else None,
        }
        view = await side.write(
            lambda: tenant.calls.begin_dispatch(run_ref, **fields),
            lambda: tenant.calls.stage_dispatch(run_ref, **fields),
        )
        side.created(view.ref)
        side.dispatches.append(view)
        return view
    if isinstance(op, Observe):
        return _observe(side, op)
    if not side.dispatches:
        return None
    intent = side.dispatches[op.dispatch % len(side.dispatches)]
    if isinstance(op, MarkSent):
        return tenant.calls.mark_dispatch_sent(intent.ref)
    if isinstance(op, Result):
        held = intent if op.with_intent else None
        # Staged, a result needs the intent: without the caller's, the one on record.
        return await side.write(
            lambda: tenant.calls.record_immediate_result(intent.ref, _result(op), intent=held),
            lambda: tenant.calls.stage_immediate_result(
                _result(op), intent=held or tenant.reads.get_dispatch(intent.ref)
            ),
        )
    if isinstance(op, CallError):
        return tenant.calls.record_call_error(intent.ref, {"code": -32602, "message": "bad"})
    if isinstance(op, Unknown):
        return tenant.calls.mark_dispatch_unknown(intent.ref, "connection lost")
    handle: dict[str, Any] = {
        "task_id": f"handle-{op.handle}",
        "status": op.status,
        "status_message": "started",
        "ttl_ms": op.ttl_ms,
        "poll_interval_ms": 500,
        "server_version": "1.2",
        "credential_ref": "cred-a",
        "lease": MEMBER if op.leased else None,
    }
    task = await side.write(
        lambda: tenant.calls.record_task_created(intent.ref, **handle),
        lambda: tenant.calls.stage_task_created(intent.ref, **handle),
    )
    side.created(task.ref)
    side.tasks.append(task)
    return task


def _observe(side: Side, op: Observe) -> Any:
    if not side.tasks:
        return None
    task = side.tasks[op.task % len(side.tasks)]
    requests = None
    if op.status is TaskStatus.INPUT_REQUIRED and op.inputs:
        # key "k0" always asks the same; "k1" asks something else each time it recurs
        requests = {
            f"k{n}": {"method": "elicitation/create", "params": {"message": f"q{n}", "n": n}}
            for n in range(op.inputs)
        }
        if op.inputs > 1:
            requests["k1"]["params"]["tick"] = len(side.outcomes)
    outcome = {"content": [{"type": "text", "text": f"done {task.task_id}"}], "isError": False}
    observed = side.tenant.tasks.observe_task(
        task.ref,
        TaskObservation(
            status=op.status,
            status_message=f"{task.task_id} moved" if op.quotes_id else "moved",
            server_updated_at="2026-12-02T08:00:00Z",
            poll_interval_ms=op.interval_ms,
            ttl_ms=60_000 if op.interval_ms else None,
            result=outcome if op.with_outcome else None,
            error={"code": -1, "message": f"{task.task_id} failed"} if op.with_outcome else None,
            input_requests=requests,
            next_poll_due_ms=None if op.interval_ms is None else 1_000 + op.interval_ms,
        ),
    )
    for event in observed.events:
        if isinstance(event, ev.TaskInputRequired):
            side.created(event.input_ref)
    return observed


async def _play(
    ledger: Ledger, route: Route, principal: str, script: list[Op], clock: FakeClock
) -> Side:
    side = Side(ledger.for_principal(principal), route)
    for number in range(2):
        run = side.tenant.runs.open_run("local:h", response_id=f"resp_{number}", session_id="s")
        side.created(run.ref)
        side.runs.append(run.ref)
    for op in script:
        try:
            outcome = await _apply(side, op, clock)
        except BridgeError as exc:
            outcome = type(exc).__name__
        side.outcomes.append(dataclasses.asdict(outcome) if _is_view(outcome) else outcome)
    return side


def _is_view(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _rows(ledger: Ledger, principal: str) -> dict[str, list[dict[str, Any]]]:
    tables = {
        "runs": RUNS,
        "dispatches": DISPATCHES,
        "tasks": TASKS,
        "events": EVENTS,
        "inputs": INPUTS,
    }
    rows: dict[str, list[dict[str, Any]]] = {}
    with ledger.engine.connect() as conn:
        for name, table in tables.items():
            query = select(table).where(table.c.principal == principal)
            # the event id is a database-wide counter: the two sides interleave on it
            rows[name] = [
                {k: v for k, v in row.items() if k != "id"}
                for row in conn.execute(query).mappings()
            ]
    return rows


def _normalized(value: Any, side: Side, principal: str) -> Any:
    """``value`` with this side's references and principal replaced by stable labels."""
    text = json.dumps(value, sort_keys=True, default=str)
    for number, ref in enumerate(side.refs):
        text = text.replace(ref, f"<ref{number}>")
    return json.loads(text.replace(principal, "<principal>"))


def _check_events_match_their_models(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        stored = json.loads(row["payload_json"])
        event = ev.parse_event(row["payload_json"])
        assert stored == json.loads(event.model_dump_json()), f"{row['type']} drifted"
        assert (row["seq"], row["type"], row["at_ms"]) == (event.seq, event.type, event.at_ms)
        assert row["task_ref"] == getattr(event, "task_ref", None)
        assert row["run_ref"] == event.run_ref


def _check_gapless(rows: list[dict[str, Any]]) -> None:
    for run_ref, events in itertools.groupby(
        sorted(rows, key=lambda r: (r["run_ref"], r["seq"])), key=lambda r: r["run_ref"]
    ):
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), run_ref


_examples = itertools.count()


def _compare(routes: dict[str, tuple[Ledger, Route]], clock: FakeClock, script: list[Op]) -> None:
    """Plays ``script`` by every route (the first: the reference) and compares each to it."""
    number = next(_examples)
    start = clock.now_ms
    sides = {}
    for name, (ledger, route) in routes.items():
        clock.now_ms = start  # every side sees the same times
        principal = f"paths-{number}-{name}"
        side = anyio.run(_play, ledger, route, principal, script, clock)
        rows = _rows(ledger, principal)
        _check_events_match_their_models(rows["events"])
        _check_gapless(rows["events"])
        sides[name] = (
            _normalized(side.outcomes, side, principal),
            {
                table: sorted(
                    (_normalized(r, side, principal) for r in table_rows),
                    key=lambda r: json.dumps(r, sort_keys=True),
                )
                for table, table_rows in rows.items()
            },
        )
    (reference, (core_outcomes, core_rows)), *others = sides.items()
    for name, (outcomes, route_rows) in others:
        assert outcomes == core_outcomes, f"{name} returned other views or errors than {reference}"
        for table in route_rows:
            assert route_rows[table] == core_rows[table], f"{table} differ ({name})"


def _pair(url: str, clock: FakeClock) -> tuple[Ledger, Ledger]:
    """The product's ledger, and one on the same database through the Core reference."""
    fast = Ledger.open(url, clock=clock, max_outcome_bytes=4096)
    reference = CoreSession(fast.engine, fast.dialect.statement_dialect())
    core = Ledger(fast.engine, clock=clock, max_outcome_bytes=4096, driver_session=reference)
    return fast, core


@pytest.fixture
def sqlite_pair(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Ledger, Ledger]]:
    fast, core = _pair(f"sqlite:///{tmp_path / 'ledger.db'}", clock)
    yield fast, core
    core.close()
    fast.close()


@pytest.fixture
def pg_pair(postgres_admin_url: str, clock: FakeClock) -> Iterator[tuple[Ledger, Ledger]]:
    with fresh_database(postgres_admin_url) as url:
        fast, core = _pair(url, clock)
        yield fast, core
        core.close()
        fast.close()


@ledger_property_settings(120)
@given(script=scripts(8))
def test_every_call_path_route_writes_the_same_ledger_on_sqlite(
    sqlite_pair: tuple[Ledger, Ledger], clock: FakeClock, script: list[Op]
) -> None:
    fast, core = sqlite_pair
    routes = {
        "core": (core, None),
        "immediate": (fast, None),
        "inline": (fast, LedgerRunner(inline=True)),
        "grouped": (fast, LedgerRunner(inline=False)),
    }
    _compare(routes, clock, script)


@pytest.mark.postgres
@ledger_property_settings(40)
@given(script=scripts(6))
def test_every_call_path_route_writes_the_same_ledger_on_postgresql(
    pg_pair: tuple[Ledger, Ledger], clock: FakeClock, script: list[Op]
) -> None:
    fast, core = pg_pair
    routes = {
        "core": (core, None),
        "immediate": (fast, None),
        "grouped": (fast, LedgerRunner(inline=False)),
    }
    _compare(routes, clock, script)
