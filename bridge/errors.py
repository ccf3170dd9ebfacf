"""Every error the bridge raises on purpose, all under :class:`BridgeError`; the tree is drawn
in ``bridge/_errors.py`` (the UHP client's errors live in :mod:`bridge.uhp`)::

    from bridge.errors import BridgeError, InvalidAnswer, WaitTimedOut

Messages never include raw task ids or credentials.
"""

from __future__ import annotations

from bridge._errors import (
    AgentStateTooLarge,
    AnswerRefused,
    BridgeError,
    ConflictingIds,
    DuplicateTaskHandle,
    InputAlreadyAnswered,
    InvalidAnswer,
    InvalidTaskResponse,
    InvalidTransition,
    LeaseLost,
    LedgerError,
    LedgerUnavailable,
    MalformedTaskHandle,
    McpSideError,
    MissingExtra,
    NotFound,
    NoToolResult,
    OperationReused,
    ServerConnectFailed,
    ServerCredentialsRejected,
    ServerNotReachable,
    ServerTlsFailed,
    TaskRequestFailed,
    UnknownInputKey,
    UnknownServer,
    WaitTimedOut,
)
from bridge._public import publish

__all__ = [  # noqa: RUF022 -- grouped by what a caller is doing, not sorted
    # The base: everything the bridge raises on purpose.
    "BridgeError",
    "MissingExtra",
    # Answers to input requests.
    "InvalidAnswer",
    "AnswerRefused",
    "InputAlreadyAnswered",
    "UnknownInputKey",
    # Reading and waiting.
    "NotFound",
    "NoToolResult",
    "WaitTimedOut",
    # The ledger refused a write (nothing was written).
    "LedgerError",
    "InvalidTransition",
    "ConflictingIds",
    "OperationReused",
    "DuplicateTaskHandle",
    "LeaseLost",
    "LedgerUnavailable",
    "AgentStateTooLarge",
    # The MCP side.
    "McpSideError",
    "UnknownServer",
    "ServerConnectFailed",
    "ServerNotReachable",
    "ServerCredentialsRejected",
    "ServerTlsFailed",
    "InvalidTaskResponse",
    "MalformedTaskHandle",
    "TaskRequestFailed",
]

for _name in __all__:
    publish(globals()[_name], __name__)
