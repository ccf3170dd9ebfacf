"""Every configuration type, in one module: what :class:`~bridge.BridgeSettings` is built from
(the settings themselves, which hold policies and handlers too, are in ``_settings.py``).
Frozen values, no behaviour beyond a check and a derived number; nothing here does I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

CredentialResolver = Callable[[str], str | None]
"""``BridgeSettings.credentials``: a server's ``credential_ref`` -> its bearer token (``None``:
no ``Authorization`` header), called when a connection opens; the token is never stored."""


def no_credentials(_ref: str) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server as a harness configures it (UHP ``mcpServers`` entry)."""

    name: str
    url: str | None = None  # Streamable HTTP endpoint
    command: str | None = None  # or a stdio server: command + args
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    enabled: bool = True
    credential_ref: str | None = None  # resolved to a bearer token at connect time
    # Extra HTTP headers on every request to this server (Streamable HTTP only), for a static
    # bearer token ({"Authorization": "Bearer ..."}) or an API-key header. Kept out of repr; a
    # credential_ref's token, when both are set, wins for Authorization.
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    # Tools safe to repeat after an unknown outcome, beyond what their annotations say.
    retry_safe_tools: frozenset[str] = frozenset()
    # Opt-in: the server accepts a duplicate-prevention key; every tools/call carries the
    # operation id in params._meta under this name (retries: the original call's id).
    operation_id_meta_key: str | None = None
    # Opt-in, a draft: every tools/call names this run's earlier tasks on this server in
    # params._meta["io.modelcontextprotocol/relatedTaskIds"] (bridge._mcp.wire.shapes).
    related_task_ids: bool = False
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    # Listen for pushed task states (subscriptions/listen) when the server supports it.
    push_updates: bool = True
    # Polls (tasks/get) of 2026-07-28 servers over Streamable HTTP take the lean path of
    # bridge._mcp.wire.lean_get (the SDK's own request, ~half the client CPU); False: always the
    # SDK session path.
    lean_task_get: bool = True
    # The HTTP/1.1 engine under the SDK's httpx2 client: "aiohttp"
    # (bridge._mcp.wire.aiohttp_transport, C parser: about half of a small request's client CPU) or
    # "httpcore" (httpx2's stock transport). Both send the same bytes; aiohttp runs only on asyncio
    # (else httpcore).
    http_engine: Literal["aiohttp", "httpcore"] = "aiohttp"

    def __post_init__(self) -> None:
        if (self.url is None) == (self.command is None):
            raise ValueError(f"server {self.name!r}: give exactly one of url or command")

    @property
    def endpoint(self) -> str:
        """The stable identity a task handle is bound to."""
        if self.url is not None:
            return self.url
        return "stdio:" + " ".join((self.command or "", *self.args))


@dataclass(frozen=True, slots=True)
class UhpServerConfig:
    """A remote UHP server the bridge may follow runs on. The token is given by reference."""

    name: str
    base_url: str
    credential_ref: str


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How the poll scheduler paces polls: the floor (and opt-in ceiling) around a server's
    ``pollIntervalMs``, jitter, backoff on failures, concurrency bounds, and the push backstop."""

    floor_ms: int = 100  # never poll one task more often than this, whatever the server says
    # Opt-in: never wait longer than this between polls of a live task, even when the server
    # asked for longer (None, the default: the server's pollIntervalMs is honoured as asked).
    ceiling_ms: int | None = None
    default_interval_ms: int = 1_000  # when the server gives no pollIntervalMs
    jitter: float = 0.1  # each interval is stretched by up to this fraction, at random
    backoff_base_ms: int = 500  # first retry delay after a failed poll
    backoff_max_ms: int = 30_000
    per_server_concurrency: int = 16
    max_in_flight: int = 64
    unreachable_grace_ms: int = 30_000  # failing this long -> one server.unreachable event
    lease_wait_ms: int = 100  # a leased handle due while the lease awaits renewal waits this
    # While a listen stream the server acknowledged names a handle, it is polled no more often
    # than this (its pushed states settle it); None: keep polling at the server's interval.
    # A stream that drops returns its handles to the server's interval at once.
    push_backstop_ms: int | None = 60_000


@dataclass(frozen=True, slots=True)
class PushConfig:
    """How the bridge follows pushed task states (``BridgeSettings(push=PushConfig(...))``).
    How often a pushed handle is still polled is :attr:`SchedulerConfig.push_backstop_ms`."""

    max_task_ids: int = 256  # per server, over its streams; handles beyond these are only polled
    # New handles are named by a stream of their own, so no open stream is ever closed while it
    # names a watched handle (a push in flight on it would be lost). At this many streams on one
    # server, the half naming the fewest watched handles are merged into the next new stream
    # (the handles they carried are polled once more).
    max_streams: int = 16
    settle_ms: int = 50  # new handles within this window are named by one new stream
    ack_timeout_s: float = 10.0
    backoff_base_ms: int = 500  # first re-listen delay after a stream failed or dropped
    backoff_max_ms: int = 30_000
    # The listen request's result arrives only when the stream ends: no logical deadline.
    stream_timeout_s: float = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class FollowConfig:
    """How a remote UHP response is followed: read timeouts, re-reads, reconnects, and how often its
    stream position is committed."""

    inactivity_timeout_s: float = 75.0  # servers send ': keep-alive' at least every 30 s
    blocking_timeout_s: float = 900.0  # a blocking POST waits for the whole task
    reread_interval_s: float = 1.0  # re-reading a response that cannot be streamed again
    max_reconnects: int = 50
    checkpoint_interval_ms: int = 200  # how often the last seen sequence is committed


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How ``POST /v1/responses`` is retried (always with the same Idempotency-Key)."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: float = 0.25
    session_busy_deadline_s: float = 600.0  # keep retrying session_busy this long


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Leased polling for one of several bridge processes on one PostgreSQL ledger.

    ``replica_id`` must be stable across restarts of the same replica (a restart then takes its
    own handles back at once) and unique among live processes.
    """

    replica_id: str
    lease_ms: int = 15_000  # how long a membership lasts without renewal
    claim_every_ms: int = 1_000  # look for unheld work this often (at once while batches fill)
    claim_batch: int = 1_000  # most handles claimed per principal per round
    max_tasks: int | None = None  # stop claiming past this many watched handles (spread load)
    max_runs: int | None = None
    # Claim no more than an even share of each principal's open handles (ceil(open / live
    # replicas)), so that replicas started together split them instead of the first one
    # taking all. Only for replicas that all serve the same principals with the same
    # ``max_tasks`` (or none): a live replica that cannot take its share leaves it unclaimed.
    share_evenly: bool = False

    @property
    def renew_every_ms(self) -> int:
        """How often the membership is renewed: a third of the lease."""
        return max(1, self.lease_ms // 3)

    @property
    def margin_ms(self) -> int:
        """Stop acting this long before the lease could end (covers a request in flight)."""
        return self.lease_ms // 5
