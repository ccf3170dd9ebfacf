"""Ledger tables (SQLModel). Only :mod:`bridge._ledger.store` writes them.

Every row carries the ``principal`` (principal/tenant) that created it, and every query in the
store filters on it. Times the bridge observes are Unix epoch milliseconds (``*_ms``); times a
server reported are kept verbatim as the ISO strings it sent (``server_*_at``).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

# The conditions of the partial indexes, as the queries spell them (bridge._ledger._base's
# OPEN_RUN and OPEN_TASK): a planner uses a partial index only for a query that implies them.
OPEN_RUN_SQL = "status IS NULL OR status = 'in_progress'"
OPEN_TASK_SQL = "terminal_at_ms IS NULL AND lost_reason IS NULL AND detached_at_ms IS NULL"
# What the attention query and recovery read: lost tasks with no outcome nobody acknowledged,
# calls of unknown outcome with no final verdict, inputs not answered (waiting, or declined with
# no answer). Resolved items leave these indexes: a long history holds few rows of any of them.
LOST_TASK_SQL = "lost_reason IS NOT NULL AND terminal_at_ms IS NULL AND acknowledged_at_ms IS NULL"
UNRESOLVED_CALL_SQL = "state = 'unknown' AND resolved_at_ms IS NULL"
UNANSWERED_INPUT_SQL = "answered_at_ms IS NULL"


def _ms(nullable: bool = False) -> Column[int]:
    return Column(BigInteger, nullable=nullable)


class OuterResponse(SQLModel, table=True):
    """One outer UHP response (a "run"), served by this harness or followed remotely."""

    __tablename__ = "bridge_outer_responses"
    __table_args__ = (
        UniqueConstraint("principal", "uhp_server", "response_id", name="uq_outer_response"),
        UniqueConstraint("principal", "idempotency_key", name="uq_outer_idempotency"),
        Index("ix_outer_principal_updated", "principal", "updated_at_ms", "ref"),
        # The open runs alone, so that recovery and `--open` never walk a long history.
        Index(
            "ix_outer_open",
            "principal",
            "updated_at_ms",
            sqlite_where=text(OPEN_RUN_SQL),
            postgresql_where=text(OPEN_RUN_SQL),
        ),
    )

    ref: str = Field(primary_key=True, max_length=64)
    principal: str = Field(max_length=200)
    uhp_server: str = Field(max_length=500)  # base URL of the UHP server, or "local:<name>"
    response_id: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    harness_id: str | None = Field(default=None, max_length=200)
    status: str | None = Field(default=None, max_length=32)  # None until acknowledged
    error_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    last_sequence: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    idempotency_key: str | None = Field(default=None, max_length=200)
    # The POST body of a run this process creates remotely, committed with the key before the
    # POST (credentials scrubbed, bridge.uhp._request_record), so that a recovering process can
    # send the same request again with the same key.
    request_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    event_seq: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # W3C ids of the run's outer span, so a process that resumes the run continues its trace.
    trace_id: str | None = Field(default=None, max_length=32)
    span_id: str | None = Field(default=None, max_length=16)
    # Leased polling/following (several replicas on one PostgreSQL ledger): the replica and the
    # incarnation of it that holds this row. The pair is the fencing token: a write carrying
    # another pair is refused. NULL when unowned (single-process mode never sets it).
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_incarnation: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at_ms: int = Field(sa_column=_ms())
    updated_at_ms: int = Field(sa_column=_ms())


class DispatchIntent(SQLModel, table=True):
    """A ``tools/call`` the bridge is about to send, committed before it is sent."""

    __tablename__ = "bridge_dispatch_intents"
    __table_args__ = (
        UniqueConstraint("principal", "operation_id", name="uq_dispatch_operation"),
        Index("ix_dispatch_principal_state", "principal", "state"),
        # Keyed on all three terms the attention query compares: SQLite's planner, without
        # statistics, would otherwise take the (principal, state) index, which holds every
        # unknown outcome ever recorded, resolved or not.
        Index(
            "ix_dispatch_unresolved",
            "principal",
            "state",
            "resolved_at_ms",
            sqlite_where=text(UNRESOLVED_CALL_SQL),
            postgresql_where=text(UNRESOLVED_CALL_SQL),
        ),
    )

    ref: str = Field(primary_key=True, max_length=64)
    principal: str = Field(max_length=200)
    run_ref: str = Field(foreign_key="bridge_outer_responses.ref", index=True, max_length=64)
    operation_id: str = Field(max_length=200)  # caller-chosen, stable across retries
    server_endpoint: str = Field(max_length=500)
    server_name: str | None = Field(default=None, max_length=200)
    tool_name: str = Field(max_length=200)
    args_digest: str = Field(max_length=64)
    state: str = Field(max_length=16)
    unknown_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    result_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    result_truncated: bool = False
    task_ref: str | None = Field(default=None, max_length=64)
    # W3C ids of the tools/call span, which the task's lifetime span links to.
    trace_id: str | None = Field(default=None, max_length=32)
    span_id: str | None = Field(default=None, max_length=16)
    # The replica incarnation that sent it: a dispatch left pending/sent by an incarnation that
    # is no longer alive can be settled as unknown by any other replica.
    dispatcher_replica: str | None = Field(default=None, max_length=200)
    dispatcher_incarnation: int | None = Field(
        default=None, sa_column=Column(BigInteger, nullable=True)
    )
    created_at_ms: int = Field(sa_column=_ms())
    updated_at_ms: int = Field(sa_column=_ms())
    # When an unknown outcome got its final admission verdict (the verdict is its event).
    resolved_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))


class InnerTask(SQLModel, table=True):
    """One MCP task handle, linked to the outer response and session it was created under."""

    __tablename__ = "bridge_inner_tasks"
    __table_args__ = (
        UniqueConstraint("principal", "server_endpoint", "task_id", name="uq_inner_task_id"),
        Index("ix_inner_principal_due", "principal", "next_poll_due_ms"),
        Index("ix_inner_lease", "lease_owner", "lease_incarnation"),
        # The open (watched) tasks alone: recovery's read never walks a long history.
        Index(
            "ix_inner_open",
            "principal",
            "created_at_ms",
            "ref",
            sqlite_where=text(OPEN_TASK_SQL),
            postgresql_where=text(OPEN_TASK_SQL),
        ),
        Index(
            "ix_inner_lost",
            "principal",
            sqlite_where=text(LOST_TASK_SQL),
            postgresql_where=text(LOST_TASK_SQL),
        ),
    )

    ref: str = Field(primary_key=True, max_length=64)
    principal: str = Field(max_length=200)
    run_ref: str = Field(foreign_key="bridge_outer_responses.ref", index=True, max_length=64)
    op_ref: str = Field(foreign_key="bridge_dispatch_intents.ref", index=True, max_length=64)
    response_id: str | None = Field(default=None, max_length=200)  # outer ids at creation
    session_id: str | None = Field(default=None, max_length=200)
    server_endpoint: str = Field(max_length=500)
    server_name: str | None = Field(default=None, max_length=200)
    server_version: str | None = Field(default=None, max_length=100)
    credential_ref: str | None = Field(default=None, max_length=200)  # a name, never a token
    tool_name: str = Field(max_length=200)
    args_digest: str = Field(max_length=64)
    task_id: str = Field(sa_column=Column(Text, nullable=False))  # raw; never leaves the ledger
    status: str = Field(max_length=32)
    status_message: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    lost_reason: str | None = Field(default=None, max_length=32)  # verdict, not a status
    lost_detail: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    server_created_at: str | None = Field(default=None, max_length=64)
    server_updated_at: str | None = Field(default=None, max_length=64)
    ttl_ms: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    poll_interval_ms: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    next_poll_due_ms: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    result_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    error_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    outcome_truncated: bool = False
    outcome_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    cancel_requested_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    # The server answered a tasks/cancel (an ack, not a stop): a resumed handle does not resend it.
    cancel_acknowledged_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    # The caller stopped tracking the task without cancelling it (a bridge choice, not a status).
    detached_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    terminal_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    # Leased polling/following (several replicas on one PostgreSQL ledger): the replica and the
    # incarnation of it that holds this row. The pair is the fencing token: a write carrying
    # another pair is refused. NULL when unowned (single-process mode never sets it).
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_incarnation: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at_ms: int = Field(sa_column=_ms())
    updated_at_ms: int = Field(sa_column=_ms())
    # Which task protocol the handle belongs to: NULL for the Tasks extension (2026-07-28),
    # "2025-11-25" for the core experimental tasks, polled with that generation's methods.
    task_generation: str | None = Field(default=None, max_length=32)
    # When an operator acknowledged the task lost (the acknowledgement is its event).
    acknowledged_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))


class InputRequestRow(SQLModel, table=True):
    """One ``inputRequests`` key of a task, or of one MRTR leg of a call that has no task yet
    (``op_ref`` + ``leg``, ``task_ref`` NULL): seen, surfaced and answered at most once."""

    __tablename__ = "bridge_input_requests"
    __table_args__ = (
        UniqueConstraint("task_ref", "key", name="uq_input_request_key"),
        UniqueConstraint("ref", name="uq_input_request_ref"),
        UniqueConstraint("op_ref", "leg", "key", name="uq_input_request_call_key"),
        Index(
            "ix_inputs_unanswered",
            "principal",
            sqlite_where=text(UNANSWERED_INPUT_SQL),
            postgresql_where=text(UNANSWERED_INPUT_SQL),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    # Bridge-local name of the request (``in_…``): server-minted keys may embed the raw taskId,
    # so events name the request by this reference, never by its key.
    ref: str | None = Field(default=None, max_length=64)
    principal: str = Field(max_length=200, index=True)
    task_ref: str | None = Field(default=None, foreign_key="bridge_inner_tasks.ref", max_length=64)
    # An MRTR input (InputRequiredResult to tools/call): the dispatch and the leg that asked.
    op_ref: str | None = Field(
        default=None, foreign_key="bridge_dispatch_intents.ref", max_length=64
    )
    leg: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    key: str = Field(max_length=500)
    method: str = Field(max_length=200)
    params_json: str = Field(sa_column=Column(Text, nullable=False))
    payload_digest: str = Field(max_length=64)
    # digest of a different payload later seen under the same key (a reused key: an anomaly)
    conflicting_digest: str | None = Field(default=None, max_length=64)
    first_seen_ms: int = Field(sa_column=_ms())
    surfaced_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    answer_digest: str | None = Field(default=None, max_length=64)
    # Kept until delivered so a crash between recording and tasks/update can redeliver it
    # (servers ignore keys already answered); cleared once delivered.
    answer_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    answered_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    delivered_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    # The bridge declined it (input policy): with an answer (an elicitation's decline) or
    # without one (a kind that has no decline shape: nothing is sent). Migration 0005.
    declined_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    # Reported stuck once (task.input_stuck), so a restart does not report it again.
    stuck_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))


class CallRound(SQLModel, table=True):
    """One ``InputRequiredResult`` a ``tools/call`` received (MRTR): leg ``leg`` of the call
    asked for input; the next leg re-sends the arguments with the answers and the state."""

    __tablename__ = "bridge_call_rounds"
    __table_args__ = (UniqueConstraint("op_ref", "leg", name="uq_call_round_leg"),)

    id: int | None = Field(default=None, primary_key=True)
    principal: str = Field(max_length=200, index=True)
    op_ref: str = Field(foreign_key="bridge_dispatch_intents.ref", max_length=64)
    leg: int = Field(sa_column=Column(BigInteger, nullable=False))  # 1: the original request
    # The server's opaque requestState, echoed verbatim on the next leg (bounded; never logged).
    request_state: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # The call's arguments, re-sent by the next leg (a restarted process has nothing else).
    arguments_json: str = Field(sa_column=Column(Text, nullable=False))
    received_at_ms: int = Field(sa_column=_ms())
    # When leg + 1 was committed as sent (write-ahead of the retry); NULL while waiting.
    retried_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))


class AgentState(SQLModel, table=True):
    """What an agent framework needs to resume a run after a crash (message history, the map
    of its tool calls to task refs, a serialised run state), kept beside the run it belongs to.
    Opaque to the bridge; versioned so two writers cannot silently overwrite each other."""

    __tablename__ = "bridge_agent_states"
    __table_args__ = (UniqueConstraint("run_ref", "name", name="uq_agent_state_run_name"),)

    id: int | None = Field(default=None, primary_key=True)
    principal: str = Field(max_length=200, index=True)
    run_ref: str = Field(foreign_key="bridge_outer_responses.ref", max_length=64)
    name: str = Field(max_length=200)  # which framework/agent wrote it, e.g. "pydantic-ai"
    state_json: str = Field(sa_column=Column(Text, nullable=False))
    version: int = Field(sa_column=Column(BigInteger, nullable=False))  # 1, 2, ... per save
    updated_at_ms: int = Field(sa_column=_ms())


class GatewayHandle(SQLModel, table=True):
    """A task handle the gateway (``bridge gateway``) issued to one of its MCP clients: the
    SHA-256 of the handle (the handle itself is a bearer capability and is never stored),
    bound to the principal that called and to the task it names. Never the upstream taskId."""

    __tablename__ = "bridge_gateway_handles"

    handle_sha256: str = Field(primary_key=True, max_length=64)
    principal: str = Field(max_length=200, index=True)
    task_ref: str = Field(foreign_key="bridge_inner_tasks.ref", index=True, max_length=64)
    op_ref: str = Field(max_length=64)
    issued_at_ms: int = Field(sa_column=_ms())


class EventRecord(SQLModel, table=True):
    """Append-only per-run event log; ``seq`` is gapless per run, starting at 1."""

    __tablename__ = "bridge_events"
    __table_args__ = (
        UniqueConstraint("run_ref", "seq", name="uq_event_run_seq"),
        Index("ix_events_principal_type", "principal", "type"),
    )

    id: int | None = Field(default=None, primary_key=True)
    principal: str = Field(max_length=200)
    run_ref: str = Field(foreign_key="bridge_outer_responses.ref", max_length=64)
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    type: str = Field(max_length=64)
    task_ref: str | None = Field(default=None, max_length=64)
    payload_json: str = Field(sa_column=Column(Text, nullable=False))
    at_ms: int = Field(sa_column=_ms())


class Replica(SQLModel, table=True):
    """One bridge replica's membership lease (infrastructure, not tenant data).

    A replica registers under a stable id; every start bumps its ``incarnation``. Rows it leases
    carry (id, incarnation); they stay its own while this row is unexpired and the incarnation
    matches. Expiry is measured on the database's clock, so replicas' clocks need not agree.
    """

    __tablename__ = "bridge_replicas"

    replica_id: str = Field(primary_key=True, max_length=200)
    incarnation: int = Field(sa_column=Column(BigInteger, nullable=False))
    expires_at_ms: int = Field(sa_column=_ms())
    heartbeat_at_ms: int = Field(sa_column=_ms())
    started_at_ms: int = Field(sa_column=_ms())


class WebhookOutbox(SQLModel, table=True):
    """One attention item to push to its principal's webhook, written in the transaction of
    the event that created it (at least once: delivered, or given up on and reported)."""

    __tablename__ = "bridge_webhook_outbox"
    __table_args__ = (
        Index("ix_webhook_outbox_due", "principal", "next_attempt_ms"),
        UniqueConstraint("run_ref", "seq", name="uq_webhook_outbox_event"),
    )

    # The stable id a receiver deduplicates on (the ``webhook-id`` header): from the event.
    id: str = Field(primary_key=True, max_length=100)
    principal: str = Field(max_length=200)
    run_ref: str = Field(foreign_key="bridge_outer_responses.ref", max_length=64)
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    kind: str = Field(max_length=32)  # the attention kind (input_waiting, lost_task, ...)
    created_at_ms: int = Field(sa_column=_ms())
    attempts: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # NULL once settled (delivered or given up): the one column the deliverer's query scans.
    next_attempt_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    delivered_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    failed_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))
    last_error: str | None = Field(default=None, max_length=500)


class WebhookDeliverer(SQLModel, table=True):
    """Who delivers the webhook outbox: one replica incarnation per ledger at a time, held as
    task and run rows are (lease owner and incarnation; no tenant data)."""

    __tablename__ = "bridge_webhook_deliverer"

    name: str = Field(primary_key=True, max_length=32)
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_incarnation: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class LedgerJob(SQLModel, table=True):
    """A ledger-wide job only one process runs at a time (the scheduled pruner): whoever holds
    the unexpired lease runs it (infrastructure, not tenant data). Migration 0013."""

    __tablename__ = "bridge_ledger_jobs"

    name: str = Field(primary_key=True, max_length=100)
    holder: str | None = Field(default=None, max_length=200)
    expires_at_ms: int = Field(sa_column=_ms())
    last_done_at_ms: int | None = Field(default=None, sa_column=_ms(nullable=True))


ALL_TABLES = (
    OuterResponse,
    DispatchIntent,
    InnerTask,
    InputRequestRow,
    CallRound,
    AgentState,
    GatewayHandle,
    EventRecord,
    Replica,
    WebhookOutbox,
    WebhookDeliverer,
    LedgerJob,
)
