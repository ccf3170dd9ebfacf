"""Typed errors raised by the bridge. Messages never include raw task ids or credentials."""

from __future__ import annotations


class BridgeError(Exception):
    """Base class of every error the bridge raises on purpose."""


class LedgerError(BridgeError):
    """A ledger operation was refused; nothing was written."""


class NotFound(LedgerError):
    """No record with that reference exists *for this principal* (other tenants are invisible)."""

    def __init__(self, kind: str, ref: str) -> None:
        super().__init__(f"{kind} {ref!r} not found for this principal")
        self.kind = kind
        self.ref = ref


class InvalidTransition(LedgerError):
    """A write asked for a state change its state machine forbids."""


class ConflictingIds(LedgerError):
    """An outer response already carries different UHP ids than the ones offered."""


class OperationReused(LedgerError):
    """An operation id was reused for a different tool call (other tool or other arguments)."""


class DuplicateTaskHandle(LedgerError):
    """The server returned a task id the ledger already holds for another call.

    The reference in the message is the bridge-local one; the raw id is never echoed.
    """


class UnknownInputKey(LedgerError):
    """An answer names an input request key the task never asked for."""


class InputAlreadyAnswered(LedgerError):
    """An input request key was answered before; keys are answered at most once."""


class McpSideError(BridgeError):
    """An error on the MCP side of the bridge."""


class UnknownServer(McpSideError):
    """No MCP server with that name (or endpoint) is configured and enabled."""


class ServerUnreachable(McpSideError):
    """The MCP server could not be reached; nothing was sent."""

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"MCP server {server!r} unreachable: {detail}")
        self.server = server
        self.detail = detail


class InvalidTaskResponse(McpSideError):
    """The server answered with something the protocol forbids (for example a task result on a
    request that did not declare the tasks capability, or a malformed task). The dispatch is
    recorded as an unknown outcome and an anomaly event is written; nothing counts as success."""

    def __init__(self, op_ref: str, detail: str) -> None:
        super().__init__(f"dispatch {op_ref}: {detail}")
        self.op_ref = op_ref
        self.detail = detail


class TaskRequestFailed(McpSideError):
    """A ``tasks/get|update|cancel`` request failed (JSON-RPC error or transport failure)."""

    def __init__(self, task_ref: str, detail: str, code: int | None = None) -> None:
        super().__init__(f"task {task_ref}: {detail}")
        self.task_ref = task_ref
        self.detail = detail
        self.code = code


class LeaseLost(LedgerError):
    """A leased write was refused: the row is no longer held by this replica incarnation.

    Another replica took it over (this one's membership lapsed) or it was released; the
    observation this replica was about to write may be stale, so it is dropped, not written.
    """

    def __init__(self, kind: str, ref: str) -> None:
        super().__init__(f"{kind} {ref!r} is no longer leased to this replica")
        self.kind = kind
        self.ref = ref
