"""The outer reconcile loop's remote side, for :class:`~bridge.Bridge`.

One UHP client per (principal, configured server); remote runs followed to their terminal
state in the background (claimed ones from their recorded sequence, leased to this replica);
and, when an outer run ends while inner tasks are open, the outer-cancel / outer-end policies
applied to those tasks (served runs too: the harness reports their end).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from bridge._config import CredentialResolver, FollowConfig
from bridge._errors import BridgeError, LeaseLost
from bridge._ledger.coordination.replica import ReplicaLeases
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import RunView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._policies import OnOuterCancel, OnOuterEnd, Policies
from bridge._telemetry.outer_spans import OuterSpans
from bridge.uhp._client import ResponseFollower, UhpClient, UnansweredPost


class UhpServer(Protocol):
    """A configured remote UHP server (:class:`bridge.UhpServerConfig`)."""

    @property
    def name(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def credential_ref(self) -> str: ...


class OuterRuns:
    """Built by the bridge; ``task_group``, ``replica`` and ``policies`` are read when used
    (the task group exists only inside ``async with``, the replica once joined)."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        servers: Sequence[UhpServer],
        credentials: CredentialResolver,
        follow: FollowConfig | None,
        requester: TaskRequester,
        spans: OuterSpans,
        *,
        task_group: Callable[[], TaskGroup | None],
        replica: Callable[[], ReplicaLeases | None],
        policies: Callable[[], Policies],
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._servers = {s.name: s for s in servers}
        self._credentials = credentials
        self._follow = follow
        self._requester = requester
        self._spans = spans
        self._task_group = task_group
        self._replica = replica
        self._policies = policies
        self._clients: dict[tuple[str, str], UhpClient] = {}
        self.follows: dict[str, anyio.CancelScope] = {}  # run_ref -> its follower

    @property
    def base_urls(self) -> list[str]:
        return [s.base_url for s in self._servers.values()]

    async def client(self, principal: str, name: str) -> UhpClient:
        key = (principal, name)
        client = self._clients.get(key)
        if client is None:
            config = self._servers.get(name)
            if config is None:
                raise BridgeError(f"no UHP server named {name!r} is configured")
            token = self._credentials(config.credential_ref) or ""
            client = UhpClient(
                config.base_url,
                token=token,
                ledger=self._ledger,
                principal=principal,
                follow=self._follow,
            )
            await client.__aenter__()
            replica = self._replica()
            if replica is not None:
                client.lease_run = functools.partial(replica.adopt_run, principal)
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        """Close every UHP client opened so far."""
        for client in self._clients.values():
            await client.__aexit__(None, None, None)

    def server_named(self, base_url: str) -> str | None:
        return next(
            (s.name for s in self._servers.values() if s.base_url.rstrip("/") == base_url),
            None,
        )

    # -- following -------------------------------------------------------------------------
    def follow(self, principal: str, follower: ResponseFollower) -> None:
        """Follow one remote run to its terminal state in the background, then apply the
        outer-end policies."""
        tg = self._task_group()
        assert tg is not None
        tg.start_soon(self._reconcile, principal, follower)

    async def follow_claimed(self, principal: str, member: Membership, runs: list[RunView]) -> None:
        """Runs this replica just claimed: follow each from its recorded sequence."""
        for run in runs:
            if run.ref in self.follows:
                continue
            if run.trace_id is not None:
                await self._spans.start(principal, run, served=False)
            await self.resume(principal, run, lease=member)

    async def resume(
        self, principal: str, run: RunView, *, lease: Membership | None = None
    ) -> bool:
        """Follow a recorded run again from its last seen sequence (``lease``: claimed by this
        replica). False when no configured UHP server serves it."""
        name = self.server_named(run.uhp_server)
        if name is None:
            return False
        client = await self.client(principal, name)
        self.follow(principal, await client.follow(run.ref, lease=lease))
        return True

    async def _reconcile(self, principal: str, follower: ResponseFollower) -> None:
        with anyio.CancelScope() as scope:
            self.follows[follower.run_ref] = scope
            try:
                async with follower:
                    final = await follower.until_terminal()
            except LeaseLost:
                return  # another replica follows it now
            finally:
                self.follows.pop(follower.run_ref, None)
        if scope.cancelled_caught:
            return
        status = final.outer_status
        if status is not None and status.is_terminal:
            self._spans.end(follower.run_ref, status)
            await self.apply_policies(principal, follower.run_ref, status)

    async def unanswered_posts(self, principal: str) -> list[UnansweredPost]:
        """Runs whose creating POST never got its answer, each with a client to re-ask."""
        tenant = self._ledger.for_principal(principal)
        posts = []
        for run in await self._db(tenant.reads.unacknowledged_runs):
            name = self.server_named(run.uhp_server)
            client = functools.partial(self.client, principal, name) if name else None
            posts.append(
                UnansweredPost.of(run, await self._db(tenant.reads.run_request, run.ref), client)
            )
        return posts

    # -- the end of an outer run -----------------------------------------------------------
    async def apply_policies(self, principal: str, run_ref: str, status: OuterStatus) -> None:
        """The outer run ended (``status``) with inner tasks open: cancel or report them, as
        the policies say."""
        tenant = self._ledger.for_principal(principal)
        open_tasks = await self._db(tenant.reads.list_tasks, run_ref=run_ref, open_only=True)
        if not open_tasks:
            return
        refs = [t.ref for t in open_tasks]
        policies = self._policies()
        if status is OuterStatus.CANCELLED and (
            policies.on_outer_cancel is OnOuterCancel.CANCEL_INNER
        ):
            await self._db(
                tenant.runs.record_open_tasks_at_end, run_ref, status, refs, "cancel_requested"
            )
            for task in open_tasks:
                await self._requester.cancel_task(principal, task.ref, "policy:outer_cancelled")
            return
        if policies.on_outer_end is OnOuterEnd.REPORT:
            await self._db(tenant.runs.record_open_tasks_at_end, run_ref, status, refs, "reported")
            for task in open_tasks:
                await self._requester.detach_task(principal, task.ref, "policy:outer_ended")
