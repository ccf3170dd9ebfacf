"""Immutable snapshots the ledger hands out. Callers never hold live ORM rows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Literal

from bridge._lifecycle import CallState, LostReason, OuterStatus, TaskStatus

_FROM_ROW: Any = object()


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _fields_of(row: Any) -> dict[str, Any]:
    """A row's columns as a plain dict (a SQLAlchemy ``Row`` or a namespace)."""
    names = getattr(row, "_fields", None)
    if names is not None:
        return dict(zip(names, row, strict=True))
    return dict(vars(row))


@dataclass(frozen=True, slots=True)
class RunView:
    """One run (an outer UHP response) as a snapshot: its ids, status, stream position and event
    count."""

    ref: str
    principal: str
    uhp_server: str
    response_id: str | None
    session_id: str | None
    harness_id: str | None
    status: OuterStatus | None
    error: Any
    last_sequence: int | None
    idempotency_key: str | None
    event_count: int
    trace_id: str | None
    span_id: str | None
    created_at_ms: int
    updated_at_ms: int

    @classmethod
    def from_row(cls, row: Any) -> RunView:
        return cls(
            ref=row.ref,
            principal=row.principal,
            uhp_server=row.uhp_server,
            response_id=row.response_id,
            session_id=row.session_id,
            harness_id=row.harness_id,
            status=OuterStatus(row.status) if row.status is not None else None,
            error=_loads(row.error_json),
            last_sequence=row.last_sequence,
            idempotency_key=row.idempotency_key,
            event_count=row.event_seq,
            trace_id=row.trace_id,
            span_id=row.span_id,
            created_at_ms=row.created_at_ms,
            updated_at_ms=row.updated_at_ms,
        )

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> RunView:
        """A view from the row's columns by name."""
        return cls.from_row(SimpleNamespace(**columns))

    @property
    def is_terminal(self) -> bool:
        """Whether the outer response has ended."""
        return self.status is not None and self.status.is_terminal


@dataclass(frozen=True, slots=True)
class CallView:
    """One recorded ``tools/call`` (a call), as a snapshot: its operation id, server, tool,
    argument digest, state and outcome; ``task``, the task it became, when read with it
    (:meth:`bridge.Run.operation`). Admission checks are asked about one too."""

    ref: str
    principal: str
    run_ref: str
    operation_id: str  # the caller's idempotency key (the call's reference when none was given)
    server_endpoint: str
    server_name: str | None
    tool_name: str
    args_digest: str  # SHA-256 of the canonical JSON arguments
    state: CallState
    unknown_reason: str | None
    result: Any
    result_truncated: bool
    task_ref: str | None
    trace_id: str | None
    span_id: str | None
    created_at_ms: int  # when the intent was committed, immediately before the request left
    updated_at_ms: int
    task: TaskView | None = None

    @property
    def op_ref(self) -> str:
        """The call's reference (``op_…``)."""
        return self.ref

    @property
    def server(self) -> str:
        """The configured server name (its endpoint when the call named none)."""
        return self.server_name or self.server_endpoint

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self.tool_name

    @classmethod
    def from_row(cls, row: Any, *, result: Any = _FROM_ROW) -> CallView:
        """A view of a dispatch row; ``result`` spares re-parsing a result already in hand."""
        return cls(
            ref=row.ref,
            principal=row.principal,
            run_ref=row.run_ref,
            operation_id=row.operation_id,
            server_endpoint=row.server_endpoint,
            server_name=row.server_name,
            tool_name=row.tool_name,
            args_digest=row.args_digest,
            state=CallState(row.state),
            unknown_reason=row.unknown_reason,
            result=_loads(row.result_json) if result is _FROM_ROW else result,
            result_truncated=row.result_truncated,
            task_ref=row.task_ref,
            trace_id=row.trace_id,
            span_id=row.span_id,
            created_at_ms=row.created_at_ms,
            updated_at_ms=row.updated_at_ms,
        )

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> CallView:
        """A view from the row's columns by name (as Core converts them)."""
        return cls.from_row(SimpleNamespace(**columns))

    def with_result(self, result: Any, truncated: bool, updated_at_ms: int) -> CallView:
        """This dispatch as it reads once settled with ``result`` (state ``result``)."""
        return replace(
            self,
            state=CallState.RESULT,
            result=result,
            result_truncated=truncated,
            updated_at_ms=updated_at_ms,
        )


@dataclass(frozen=True, slots=True)
class TaskView:
    """One task handle as a snapshot: the run and call it belongs to, its server, status, timings
    and outcome (the raw ``taskId`` is never part of it)."""

    ref: str
    principal: str
    run_ref: str
    op_ref: str
    response_id: str | None
    session_id: str | None
    server_endpoint: str
    server_name: str | None
    server_version: str | None
    credential_ref: str | None
    tool_name: str
    args_digest: str
    # The raw MCP taskId: needed to poll, never printed (repr=False) and never put in events.
    task_id: str = field(repr=False)
    status: TaskStatus
    status_message: str | None
    lost_reason: LostReason | None
    lost_detail: str | None
    server_created_at: str | None
    server_updated_at: str | None
    ttl_ms: int | None
    poll_interval_ms: int | None
    next_poll_due_ms: int | None
    result: Any
    error: Any
    outcome_truncated: bool
    outcome_bytes: int | None
    cancel_requested_at_ms: int | None
    detached_at_ms: int | None
    terminal_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    # NULL: the Tasks extension; "2025-11-25": the core experimental tasks of that revision.
    task_generation: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> TaskView:
        return cls._from_columns(_fields_of(row))

    @classmethod
    def from_rows(cls, rows: Sequence[Any]) -> list[TaskView]:
        """Many rows of one result. Reading ~30 attributes off each SQLAlchemy ``Row`` costs
        ~30 µs a row; taking the column names once and zipping costs ~2 µs, which matters when
        a restart or a claim turns 10,000 rows into views."""
        if not rows:
            return []
        names = rows[0]._fields
        return [cls._from_columns(dict(zip(names, row, strict=True))) for row in rows]

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> TaskView:
        """A view from the row's columns by name (as Core converts them)."""
        return cls._from_columns(columns)

    @classmethod
    def _from_columns(cls, c: dict[str, Any]) -> TaskView:
        lost_reason = c["lost_reason"]
        return cls(
            ref=c["ref"],
            principal=c["principal"],
            run_ref=c["run_ref"],
            op_ref=c["op_ref"],
            response_id=c["response_id"],
            session_id=c["session_id"],
            server_endpoint=c["server_endpoint"],
            server_name=c["server_name"],
            server_version=c["server_version"],
            credential_ref=c["credential_ref"],
            tool_name=c["tool_name"],
            args_digest=c["args_digest"],
            task_id=c["task_id"],
            status=TaskStatus(c["status"]),
            status_message=c["status_message"],
            lost_reason=LostReason(lost_reason) if lost_reason else None,
            lost_detail=c["lost_detail"],
            server_created_at=c["server_created_at"],
            server_updated_at=c["server_updated_at"],
            ttl_ms=c["ttl_ms"],
            poll_interval_ms=c["poll_interval_ms"],
            next_poll_due_ms=c["next_poll_due_ms"],
            result=_loads(c["result_json"]),
            error=_loads(c["error_json"]),
            outcome_truncated=c["outcome_truncated"],
            outcome_bytes=c["outcome_bytes"],
            cancel_requested_at_ms=c["cancel_requested_at_ms"],
            detached_at_ms=c["detached_at_ms"],
            terminal_at_ms=c["terminal_at_ms"],
            created_at_ms=c["created_at_ms"],
            updated_at_ms=c["updated_at_ms"],
            task_generation=c["task_generation"],
        )

    @property
    def is_open(self) -> bool:
        """Still watched: no stored terminal outcome, no lost verdict, not detached."""
        return self.terminal_at_ms is None and self.lost_reason is None and not self.detached_at_ms

    @property
    def server_label(self) -> str:
        """The configured server name, else its endpoint."""
        return self.server_name or self.server_endpoint


@dataclass(frozen=True, slots=True)
class InputRequestView:
    """One input request of a task as recorded: its method and parameters, when it was seen,
    surfaced, answered and delivered (the raw key and answer are kept out of ``repr``)."""

    ref: str
    task_ref: str
    key: str = field(repr=False)  # server-minted; may embed the raw task id
    method: str
    params: Any = field(repr=False)  # server text; may quote the raw task id
    payload_digest: str
    first_seen_ms: int
    surfaced_at_ms: int | None
    answered_at_ms: int | None
    delivered_at_ms: int | None
    answer: Any = field(repr=False)  # kept only until delivered; may be sensitive
    declined_at_ms: int | None = None  # declined by the bridge's input policy
    stuck_at_ms: int | None = None  # reported stuck (task.input_stuck)

    @classmethod
    def from_row(cls, row: Any) -> InputRequestView:
        return cls(
            ref=row.ref,
            task_ref=row.task_ref,
            key=row.key,
            method=row.method,
            params=_loads(row.params_json),
            payload_digest=row.payload_digest,
            first_seen_ms=row.first_seen_ms,
            surfaced_at_ms=row.surfaced_at_ms,
            answered_at_ms=row.answered_at_ms,
            delivered_at_ms=row.delivered_at_ms,
            answer=_loads(row.answer_json),
            declined_at_ms=row.declined_at_ms,
            stuck_at_ms=row.stuck_at_ms,
        )


@dataclass(frozen=True, slots=True)
class CallInputView:
    """One input request of one MRTR leg of a call (no task yet)."""

    ref: str
    op_ref: str
    leg: int
    key: str = field(repr=False)  # server-minted
    method: str
    params: Any = field(repr=False)  # server text, shown to the user
    first_seen_ms: int
    answered_at_ms: int | None

    @classmethod
    def from_row(cls, row: Any) -> CallInputView:
        return cls(
            ref=row.ref,
            op_ref=row.op_ref,
            leg=int(row.leg),
            key=row.key,
            method=row.method,
            params=_loads(row.params_json),
            first_seen_ms=row.first_seen_ms,
            answered_at_ms=row.answered_at_ms,
        )


@dataclass(frozen=True, slots=True)
class TaskObservation:
    """What one ``tasks/get`` (or a creation result, or a notification) said about a task."""

    status: TaskStatus
    status_message: str | None = None
    server_updated_at: str | None = None
    poll_interval_ms: int | None = None
    ttl_ms: int | None = None
    result: Any = None  # CallToolResult as a JSON-able dict, when completed
    error: Any = None  # JSON-RPC error object, when failed
    input_requests: dict[str, dict[str, Any]] | None = None  # key -> {method, params}
    next_poll_due_ms: int | None = None  # when to look again, if still open


#: What an attention item is about (stable values: webhooks and dashboards key on them).
AttentionKind = Literal[
    "input_waiting", "input_overdue", "unknown_outcome", "lost_task", "anomaly", "orphaned_run"
]


@dataclass(frozen=True, slots=True)
class AttentionFact:
    """An :class:`bridge.AttentionItem` as recorded, unworded (:mod:`bridge._display` words it):
    ``method``, an input's; ``reason``, ``detail``: an unknown outcome's, a lost task's, an
    anomaly's (its kind)."""

    kind: AttentionKind
    ref: str
    principal: str
    run_ref: str
    response_id: str | None
    since_ms: int
    task_ref: str | None = None
    op_ref: str | None = None
    question: str | None = None
    fields: tuple[str, ...] = ()
    requested_schema: Any = field(default=None, repr=False)  # server text, for a form
    server: str | None = None
    tool: str | None = None
    method: str | None = None
    reason: Any = None
    detail: Any = None


@dataclass(frozen=True, slots=True)
class AttentionItem:
    """One thing that waits for a person (``Bridge.attention``), with what to do next.

    ``ref`` names what to act on: the input request (``in_…``), the call (``op_…``), the lost
    task (``tk_…``), the anomaly (``run_…:<seq>``: its event on that run) or the run
    (``run_…``). ``since_ms``: when it started waiting. ``question`` and ``fields``: what an
    input request asks (its message, and the names of its schema's fields).
    """

    kind: AttentionKind
    ref: str
    principal: str
    run_ref: str
    response_id: str | None
    since_ms: int
    summary: str
    next_step: str
    task_ref: str | None = None
    op_ref: str | None = None
    question: str | None = None
    fields: tuple[str, ...] = ()
    requested_schema: Any = field(default=None, repr=False)  # server text, for a form

    def to_json(self) -> dict[str, Any]:
        """The item as plain JSON values (``bridge attention --json``)."""
        names = self.__dataclass_fields__
        return {**{name: getattr(self, name) for name in names}, "fields": list(self.fields)}
