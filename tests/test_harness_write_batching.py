"""The report harness's event-log writes, committed as its runtime commits them: through the
bridge's group commit gathering a turn of the event loop (``bridge/_ledger/commit/group_commit.py``,
``gather_turn``), on a real store (an SQLite file, a throwaway PostgreSQL). The writes of many
runs asked for in one turn commit in one transaction, a failing write fails alone, a database
that cannot take writes fails the batch at once, and a write asked for is committed even if its
caller is cancelled."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.driver_sessions import Cursor
from bridge._ledger.commit.group_commit import GroupCommit, StagedCommit
from bridge._ledger.runner import LedgerRunner
from harness_examples.report_harness.store import HarnessStore
from harness_examples.report_harness.writes import StoreWrite
from tests.support.sqlite_lock import HeldLock, held_lock

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


@dataclass
class TurnWrites:
    """The runtime's commit of its store writes (``Runtime.commit``): a group commit that
    gathers a turn, run inline on SQLite and in worker threads on PostgreSQL."""

    group: GroupCommit[Cursor]
    runner: LedgerRunner

    async def commit(self, write: StoreWrite) -> None:
        await self.runner.commit(self.group, StagedCommit(write, lambda _: None))


def _batcher(
    store: HarnessStore,
    lock_wait_s: float = 5.0,
    *,
    transaction: Callable[[], Any] | None = None,
    inline: bool | None = None,
) -> TurnWrites:
    runner = LedgerRunner(
        inline=store.writes_inline if inline is None else inline, lock_wait_s=lock_wait_s
    )
    return TurnWrites(GroupCommit(transaction or store.transaction, gather_turn=True), runner)


async def _append(batcher: TurnWrites, store: HarnessStore, response_id: str) -> None:
    event = ("response.in_progress", json.dumps({"type": "response.in_progress"}))
    body = json.dumps(_body(response_id))
    await batcher.commit(store.appending(response_id, 0, [event], body, "in_progress"))


async def _noting(
    outcomes: dict[str, BaseException | None],
    batcher: TurnWrites,
    store: HarnessStore,
    response_id: str,
) -> None:
    """:func:`_append`, its outcome noted under ``response_id`` (None: committed)."""
    try:
        await _append(batcher, store, response_id)
    except Exception as exc:
        outcomes[response_id] = exc
    else:
        outcomes[response_id] = None


def _stored(store: HarnessStore, response_id: str) -> list[str]:
    return [kind for _, kind, _ in store.events_after(response_id, -1)]


@pytest.mark.anyio
async def test_the_writes_of_one_turn_commit_in_one_transaction(store: HarnessStore) -> None:
    batcher = _batcher(store)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            for n in range(RUNS):
                runs.start_soon(_append, batcher, store, f"resp_{n}")
    assert (batcher.group.writes, batcher.group.transactions) == (RUNS, 1)
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
    assert (batcher.group.writes, batcher.group.transactions) == (3, 3)


@pytest.mark.anyio
async def test_a_failing_write_fails_alone_and_the_others_commit(store: HarnessStore) -> None:
    batcher = _batcher(store)
    outcomes: dict[str, BaseException | None] = {}

    ids = [f"resp_{n}" for n in range(4)] + ["resp_unknown"]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as runs:
            for response_id in ids:
                runs.start_soon(_noting, outcomes, batcher, store, response_id)
    failed = outcomes.pop("resp_unknown")
    assert isinstance(failed, LookupError) and "resp_unknown" in str(failed)
    assert set(outcomes.values()) == {None}
    for response_id in outcomes:
        assert _stored(store, response_id) == ["response.in_progress"]
    # The shared transaction was rolled back, then every write committed (or failed) alone:
    # 1 + len(ids) transactions, of which the shared one and the failing write's rolled back.
    assert batcher.group.retried_alone == len(ids)
    assert (batcher.group.writes, batcher.group.transactions) == (4, 4)
    assert batcher.group.rolled_back == 2


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
        assert batcher.group.retried_alone == 0 and batcher.group.writes == 0
        assert all(_stored(store, f"resp_{n}") == [] for n in range(RUNS))
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_write_lock_taken_midway_commits_only_the_writes_still_pending(
    tmp_path: Path,
) -> None:
    """The batch fails (one write has no response); while its writes are committed one by one,
    another process takes the write lock (a real one, let go 0.2 s later). The runner waits for
    it, then commits the writes not committed yet: the one committed before the lock is not run
    again (it would collide with its own stored event), and only the failing write fails."""
    path = tmp_path / "midway.db"
    store = _with_runs(HarnessStore.open(f"sqlite:///{path}"))
    holders: list[HeldLock] = []
    releases: list[threading.Timer] = []
    opened = 0

    def transaction() -> Any:
        nonlocal opened
        opened += 1
        if opened == 3:  # after the batch (rolled back) and the first write alone (committed)
            holders.append(HeldLock(path))
            releases.append(threading.Timer(0.2, holders[0].release))
            releases[0].start()
        return store.transaction()

    batcher = _batcher(store, lock_wait_s=30, transaction=transaction)
    outcomes: dict[str, BaseException | None] = {}

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as runs:
                for response_id in ("resp_0", "resp_1", "resp_unknown", "resp_2"):
                    runs.start_soon(_noting, outcomes, batcher, store, response_id)
        assert len(holders) == 1 and opened > 4  # the lock was found held at least once
        failed = outcomes.pop("resp_unknown")
        assert isinstance(failed, LookupError)
        assert outcomes == {"resp_0": None, "resp_1": None, "resp_2": None}
        assert all(_stored(store, r) == ["response.in_progress"] for r in outcomes)
        assert batcher.group.writes == 3
    finally:
        for release in releases:
            release.join(30)
        for holder in holders:
            holder.release()  # already let go: a no-op
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
            assert batcher.group.transactions == 0
            runs.cancel_scope.cancel()
    assert _stored(store, "resp_0") == _stored(store, "resp_1") == ["response.in_progress"]
    assert (batcher.group.writes, batcher.group.transactions) == (2, 1)


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

    @contextmanager
    def transaction() -> Iterator[Cursor]:
        batch = len(batches)
        batches.append(0)
        entered[batch].set()
        assert go_on[batch].wait(30)
        with store.transaction() as cursor:
            yield cursor

    class Counted(TurnWrites):
        async def commit(self, write: StoreWrite) -> None:
            def counted(cursor: Cursor) -> None:  # run in the batch's transaction
                batches[-1] += 1
                write(cursor)

            await super().commit(counted)

    base = _batcher(store, transaction=transaction, inline=False)
    batcher = Counted(base.group, base.runner)
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
            await wait_for(lambda: batcher.group.queued == 2)  # both asked for theirs meanwhile
            go_on[0].set()
            await wait_for(entered[1].is_set)  # the next batch, led by one of them
            await first_done.wait()  # released without waiting for it
            go_on[1].set()
    assert batches == [1, 2] and (batcher.group.writes, batcher.group.transactions) == (3, 2)
    assert all(_stored(store, f"resp_{n}") == ["response.in_progress"] for n in range(3))
