"""The report harness's turn batcher (``harness_examples/report_harness/batching.py``) on a real
store (an SQLite file, a throwaway PostgreSQL): the writes of many runs asked for in one turn of
the event loop commit in one transaction, a failing write fails alone, a database that cannot
take writes fails the batch at once, and a write asked for is committed even if its caller is
cancelled."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from bridge.aio import LedgerRunner
from bridge.errors import LedgerUnavailable
from harness_examples.report_harness.batching import TurnBatcher
from harness_examples.report_harness.store import HarnessStore
from harness_examples.report_harness.writes import StoreWrite
from tests.support.sqlite_lock import held_lock

RUNS = 20
LOCK_WAIT_S = 0.3


@pytest.fixture
def store(db_url: str) -> Iterator[HarnessStore]:
    opened = _with_runs(HarnessStore.open(db_url))
    yield opened
    opened.close()


def _with_runs(store: HarnessStore) -> HarnessStore:
    """``store`` with RUNS responses in progress, ``resp_0``..."""
    for n in range(RUNS):
        store.create(
            principal="alice",
            body=_body(f"resp_{n}"),
            input_items=[],
            request={},
            idempotency_key=None,
            fingerprint="",
        )
    return store


def _body(response_id: str) -> dict[str, object]:
    return {
        "id": response_id,
        "status": "in_progress",
        "created_at": 0,
        "output": [],
        "metadata": {"session_id": "hsess_1", "harness_id": "chrn_1"},
    }


def _batcher(store: HarnessStore, lock_wait_s: float = 5.0) -> TurnBatcher:
    runner = LedgerRunner(inline=store.writes_inline, lock_wait_s=lock_wait_s)
    return TurnBatcher(runner, store.commit_all)


async def _append(batcher: TurnBatcher, store: HarnessStore, response_id: str) -> None:
    event = ("response.in_progress", json.dumps({"type": "response.in_progress"}))
    body = json.dumps(_body(response_id))
    await batcher.commit(store.appending(response_id, 0, [event], body, "in_progress"))


def _stored(store: HarnessStore, response_id: str) -> list[str]:
    return [kind for _, kind, _ in store.events_after(response_id, -1)]


@pytest.mark.anyio
async def test_the_writes_of_one_turn_commit_in_one_transaction(store: HarnessStore) -> None:
    batcher = _batcher(store)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            for n in range(RUNS):
                runs.start_soon(_append, batcher, store, f"resp_{n}")
    assert (batcher.stats.writes, batcher.stats.transactions) == (RUNS, 1)
    for n in range(RUNS):
        assert _stored(store, f"resp_{n}") == ["response.in_progress"]
        stored = store.get(f"resp_{n}")
        assert stored is not None and stored.next_seq == 1


@pytest.mark.anyio
async def test_a_lone_write_commits_at_once_in_a_transaction_of_its_own(
    store: HarnessStore,
) -> None:
    batcher = _batcher(store)
    for n in range(3):
        with anyio.fail_after(30):
            await _append(batcher, store, f"resp_{n}")
    assert (batcher.stats.writes, batcher.stats.transactions) == (3, 3)


@pytest.mark.anyio
async def test_a_failing_write_fails_alone_and_the_others_commit(store: HarnessStore) -> None:
    batcher = _batcher(store)
    outcomes: dict[str, BaseException | None] = {}

    async def append(response_id: str) -> None:
        try:
            await _append(batcher, store, response_id)
        except Exception as exc:
            outcomes[response_id] = exc
        else:
            outcomes[response_id] = None

    ids = [f"resp_{n}" for n in range(4)] + ["resp_unknown"]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            for response_id in ids:
                runs.start_soon(append, response_id)
    failed = outcomes.pop("resp_unknown")
    assert isinstance(failed, LookupError) and "resp_unknown" in str(failed)
    assert set(outcomes.values()) == {None}
    for response_id in outcomes:
        assert _stored(store, response_id) == ["response.in_progress"]
    # The shared transaction was rolled back, then every write committed (or failed) alone.
    assert batcher.stats.retried_alone == len(ids)
    assert (batcher.stats.writes, batcher.stats.transactions) == (4, 1 + len(ids))


@pytest.mark.anyio
async def test_a_write_lock_held_past_the_deadline_fails_the_batch_at_once(
    tmp_path: Path,
) -> None:
    store = _with_runs(HarnessStore.open(f"sqlite:///{tmp_path / 'held.db'}"))
    batcher = _batcher(store, lock_wait_s=LOCK_WAIT_S)
    errors: list[BaseException] = []

    async def append(response_id: str) -> None:
        try:
            await _append(batcher, store, response_id)
        except LedgerUnavailable as exc:
            errors.append(exc)

    try:
        with held_lock(tmp_path / "held.db"):
            started = time.monotonic()
            with anyio.fail_after(30):
                async with anyio.create_task_group() as runs:
                    for n in range(RUNS):
                        runs.start_soon(append, f"resp_{n}")
            waited = time.monotonic() - started
        # One wait for the lock, not one per write: retrying them alone would take RUNS waits.
        assert len(errors) == RUNS and waited < RUNS * LOCK_WAIT_S / 2
        assert batcher.stats.retried_alone == 0 and batcher.stats.writes == 0
        assert all(_stored(store, f"resp_{n}") == [] for n in range(RUNS))
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_write_asked_for_is_committed_though_its_caller_is_cancelled(
    store: HarnessStore,
) -> None:
    batcher = _batcher(store)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            runs.start_soon(_append, batcher, store, "resp_0")
            runs.start_soon(_append, batcher, store, "resp_1")
            await anyio.lowlevel.checkpoint()  # both asked; the batch is not committed yet
            assert batcher.stats.transactions == 0
            runs.cancel_scope.cancel()
    assert _stored(store, "resp_0") == _stored(store, "resp_1") == ["response.in_progress"]
    assert (batcher.stats.writes, batcher.stats.transactions) == (2, 1)


@pytest.mark.anyio
async def test_writes_asked_for_while_a_batch_commits_in_a_thread_make_the_next_one(
    store: HarnessStore,
) -> None:
    """In worker threads (as on PostgreSQL), a batch commits while the loop runs on: what is
    asked for meanwhile is the next batch, led by one of its own callers, so the first caller
    is released as soon as its own batch committed."""
    entered = [threading.Event(), threading.Event()]
    go_on = [threading.Event(), threading.Event()]

    batches: list[int] = []  # each batch's size, in order

    def commit_all(writes: Sequence[StoreWrite]) -> None:
        batch = len(batches)
        batches.append(len(writes))
        entered[batch].set()
        assert go_on[batch].wait(30)
        store.commit_all(writes)

    batcher = TurnBatcher(LedgerRunner(inline=False), commit_all)
    first_done = anyio.Event()

    async def first() -> None:
        await _append(batcher, store, "resp_0")
        first_done.set()

    async def wait_for(done: Callable[[], bool]) -> None:
        while not done():
            await anyio.sleep(0.005)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            runs.start_soon(first)
            await wait_for(entered[0].is_set)  # the first batch is committing in a thread
            runs.start_soon(_append, batcher, store, "resp_1")
            runs.start_soon(_append, batcher, store, "resp_2")
            await wait_for(lambda: batcher.queued == 2)  # both asked for theirs meanwhile
            go_on[0].set()
            await wait_for(entered[1].is_set)  # the next batch, led by one of them
            await first_done.wait()  # released without waiting for it
            go_on[1].set()
    assert batches == [1, 2] and (batcher.stats.writes, batcher.stats.transactions) == (3, 2)
    assert all(_stored(store, f"resp_{n}") == ["response.in_progress"] for n in range(3))
