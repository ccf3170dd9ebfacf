"""What a bridged ``tools/call`` returns: exactly one of four explicit outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.ledger.views import TaskView
from bridge.mcp.wire import MISSING_CAPABILITY_CODES


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """The server created a task; the handle is committed to the ledger and being watched."""

    op_ref: str
    task: TaskView
    replayed: bool = False  # the operation id had already reached this outcome

    @property
    def task_ref(self) -> str:
        return self.task.ref


@dataclass(frozen=True, slots=True)
class InlineResult:
    """The server answered with an ordinary ``CallToolResult`` (possibly ``isError``)."""

    op_ref: str
    result: Any
    truncated: bool = False
    replayed: bool = False

    @property
    def is_error(self) -> bool:
        return bool(isinstance(self.result, dict) and self.result.get("isError"))


@dataclass(frozen=True, slots=True)
class RejectedCall:
    """The server answered with a JSON-RPC error: the request itself was refused."""

    op_ref: str
    error: Any
    replayed: bool = False

    @property
    def code(self) -> int | None:
        code = self.error.get("code") if isinstance(self.error, dict) else None
        return code if isinstance(code, int) else None

    @property
    def missing_tasks_capability(self) -> bool:
        """The server can serve this call only as a task (-32021; -32003 in older drafts)."""
        return self.code in MISSING_CAPABILITY_CODES


@dataclass(frozen=True, slots=True)
class UnknownOutcome:
    """The request may have reached the server, but neither a handle nor a result came back.

    An ``call.unknown_outcome`` event was written. Nothing was retried unless the policy allowed
    it for a read-only or idempotent tool (then ``retries`` holds what the retries returned).
    """

    op_ref: str
    reason: str
    retries: tuple[CallOutcome, ...] = ()
    replayed: bool = False


CallOutcome = TaskHandle | InlineResult | RejectedCall | UnknownOutcome
