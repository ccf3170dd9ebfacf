"""The webhook deliverer: pushes each principal's outbox to its endpoint, at least once.

One deliverer works per ledger at a time, across replicas and processes: it holds the
deliverer's lease (:mod:`bridge._ledger.coordination.deliverer_lease`) through a replica
membership, the bridge's own in leased mode, otherwise one of its own. A commit in this process
that writes an outbox row wakes it at once; other processes' rows are found by a cheap look
every ``look_every_s``. A 2xx settles an item; anything else (an error status, a refused or
timed-out connection, a secret reference that resolves to nothing) is retried with a doubling
backoff, and after the endpoint's ``max_attempts`` becomes a ``webhook_undeliverable`` anomaly
on the item's run. A crash between a delivery and its settling repeats the delivery after the
restart with the same ``webhook-id``: receivers deduplicate on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import anyio
import httpx
from anyio.abc import TaskGroup, TaskStatus

from bridge._config import CredentialResolver
from bridge._ledger.coordination.deliverer_lease import hold_deliverer, release_deliverer
from bridge._ledger.coordination.leases import ReplicaRegistry
from bridge._ledger.fencing import Membership
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._ledger.webhook_outbox import OutboxItem
from bridge._runtime.webhook_endpoint import WebhookEndpoint
from bridge._runtime.webhook_message import message_body, signed_headers
from bridge._telemetry.metrics import record_webhook

log = logging.getLogger(__name__)

LOOK_EVERY_S = 1.0  # other processes' items, and retries coming due, are found this often
BATCH = 100  # items read per principal per round
CONCURRENCY = 16  # deliveries in flight at once
OWN_LEASE_MS = 15_000  # the membership a deliverer outside leased mode registers


class WebhookDeliverer:
    """``membership``: the bridge's replica membership in leased mode (``None`` while it has
    none); without it the deliverer registers one of its own."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        endpoints: Sequence[WebhookEndpoint],
        credentials: CredentialResolver,
        *,
        membership: Callable[[], Membership | None] | None = None,
        look_every_s: float = LOOK_EVERY_S,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._endpoints = {e.principal: e for e in endpoints}
        self._credentials = credentials
        self._membership = membership
        self._look_every_s = look_every_s
        self._own: Membership | None = None
        self._own_renewed = 0.0
        self.holds_lease = False  # whether this deliverer held the lease at its last look
        self._in_flight: set[str] = set()  # ids being delivered now (not started again)
        # Ids whose delivery ended while a read of due items ran: that read may still have
        # seen them due (its snapshot predates their settling), so it must not start them.
        self._ended_during_read: set[str] = set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._wake = anyio.Event()
        token = anyio.lowlevel.current_token()
        loop_thread = threading.get_ident()

        def on_outbox(principal: str) -> None:
            if principal not in self._endpoints:
                return
            if threading.get_ident() == loop_thread:
                self._wake.set()
                return
            with contextlib.suppress(RuntimeError):  # the loop is gone
                anyio.from_thread.run_sync(self._wake.set, token=token)

        self._ledger.add_outbox_listener(on_outbox)
        try:
            async with (
                httpx.AsyncClient(follow_redirects=False) as client,
                anyio.create_task_group() as deliveries,
            ):
                task_status.started()
                while True:
                    self._wake = anyio.Event()  # before the read: a later commit wakes us
                    member = await self._member()
                    self.holds_lease = member is not None and await self._db(
                        hold_deliverer, self._ledger, member
                    )
                    more = self.holds_lease and await self._start_due(client, deliveries)
                    if not more:
                        with anyio.move_on_after(self._look_every_s):
                            await self._wake.wait()
        finally:
            self._ledger.remove_outbox_listener(on_outbox)
            with anyio.CancelScope(shield=True):
                await self._retire()

    async def _member(self) -> Membership | None:
        if self._membership is not None:
            return self._membership()
        registry = ReplicaRegistry(self._ledger)
        now = anyio.current_time()
        if self._own is None:
            replica_id = f"webhooks@{socket.gethostname()}:{os.getpid()}"
            self._own = await self._db(registry.register, replica_id, OWN_LEASE_MS)
            self._own_renewed = now
        elif now - self._own_renewed >= OWN_LEASE_MS / 3000:
            if await self._db(registry.renew, self._own, OWN_LEASE_MS):
                self._own_renewed = now
            else:
                self._own = None  # lapsed (paused too long): register anew next look
        return self._own

    async def _retire(self) -> None:
        member = self._own if self._membership is None else self._membership()
        if member is None:
            return
        with contextlib.suppress(Exception):  # shutting down: another deliverer takes over
            await self._db(release_deliverer, self._ledger, member)
            if self._own is not None:
                await self._db(ReplicaRegistry(self._ledger).retire, self._own)

    async def _start_due(self, client: httpx.AsyncClient, deliveries: TaskGroup) -> bool:
        """Start delivering what is due for every principal, up to ``CONCURRENCY`` at once,
        without waiting for deliveries already in flight (a slow endpoint holds up nothing
        else): True if a batch was full (look again at once). A delivery that ends wakes the
        loop, so what did not fit is started then."""
        more = False
        for principal, endpoint in self._endpoints.items():
            tenant = self._ledger.for_principal(principal)
            room = CONCURRENCY - len(self._in_flight)
            if room <= 0:
                return False
            limit = min(BATCH, room) + len(self._in_flight)
            self._ended_during_read = set()
            items = await self._db(tenant.outbox.due_webhooks, limit)
            skip = self._in_flight | self._ended_during_read
            fresh = [item for item in items if item.id not in skip][:room]
            more = more or len(items) == limit
            for item in fresh:
                self._in_flight.add(item.id)
                deliveries.start_soon(self._deliver_tracked, client, endpoint, tenant, item)
        return more

    async def _deliver_tracked(
        self,
        client: httpx.AsyncClient,
        endpoint: WebhookEndpoint,
        tenant: TenantLedger,
        item: OutboxItem,
    ) -> None:
        try:
            await self.deliver(client, endpoint, tenant, item)
        except Exception:  # a bug or a ledger outage: the item stays due, tried at the next look
            log.exception("delivery of webhook %s failed", item.id)
            self._in_flight.discard(item.id)
            return
        self._in_flight.discard(item.id)
        self._ended_during_read.add(item.id)
        self._wake.set()  # a slot is free: start what did not fit

    async def deliver(
        self,
        client: httpx.AsyncClient,
        endpoint: WebhookEndpoint,
        tenant: TenantLedger,
        item: OutboxItem,
    ) -> None:
        """One attempt at ``item``, settled in the ledger whatever happened."""
        body = message_body(tenant.principal, item)
        error = await self._post(client, endpoint, item.id, body)
        if error is None:
            await self._db(tenant.outbox.webhook_delivered, item.id)
            record_webhook("delivered", item.kind, self._ledger.clock() - item.created_at_ms)
            return
        attempts = item.attempts + 1
        if attempts >= endpoint.max_attempts:
            await self._db(tenant.outbox.webhook_undeliverable, item.id, error)
            record_webhook("undeliverable", item.kind)
            log.warning("webhook %s given up after %d attempts: %s", item.id, attempts, error)
            return
        retry_at = self._ledger.clock() + endpoint.retry_delay_ms(attempts)
        await self._db(tenant.outbox.webhook_attempt_failed, item.id, error, retry_at)
        record_webhook("failed", item.kind)

    async def _post(
        self, client: httpx.AsyncClient, endpoint: WebhookEndpoint, item_id: str, body: bytes
    ) -> str | None:
        """POST one signed attempt: ``None`` on a 2xx, else what went wrong (no secret in it)."""
        secret = self._credentials(endpoint.secret_ref)
        if not secret:
            return f"the secret reference {endpoint.secret_ref!r} resolved to nothing"
        try:
            headers = signed_headers(secret, item_id, body, datetime.now(UTC))
        except Exception as exc:  # a malformed secret: say so, never what it was
            return f"the secret of {endpoint.secret_ref!r} cannot sign: {type(exc).__name__}"
        try:
            reply = await client.post(
                endpoint.url, content=body, headers=headers, timeout=endpoint.timeout_s
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}".rstrip(": ")
        if 200 <= reply.status_code < 300:
            return None
        return f"HTTP {reply.status_code}"
