"""Wakes waiters (subscribers, ``wait_for``, a step waiting for its task) when events are
committed to the runs they watch. An idle waiter costs no query at all:

* this process's commits wake them at once (the ledger's commit listener);
* other processes' commits: on PostgreSQL by ``LISTEN/NOTIFY`` (one listening connection per
  bridge); on SQLite by one ``PRAGMA data_version`` probe per tick for all waiters, backed off
  from 0.25 s to 4 s while nothing changes, then one query for the watched runs' sequence
  numbers when something did (:mod:`bridge._ledger.commit.commit_signals`).

A waiter arms an :class:`Interest` *before* it reads and waits on it *after*: a commit between the
read and the wait sets the watch, so it is never missed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from types import TracebackType

import anyio
from anyio.abc import TaskStatus

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import file_of
from bridge._ledger.commit.commit_signals import (
    CommitListener,
    SqliteChangeProbe,
    sqlite_file,
)
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger

log = logging.getLogger("bridge._ledger")

PROBE_MIN_S = 0.25
PROBE_MAX_S = 4.0
#: How long the bridge waits at start for its LISTEN connection before serving without it.
LISTEN_READY_S = 5.0


# A notification can be lost across processes (a NOTIFY that failed after its commit, a
# listener between reconnects): every waiter looks again at least this often anyway. 200
# waiters cost ~7 reads/s at this period, against 800/s for the old 250 ms polling.
BACKSTOP_S = 30.0


class Interest:
    """One waiter's interest in some runs of one principal (a context manager)."""

    def __init__(self, notifier: CommitNotifier, principal: str, run_refs: Iterable[str]) -> None:
        self.notifier = notifier
        self.principal = principal
        self.run_refs = tuple(run_refs)
        self.event = anyio.Event()

    def __enter__(self) -> Interest:
        self.notifier._add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.notifier._remove(self)

    async def wait(self, timeout: float | None) -> None:
        """Until a commit on any watched run since the watch was armed, or ``timeout`` s
        (None: no limit but the backstop)."""
        limit = BACKSTOP_S if timeout is None else min(timeout, BACKSTOP_S)
        with anyio.move_on_after(limit):
            await self.event.wait()
        if self.notifier.unavailable is not None:  # nothing will ever wake it: say why
            raise LedgerUnavailable(self.notifier.unavailable)


class CommitNotifier:
    """One per bridge: every waiter's watches, and the waker that sets them."""

    def __init__(self, ledger: Ledger, db: LedgerRunner) -> None:
        self._ledger = ledger
        self._db = db
        self._watches: dict[str, set[Interest]] = {}  # run_ref -> the watches on it
        self._principal: dict[str, str] = {}  # run_ref -> its principal, while watched
        self._seen: dict[str, int] = {}  # run_ref -> last event seq known here
        self._someone_waits = anyio.Event()
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self.unavailable: str | None = None  # why the ledger refuses work, once it does
        self.probes = 0  # SQLite data_version probes made (one per tick while anyone waits)
        self.checks = 0  # ledger reads of the watched runs' sequence numbers
        ledger.add_listener(self._on_commit)

    def close(self) -> None:
        self._ledger.remove_listener(self._on_commit)

    def watch(self, principal: str, run_refs: str | Iterable[str]) -> Interest:
        """Arm before reading: ``with notifier.watch(p, ref) as w: read(); await w.wait(t)``."""
        return Interest(self, principal, [run_refs] if isinstance(run_refs, str) else run_refs)

    @property
    def waiting(self) -> int:
        """Runs watched right now."""
        return len(self._watches)

    def _add(self, watch: Interest) -> None:
        for ref in watch.run_refs:
            self._watches.setdefault(ref, set()).add(watch)
            self._principal[ref] = watch.principal
        self._someone_waits.set()
        if self.unavailable is not None:  # nothing will commit: read now, and learn why
            watch.event.set()

    def _remove(self, watch: Interest) -> None:
        for ref in watch.run_refs:
            watches = self._watches.get(ref)
            if watches is None:
                continue
            watches.discard(watch)
            if not watches:
                del self._watches[ref]
                del self._principal[ref]
        if not self._watches and self._someone_waits.is_set():
            self._someone_waits = anyio.Event()
        if len(self._seen) > 2 * len(self._watches) + 1024:  # keep what is watched
            self._seen = {r: s for r, s in self._seen.items() if r in self._watches}

    def _fire(self, run_ref: str) -> None:
        for watch in self._watches.get(run_ref, ()):
            watch.event.set()

    def _note(self, run_ref: str, seq: int) -> bool:
        """Record ``seq`` for a watched run; True when it is news here."""
        if run_ref not in self._watches:
            return False
        known = self._seen.get(run_ref)
        if known is not None and seq <= known:
            return False
        self._seen[run_ref] = seq
        return True

    # -- this process's commits ------------------------------------------------------------
    def _on_commit(self, _principal: str, run_ref: str, seq: int) -> None:
        if threading.get_ident() == self._loop_thread:
            self._local(run_ref, seq)
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            anyio.from_thread.run_sync(self._local, run_ref, seq, token=self._token)

    def _local(self, run_ref: str, seq: int) -> None:
        self._note(run_ref, seq)
        self._fire(run_ref)

    # -- other processes' commits ----------------------------------------------------------
    def _remote(self, run_ref: str | None, seq: int) -> None:
        if run_ref is None:  # notifications may have been missed: everyone looks again
            for ref in list(self._watches):
                self._fire(ref)
        elif self._note(run_ref, seq):  # our own commits come back too: already seen
            self._fire(run_ref)

    def _remote_from_thread(self, run_ref: str | None, seq: int) -> None:
        if run_ref is not None and run_ref not in self._watches:
            # Nobody here waits on that run (this process's own commits come back too): no hop
            # to the loop. A watch armed just after this look reads the ledger after arming,
            # and the commit announced here is already in what it reads.
            return
        with contextlib.suppress(RuntimeError):
            anyio.from_thread.run_sync(self._remote, run_ref, seq, token=self._token)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The waker for other processes' commits (run it in the bridge's task group)."""
        if self._ledger.dialect.name == "postgresql":
            await self._listen(task_status)
            return
        path = sqlite_file(self._ledger.engine)
        if path is None:  # in memory: no other process can write
            task_status.started()
            await anyio.sleep_forever()
            return
        probe = SqliteChangeProbe(path)
        task_status.started()
        try:
            await self._probe(probe)
        except LedgerUnavailable as exc:
            # The ledger is gone or refuses work: said once, and the waker stops. It must not
            # end the bridge's task group (a server over the bridge would keep answering from
            # a bridge with nothing running); every waiter is woken now and at once from then
            # on, and its own read raises the same error: that is how callers learn it.
            log.error("the change watcher stops: %s", exc)
            self.unavailable = exc.reason
            for ref in list(self._watches):
                self._fire(ref)
            await anyio.sleep_forever()
        finally:
            probe.close()

    async def _listen(self, task_status: TaskStatus[None]) -> None:
        listener = CommitListener(self._ledger.engine, self._remote_from_thread)
        listener.start()
        try:
            await anyio.to_thread.run_sync(
                listener.listening.wait, LISTEN_READY_S, abandon_on_cancel=True
            )
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(listener.stop)

    async def _probe(self, probe: SqliteChangeProbe) -> None:
        interval = PROBE_MIN_S
        while True:
            if not self._watches:
                await self._someone_waits.wait()
                interval = PROBE_MIN_S
            await anyio.sleep(interval)
            watched = file_of(self._ledger.engine)
            if watched is not None and watched.lost is not None:
                raise LedgerUnavailable(watched.lost)
            self.probes += 1
            if await self._changed(probe):
                interval = PROBE_MIN_S
                await self._check_watched_runs()
            else:
                interval = min(interval * 2, PROBE_MAX_S)

    async def _changed(self, probe: SqliteChangeProbe) -> bool:
        """Did another process commit since the last tick (maybe: True may be this one)?"""
        if self._db.inline:
            # The ledger's calls run on the loop, so its writing connection is this thread's:
            # asked there, this process's own commits (already announced to the waiters by
            # the commit listener) do not count, and a watch of a task this process polls
            # costs no read of the watched runs on every tick. The question is as short as a
            # ledger read (the write-ahead log lets it read while another connection writes);
            # a hop to a worker thread would cost more.
            others = self._ledger.others_committed()
            if others is not None:
                return others
        return await anyio.to_thread.run_sync(probe.changed)

    async def _check_watched_runs(self) -> None:
        """Someone committed: one read per principal of the watched runs' last ``seq``; the
        watches of runs that moved (or that this notifier has no number for yet) fire."""
        by_principal: dict[str, list[str]] = {}
        for ref, principal in self._principal.items():
            by_principal.setdefault(principal, []).append(ref)
        for principal, refs in by_principal.items():
            self.checks += 1
            tenant = self._ledger.for_principal(principal)
            seqs = await self._db(tenant.reads.run_event_seqs, refs)
            for ref, seq in seqs.items():
                if self._note(ref, seq):
                    self._fire(ref)
