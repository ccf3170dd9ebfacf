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
