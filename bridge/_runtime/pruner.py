"""Pruning from a running bridge: :meth:`bridge.Bridge.prune` and the scheduled pruner.

Each batch of a prune (:class:`~bridge._ledger.retention.prune.Prune`) runs in a worker thread,
one short transaction, and the pruner awaits ``job.pause_s`` between batches: the event loop
serves calls the whole time, and a call's write waits at most one batch for the write lock.

The scheduled pruner runs in every bridge with a retention policy, but one at a time per ledger:
each round starts by taking the ledger-wide ``prune`` job lease
(:mod:`bridge._ledger.coordination.job_lease`), which also says when the last round finished,
so replicas on one schedule prune once per period between them. A round that fails is logged as
what it is and tried again next period; it never ends the bridge.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import TaskStatus as AnyioTaskStatus

from bridge._errors import LedgerUnavailable
from bridge._ledger.coordination.job_lease import JobLease
from bridge._ledger.retention.policy import Retention, RetentionPolicy, policy_for
from bridge._ledger.retention.prune import Prune, PruneReport
from bridge._ledger.retention.vacuum import return_space
from bridge._ledger.store import Ledger

log = logging.getLogger("bridge.retention")

JOB = "prune"
#: How long the pruner's job lease lasts without renewal (renewed between batches).
LEASE_MS = 60_000


async def prune_principal(
    ledger: Ledger,
    principal: str,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    archive: Path | None = None,
    go_on: Callable[[], Awaitable[bool]] | None = None,
) -> PruneReport:
    """Prune one principal's finished runs batch by batch, pausing between batches, then hand
    the space back (SQLite); ``go_on`` is awaited between batches (False: stop there)."""
    job = Prune(ledger, principal, policy, dry_run=dry_run, archive=archive)
    while await anyio.to_thread.run_sync(job.step):
        await anyio.sleep(job.pause_s)
        if go_on is not None and not await go_on():
            return job.report
    if job.report.runs and not dry_run:
        pause = partial(time.sleep, policy.pause_s)
        job.report.pages_freed = await anyio.to_thread.run_sync(
            partial(return_space, ledger.engine, pause=pause)
        )
    return job.report


class ScheduledPruner:
    """Prunes the bridge's principals every period while it holds the ledger's job lease."""

    def __init__(self, ledger: Ledger, retention: Retention, principals: Sequence[str]) -> None:
        self._ledger = ledger
        self._retention = retention
        self._principals = tuple(p for p in principals if policy_for(retention, p) is not None)
        periods = [policy_for(retention, p) for p in self._principals]
        self.every_s = min((p.every_s for p in periods if p is not None), default=3600.0)
        self.holder = f"pruner-{secrets.token_hex(8)}"
        self.rounds: list[list[PruneReport]] = []  # the rounds this process ran, oldest first
        self._unavailable_logged = False

    async def run(self, *, task_status: AnyioTaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while self._principals:
            try:
                await self.round()
                self._unavailable_logged = False
            except LedgerUnavailable as exc:
                if not self._unavailable_logged:  # once, as what it is; retried next period
                    log.error("scheduled prune skipped: %s", exc)
                    self._unavailable_logged = True
            except Exception:
                log.exception("scheduled prune failed; it runs again in %g s", self.every_s)
            await anyio.sleep(self.every_s)

    async def round(self) -> list[PruneReport] | None:
        """One round, if this process takes the lease (``None`` otherwise)."""
        lease = JobLease(self._ledger, JOB, self.holder, LEASE_MS)
        every_ms = int(self.every_s * 1000)
        if not await anyio.to_thread.run_sync(lease.take, every_ms):
            return None
        renewed_at = time.monotonic()
        held = True

        async def go_on() -> bool:
            nonlocal held, renewed_at
            if time.monotonic() - renewed_at > LEASE_MS / 3000:  # a third of the lease
                held = await anyio.to_thread.run_sync(lease.renew)
                renewed_at = time.monotonic()
            return held

        reports: list[PruneReport] = []
        try:
            for principal in self._principals:
                policy = policy_for(self._retention, principal)
                assert policy is not None
                job = prune_principal(self._ledger, principal, policy, go_on=go_on)
                reports.append(await job)
                if not await go_on():
                    log.warning("the prune job lease was taken over; this round stops")
                    return reports
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lease.release)
            raise
        await anyio.to_thread.run_sync(lease.finish)
        self.rounds.append(reports)
        removed = sum(r.runs for r in reports)
        if removed:
            log.info("scheduled prune removed %d finished runs", removed)
        return reports
