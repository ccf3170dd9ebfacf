"""One replica among several sharing a ledger: membership renewal and claims of leased work.

:class:`ReplicaLeases` keeps this process's membership alive (renewing every third of the lease)
and claims, per principal, open task handles and remotely followed runs that no live replica
holds, oldest due first, handing them to the scheduler and the run followers. It knows when this
replica may act on what it holds: only until ``lease_ms - margin_ms`` after the last renewal
*was sent* (a renewal is valid from no later than that), so a replica that stops renewing
(paused, partitioned, killed) stops polling before anyone else may claim its handles.

When a renewal finds the membership lapsed, everything held is dropped (``drop_held``), a new
incarnation registers and claims again, competing fairly with the other replicas.

The replica knows nothing of the MCP or UHP side: it hands what it claims to a
:class:`LeaseHolder` (a protocol the bridge implements over its scheduler and run followers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio
from anyio.abc import TaskStatus as AnyioTaskStatus

from bridge._config import ReplicaConfig
from bridge._ledger.coordination.leases import ReplicaRegistry, TenantLeases
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import RunView, TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after a failed renewal or claim round, try again at most this much later

_Claimed = tuple[str, list[TaskView], list[RunView]]  # (principal, tasks, runs) of one round


class LeaseHolder(Protocol):
    """Who watches what a replica claims: open task handles (the MCP side) and remotely
    followed runs (the UHP side)."""

    async def take_tasks(self, principal: str, member: Membership, tasks: list[TaskView]) -> None:
        """Watch these claimed handles."""

    async def take_runs(self, principal: str, member: Membership, runs: list[RunView]) -> None:
        """Follow these claimed runs."""

    def drop_held(self) -> None:
        """The membership lapsed: stop every leased poll and follower now."""

    def watched_tasks(self) -> int:
        """Handles watched now (the ``max_tasks`` cap counts them)."""

    def followed_runs(self) -> int:
        """Runs followed now (the ``max_runs`` cap counts them)."""


class ReplicaLeases:
    def __init__(
        self,
        ledger: Ledger,
        config: ReplicaConfig,
        principals: Sequence[str],
        db: LedgerRunner,
        holder: LeaseHolder,
        *,
        uhp_servers: Sequence[str] = (),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.principals = tuple(principals)
        self._ledger = ledger
        self._registry = ReplicaRegistry(ledger)
        self._db = db
        self._monotonic = monotonic
        self.membership: Membership | None = None
        self._act_until = 0.0
        self._wake = anyio.Event()
        self._holder = holder
        self.uhp_servers = [url.rstrip("/") for url in uhp_servers]  # runs of these are claimed
        self.claimed_tasks = 0
        self.claimed_runs = 0

    # -- what the scheduler and followers ask ----------------------------------------------------
    def can_act(self) -> bool:
        return self.membership is not None and self._monotonic() < self._act_until

    def current(self) -> Membership:
        if self.membership is None:
            raise RuntimeError("the replica has not registered yet")
        return self.membership

    # -- lifetime ------------------------------------------------------------------------------
    async def register(self) -> Membership:
        sent = self._monotonic()
        member = await self._db(
            self._registry.register, self.config.replica_id, self.config.lease_ms
        )
        self.membership = member
        self._valid_from(sent)
        log.info("replica %s registered", member)
        return member

    async def run(self, *, task_status: AnyioTaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self.membership is None:
            await self.register()
        task_status.started()
        renew_every = self.config.renew_every_ms / 1000
        claim_every = self.config.claim_every_ms / 1000
        renew_at = self._monotonic() + renew_every
        claim_at = self._monotonic()
        while True:
            now = self._monotonic()
            try:
                if now >= renew_at:
                    await self.renew()
                    renew_at = self._monotonic() + renew_every
                if now >= claim_at:
                    more = await self.claim_now()
                    claim_at = self._monotonic() + (0 if more else claim_every)
            except Exception:
                # The ledger is unreachable (or a claim hook failed). Keep trying: meanwhile
                # can_act() runs out on its own, so nothing is polled on a lease that may have
                # lapsed, and a lapsed membership is noticed at the next successful renewal.
                log.exception("replica %s: renewal or claim failed; retrying", self.membership)
                retry_at = self._monotonic() + min(renew_every, claim_every, RETRY_S)
                if now >= renew_at:  # the renewal failed (else it succeeded and moved on)
                    renew_at = retry_at
                if now >= claim_at:
                    claim_at = retry_at
            delay = max(0.0, min(renew_at, claim_at) - self._monotonic())
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                if self._wake.is_set():
                    claim_at = self._monotonic()
            else:
                await anyio.lowlevel.checkpoint()
            self._wake = anyio.Event()

    async def renew(self) -> bool:
        member = self.current()
        sent = self._monotonic()
        if await self._db(self._registry.renew, member, self.config.lease_ms):
            self._valid_from(sent)
            return True
        log.warning("replica %s lost its membership; dropping what it held", member)
        self._act_until = 0.0
        self._holder.drop_held()
        await self.register()
        return False

    async def retire(self) -> None:
        """Hand everything over at once (clean shutdown)."""
        member, self.membership = self.membership, None
        self._act_until = 0.0
        if member is not None:
            await self._db(self._registry.retire, member)

    # -- claims -------------------------------------------------------------------------------
    async def claim_now(self) -> bool:
        """One claim round over every principal, handed over at once. True when a batch came
        back full (more may be waiting), so the caller claims again at once."""
        claims, more = await self._claim_round(pending=0)
        await self._hand_over(claims)
        return more

    async def claim_everything(self) -> None:
        """Claim until no batch comes back full (a restart taking its handles back): each
        round is handed over while the next one is being claimed, so the database's time and
        the watching overlap."""
        claims, more = await self._claim_round(pending=0)
        while more:
            pending = sum(len(tasks) for _, tasks, _ in claims)
            async with anyio.create_task_group() as group:
                group.start_soon(self._hand_over, claims)
                claims, more = await self._claim_round(pending=pending)
        await self._hand_over(claims)

    async def _claim_round(self, pending: int) -> tuple[list[_Claimed], bool]:
        """Claim for every principal (``pending``: handles claimed, not yet handed over)."""
        member = self.current()
        if not self.can_act():
            return [], False
        claims: list[_Claimed] = []
        more = False
        for principal in self.principals:
            leases = TenantLeases(self._ledger.for_principal(principal))
            tasks: list[TaskView] = []
            runs: list[RunView] = []
            room = self._room(self.config.max_tasks, self._holder.watched_tasks() + pending)
            if room > 0 and self.config.share_evenly:
                room = min(room, await self._db(leases.even_share_room, member))
            if room > 0:
                tasks = await self._db(leases.claim_tasks, member, room)
                self.claimed_tasks += len(tasks)
                pending += len(tasks)
                more = more or len(tasks) == room
            room = self._room(self.config.max_runs, self._holder.followed_runs())
            if room > 0 and self.uhp_servers:
                runs = await self._db(leases.claim_runs, member, self.uhp_servers, room)
                self.claimed_runs += len(runs)
                more = more or len(runs) == room
            if tasks or runs:
                claims.append((principal, tasks, runs))
        return claims, more

    async def _hand_over(self, claims: list[_Claimed]) -> None:
        member = self.current()
        for principal, tasks, runs in claims:
            if tasks:
                await self._holder.take_tasks(principal, member, tasks)
            if runs:
                await self._holder.take_runs(principal, member, runs)

    async def adopt_task(self, principal: str, task_ref: str) -> Membership | None:
        """Lease a recorded task to this replica; None if another replica already holds it."""
        return await self._adopt(principal, "task", task_ref)

    async def adopt_run(self, principal: str, run_ref: str) -> Membership | None:
        """Lease a run this replica starts following; None if another replica holds it."""
        return await self._adopt(principal, "run", run_ref)

    async def _adopt(self, principal: str, kind: str, ref: str) -> Membership | None:
        member = self.membership
        if member is None:
            return None
        leases = TenantLeases(self._ledger.for_principal(principal))
        adopt = leases.adopt_task if kind == "task" else leases.adopt_run
        return member if await self._db(adopt, member, ref) else None

    def _room(self, limit: int | None, held: int) -> int:
        batch = self.config.claim_batch
        return batch if limit is None else max(0, min(batch, limit - held))

    def _valid_from(self, sent: float) -> None:
        self._act_until = sent + (self.config.lease_ms - self.config.margin_ms) / 1000
