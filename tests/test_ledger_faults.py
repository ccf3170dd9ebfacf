"""Ledger faults with real files: a write lock held by another process, a read-only file, the
file deleted under a running bridge and under the running example harness, a ledger that
cannot be opened at start.

Each case asserts a typed error (``LedgerUnavailable``), a 503 or a one-line error; that
nothing hangs (every wait has a deadline); and that what was stored before is still there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import func, select as sql_select

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import CALL_PATH_CHECK_EVERY, WriteLockBusy
from bridge._ledger.reads.views import RunView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import DISPATCHES, Ledger, TenantLedger
from bridge._lifecycle import TaskStatus
from tests.support.postgres import ThrowawayPostgres, fresh_database
from tests.support.processes import REPO_ROOT, ServerProcess, refused_port
from tests.support.sqlite_lock import HeldLock, held_lock

DEADLINE_S = 15.0
TOKEN = "ledger-faults-token"


class Background:
    """``fn`` called in a thread; :attr:`outcome` holds its return value or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.outcome: list[Any] = []
        self._fn = fn
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome.append(self._fn())
        except BaseException as exc:  # reported to the test
            self.outcome.append(exc)

    def still_waiting_after(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive() and self.outcome == []


@dataclass
class Stored:
    """A ledger on a real file holding one run with one event, written before the fault."""

    ledger: Ledger
    path: Path
    tenant: TenantLedger
    run: RunView
    events_before: list[str]


def _store_a_run(ledger: Ledger, path: Path) -> Stored:
    tenant = ledger.for_principal("acme")
    run = tenant.runs.open_run("http://uhp.example", response_id="resp_before")
    tenant.runs.record_anomaly(run.ref, "stored_before", "written before the fault")
    return Stored(ledger, path, tenant, run, _event_types(tenant, run.ref))


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[Stored]:
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    try:
        yield _store_a_run(ledger, path)
    finally:
        ledger.close()


def _event_types(tenant: TenantLedger, run_ref: str) -> list[str]:
    return [e.type for e in tenant.reads.events(run_ref)]


def _dispatch_count(ledger: Ledger, run_ref: str) -> int:
    with ledger.engine.connect() as conn:
        conn = conn.execution_options(bridge_read=True)  # a reader: never waits for the lock
        query = sql_select(func.count()).where(DISPATCHES.c.run_ref == run_ref)
        return int(conn.execute(query).scalar_one())


# -- a write lock held by another process ------------------------------------------------------
@pytest.mark.anyio
async def test_held_lock_delays_the_write_not_the_event_loop(
    stored: Stored,
) -> None:
    path, tenant, run = stored.path, stored.tenant, stored.run
    before = stored.events_before
    runner = LedgerRunner(inline=True)
    written = anyio.Event()

    async def write() -> None:
        await runner(tenant.runs.record_anomaly, run.ref, "after_lock", "waited for the lock")
        written.set()

    holder = HeldLock(path)
    try:
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                # The loop keeps running while the write waits: ticks of 10 ms stay short.
                worst_gap = 0.0
                for _ in range(30):
                    tick = time.monotonic()
                    await anyio.sleep(0.01)
                    worst_gap = max(worst_gap, time.monotonic() - tick)
                assert not written.is_set(), "the write cannot commit while the lock is held"
                assert worst_gap < 0.25, f"the event loop stalled {worst_gap:.3f} s"
                # Reads never queue for the write lock (WAL).
                assert await runner(tenant.reads.get_run, run.ref) == tenant.reads.get_run(run.ref)
                holder.release()
                await written.wait()
    finally:
        holder.release()
    assert _event_types(tenant, run.ref) == [*before, "anomaly"]


@pytest.mark.anyio
async def test_call_path_intent_waits_for_the_lock_and_is_committed_once(
    stored: Stored,
) -> None:
    """What the requester does inline: the intent fails busy at once (nothing written, so
    nothing may be sent), then commits once the lock is free; exactly one intent exists."""
    ledger, path, tenant, run = stored.ledger, stored.path, stored.tenant, stored.run
    runner = LedgerRunner(inline=True)
    fields: dict[str, Any] = {
        "server_endpoint": "http://mcp.example/mcp",
        "tool_name": "generate_report",
        "arguments": {"quarter": "Q3"},
        "operation_id": "op-under-lock",
        "sent": True,
    }
    with held_lock(path) as holder:
        started = time.monotonic()
        with pytest.raises(WriteLockBusy):
            tenant.calls.begin_dispatch(run.ref, **fields)
        assert time.monotonic() - started < 0.5, "the busy write blocked the loop"
        assert _dispatch_count(ledger, run.ref) == 0
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:
                result: list[Any] = []

                async def commit_intent() -> None:
                    result.append(
                        await runner.when_lock_free(tenant.calls.begin_dispatch, run.ref, **fields)
                    )

                tg.start_soon(commit_intent)
                await anyio.sleep(0.1)
                assert result == [] and _dispatch_count(ledger, run.ref) == 0
                holder.release()
    (intent,) = result
    assert intent.operation_id == "op-under-lock"
    assert _dispatch_count(ledger, run.ref) == 1
    settled = tenant.calls.record_immediate_result(intent.ref, {"content": []}, intent=intent)
    assert settled.state.value == "result"


@pytest.mark.anyio
async def test_the_call_path_route_waits_for_the_lock_and_commits_each_write_once(
    stored: Stored,
) -> None:
    """The requester's one route, ``LedgerRunner.commit`` inline: the staged intent, then the
    staged handle, each meet the held lock (nothing written), wait off the loop's back and
    commit once it is free; running the staged write again writes it once."""
    ledger, path, tenant, run = stored.ledger, stored.path, stored.tenant, stored.run
    runner, group = LedgerRunner(inline=True), tenant.group_commit
    staged_intent = tenant.calls.stage_dispatch(
        run.ref,
        server_endpoint="http://mcp.example/mcp",
        tool_name="generate_report",
        arguments={"quarter": "Q4"},
        sent=True,
    )
    with held_lock(path) as holder, anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            intents: list[Any] = []

            async def commit_intent() -> None:
                intents.append(await runner.commit(group, staged_intent))

            tg.start_soon(commit_intent)
            await anyio.sleep(0.1)
            assert intents == [] and _dispatch_count(ledger, run.ref) == 0
            holder.release()
    (intent,) = intents
    assert _dispatch_count(ledger, run.ref) == 1
    staged_task = tenant.calls.stage_task_created(
        intent.ref, task_id="t-1", status=TaskStatus.WORKING
    )
    with held_lock(path) as holder, anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tasks: list[Any] = []

            async def commit_task() -> None:
                tasks.append(await runner.commit(group, staged_task))

            tg.start_soon(commit_task)
            await anyio.sleep(0.1)
            assert tasks == [] and "task.created" not in _event_types(tenant, run.ref)
            holder.release()
    (task,) = tasks
    assert tenant.reads.get_task(task.ref).status is TaskStatus.WORKING
    assert _event_types(tenant, run.ref).count("task.created") == 1


@pytest.mark.anyio
async def test_lock_held_past_the_deadline_is_a_typed_error(stored: Stored) -> None:
    tenant, run = stored.tenant, stored.run
    runner = LedgerRunner(inline=True, lock_wait_s=0.3)
    with (
        held_lock(stored.path),
        anyio.fail_after(DEADLINE_S),
        pytest.raises(LedgerUnavailable) as raised,
    ):
        await runner(tenant.runs.record_anomaly, run.ref, "never", "the lock is never free")
    assert type(raised.value) is LedgerUnavailable and "write lock" in raised.value.reason
    assert _event_types(tenant, run.ref) == stored.events_before


def test_a_worker_thread_waits_for_the_lock_then_writes(
    stored: Stored,
) -> None:
    """Off the event loop a write waits (beyond SQLite's few-ms busy timeout) and commits."""
    path, tenant, run = stored.path, stored.tenant, stored.run
    with held_lock(path) as holder:
        write = Background(
            lambda: tenant.runs.record_anomaly(run.ref, "thread", "waited in a thread")
        )
        assert write.still_waiting_after(0.3), "the write must wait for the lock"
        holder.release()
        write.thread.join(DEADLINE_S)
    (event,) = write.outcome
    assert event.type == "anomaly" and event.kind == "thread"
    assert _event_types(tenant, run.ref) == [*stored.events_before, "anomaly"]


@pytest.mark.anyio
async def test_opening_the_ledger_on_an_event_loop_waits_for_the_lock(tmp_path: Path) -> None:
    """Start-up (``Bridge.open`` runs ``Ledger.open`` on the loop, before serving) waits for
    a lock held elsewhere, e.g. another process migrating, instead of failing at once."""
    path = tmp_path / "ledger.db"
    first = _store_a_run(Ledger.open(path), path)
    first.ledger.close()
    with held_lock(path) as holder:
        release = threading.Timer(0.3, holder.release)
        release.start()
        started = time.monotonic()
        reopened = Ledger.open(path)
        waited = time.monotonic() - started
        release.join(DEADLINE_S)
    try:
        assert waited >= 0.2, "the migration's write cannot have run under the held lock"
        tenant = reopened.for_principal("acme")
        assert _event_types(tenant, first.run.ref) == first.events_before
    finally:
        reopened.close()


# -- a read-only file --------------------------------------------------------------------------
@contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """The file made read-only for everyone, root included (``chattr +i``)."""
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], check=False).returncode:
        pytest.skip("chattr +i is not available here (needs CAP_LINUX_IMMUTABLE)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_read_only_file_refuses_writes_with_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    first = _store_a_run(ledger, path)
    run, before = first.run, first.events_before
    ledger.close()
    with _immutable(path):
        reopened = Ledger.open(path, upgrade=False)
        try:
            tenant = reopened.for_principal("acme")
            assert _event_types(tenant, run.ref) == before  # reads still work
            with pytest.raises(LedgerUnavailable, match="read-only"):
                tenant.runs.record_anomaly(run.ref, "refused", "read-only file")
            with pytest.raises(LedgerUnavailable, match="read-only"):
                tenant.calls.begin_dispatch(
                    run.ref, server_endpoint="e", tool_name="t", arguments={}
                )
            assert _event_types(tenant, run.ref) == before
        finally:
            reopened.close()


# -- the file deleted under a running bridge ---------------------------------------------------
def test_file_deleted_under_a_running_ledger_refuses_all_work(
    stored: Stored, caplog: pytest.LogCaptureFixture
) -> None:
    path, tenant, run = stored.path, stored.tenant, stored.run
    intent = tenant.calls.begin_dispatch(run.ref, server_endpoint="e", tool_name="t", arguments={})
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="bridge._ledger"):
        # The call path checks the file now and then: refused within a bounded number of calls.
        refused_after = None
        for calls in range(CALL_PATH_CHECK_EVERY + 1):
            try:
                tenant.calls.begin_dispatch(
                    run.ref, server_endpoint="e", tool_name="t", arguments={}
                )
            except LedgerUnavailable as exc:
                refused_after = calls
                assert "deleted" in exc.reason
                break
        assert refused_after is not None, "the call path never noticed the deleted file"
        # From then on everything is refused: the call path, the other writes, the reads.
        with pytest.raises(LedgerUnavailable):
            tenant.calls.mark_dispatch_sent(intent.ref)
        with pytest.raises(LedgerUnavailable):
            tenant.runs.record_anomaly(run.ref, "lost", "after deletion")
        with pytest.raises(LedgerUnavailable):
            tenant.reads.get_run(run.ref)
    assert [r.message for r in caplog.records].count(
        f"the ledger file {path} was deleted under the running process: "
        "the ledger refuses all further work"
    ) == 1
    assert not path.exists(), "no empty ledger may be created in its place"


def test_file_replaced_under_a_running_ledger_is_noticed_on_the_next_write(
    stored: Stored, tmp_path: Path
) -> None:
    path, tenant, run = stored.path, stored.tenant, stored.run
    other = Ledger.open(tmp_path / "other.db")
    other.close()
    os.replace(tmp_path / "other.db", path)
    with pytest.raises(LedgerUnavailable, match="replaced"):
        tenant.runs.record_anomaly(run.ref, "lost", "after replacement")


# -- a ledger that cannot be opened at start ---------------------------------------------------
def _unopenable(kind: str, tmp_path: Path, port: int) -> str:
    if kind == "missing directory":
        return str(tmp_path / "no" / "such" / "dir" / "ledger.db")
    if kind == "not a database":
        path = tmp_path / "notes.db"
        path.write_text("these are notes, not a database\n" * 200)
        return str(path)
    return f"postgresql://bridge:s3cret-pw@127.0.0.1:{port}/ledger"


UNOPENABLE = ["missing directory", "not a database", "postgresql refusing"]


def _assert_one_line_error(result: subprocess.CompletedProcess[str], prefix: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(prefix), result.stderr
    assert "Traceback" not in result.stderr and "s3cret-pw" not in result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("kind", UNOPENABLE)
@pytest.mark.parametrize("command", [["db", "upgrade"], ["--principal", "acme", "runs"]])
def test_cli_reports_an_unopenable_ledger_in_one_line(
    kind: str, command: list[str], tmp_path: Path
) -> None:
    with refused_port() as port:
        db = _unopenable(kind, tmp_path, port)
        result = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "--db", db, *command],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S * 2,
            env={**os.environ, "COLUMNS": "400"},
        )
    _assert_one_line_error(result, "error: ")


def _harness_config(path: Path) -> Path:
    config = {
        "harnesses": [{"id": "chrn_plain", "base": "scripted", "model": "scripted-1"}],
        "tokens": [TOKEN],
        "think_seconds": 0.01,
        "pace_seconds": 0.01,
        "keepalive_seconds": 0.1,
    }
    path.write_text(json.dumps(config))
    return path


@pytest.mark.e2e
@pytest.mark.parametrize("kind", UNOPENABLE)
def test_harness_reports_an_unopenable_ledger_in_one_line(kind: str, tmp_path: Path) -> None:
    config = _harness_config(tmp_path / "harness.json")
    with refused_port() as port:
        db = _unopenable(kind, tmp_path, port)
        result = subprocess.run(
            [
                *(sys.executable, "-m", "harness_examples.report_harness"),
                *("--port", "0", "--port-file", str(tmp_path / "port")),
                *("--config", str(config), "--db", db),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S * 2,
        )
    _assert_one_line_error(result, "report_harness: ledger unavailable: ")


# -- the example harness over HTTP -------------------------------------------------------------
@dataclass
class Served:
    """The example harness on a real file, with one completed response stored."""

    server: ServerProcess
    db: Path
    client: httpx.Client
    stored: dict[str, Any]


@contextmanager
def _served_harness(tmp_path: Path, db: str) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    config = _harness_config(tmp_path / "harness.json")
    server = ServerProcess(
        "harness_examples.report_harness", args=["--config", str(config), "--db", db]
    )
    server.start(timeout=30)
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{server.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=DEADLINE_S,
        ) as client:
            yield server, client
    finally:
        server.stop()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Served]:
    db = tmp_path / "harness.db"
    with _served_harness(tmp_path, str(db)) as (server, client):
        reply = client.post("/v1/responses", json={"input": "reply banana"})
        assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text
        yield Served(server, db, client, dict(reply.json()))


@pytest.mark.e2e
def test_harness_answers_while_another_process_holds_the_lock(harness: Served) -> None:
    client, stored = harness.client, harness.stored
    with held_lock(harness.db) as holder:
        create = Background(lambda: client.post("/v1/responses", json={"input": "reply kiwi"}))
        for _ in range(5):
            started = time.monotonic()
            assert client.get("/v1/uhp").status_code == 200
            assert time.monotonic() - started < 1.0, "GET /v1/uhp waited for the lock"
        started = time.monotonic()
        read = client.get(f"/v1/responses/{stored['id']}")  # a read: no write lock needed
        assert read.status_code == 200 and read.json() == stored, read.text
        assert time.monotonic() - started < 2.0, "a read waited for the write lock"
        assert create.still_waiting_after(0.3), "the create must wait for the lock"
        holder.release()
        create.thread.join(DEADLINE_S)
    (created,) = create.outcome
    assert isinstance(created, httpx.Response) and created.status_code == 200, created
    assert created.json()["status"] == "completed"
    again = client.get(f"/v1/responses/{stored['id']}")  # stored before: still there
    assert again.status_code == 200 and again.json()["status"] == "completed"


@pytest.mark.e2e
def test_harness_answers_503_once_its_ledger_file_is_deleted(harness: Served) -> None:
    client, db = harness.client, harness.db
    db.unlink()
    assert client.get("/v1/uhp").status_code == 200  # reads nothing: still answers
    for reply in (
        client.get(f"/v1/responses/{harness.stored['id']}"),
        client.post("/v1/responses", json={"input": "reply kiwi"}),
    ):
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["code"] == "ledger_unavailable"
        assert reply.json()["error"]["type"] == "server_error"
    assert not db.exists(), "no empty database may be created in its place"
    assert "was deleted under the running process" in harness.server.log_tail(200)


@pytest.mark.e2e
@pytest.mark.postgres
def test_harness_answers_503_while_its_postgresql_is_down(tmp_path: Path) -> None:
    """PostgreSQL stops abruptly under the running harness: requests that need the database
    answer 503 in the envelope (not a 500), and after the restart everything stored before
    reads back unchanged."""
    database = ThrowawayPostgres(durable_commits=True)  # a kill must not lose acked commits
    database.start()
    try:
        with (
            fresh_database(database.url()) as url,
            _served_harness(tmp_path, url) as (server, client),
        ):
            stored = client.post("/v1/responses", json={"input": "reply banana"})
            assert stored.status_code == 200, stored.text
            database.kill_server()
            assert client.get("/v1/uhp").status_code == 200  # reads nothing
            for reply in (
                client.get(f"/v1/responses/{stored.json()['id']}"),
                client.post("/v1/responses", json={"input": "reply kiwi"}),
            ):
                assert reply.status_code == 503, reply.text
                assert reply.json()["error"]["code"] == "ledger_unavailable"
            assert "database unavailable" in server.log_tail(200)
            database.start_server()
            again = client.get(f"/v1/responses/{stored.json()['id']}")
            assert again.status_code == 200 and again.json() == stored.json()
    finally:
        database.stop()
