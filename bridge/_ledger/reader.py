"""A read-only view of one principal's records: for reading a ledger (a crashed process's, or
one a running bridge writes) without opening a :class:`~bridge.Bridge`, which would recover,
poll and send. It has no write method; it opens the ledger without migrating it."""

from __future__ import annotations

from pathlib import Path

from bridge import events as ev
from bridge._ledger.reads.views import CallInputView, CallView, InputRequestView, RunView, TaskView
from bridge._ledger.store import Ledger, TenantLedger


class LedgerReader:
    """One principal's runs, calls, tasks, input requests and events, as recorded; nothing
    here recovers, polls, sends or writes.

        with LedgerReader.open("bridge-ledger.db", "acme") as reader:
            for run in reader.runs(open_only=True): ...
    """

    __slots__ = ("_ledger", "_owns", "_tenant")

    def __init__(self, ledger: Ledger, principal: str, *, owns_ledger: bool = False) -> None:
        self._ledger = ledger
        self._tenant: TenantLedger = ledger.for_principal(principal)
        self._owns = owns_ledger

    @classmethod
    def open(cls, url: str | Path, principal: str) -> LedgerReader:
        """Open the ledger at ``url`` as it is (no migration); close it with :meth:`close` or
        ``with``. Raises :class:`~bridge.errors.LedgerUnavailable` when it cannot be opened."""
        return cls(Ledger.open(url, upgrade=False), principal, owns_ledger=True)

    def close(self) -> None:
        """Close the ledger, when this reader opened it."""
        if self._owns:
            self._ledger.close()

    def __enter__(self) -> LedgerReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def runs(self, *, open_only: bool = False, limit: int = 50) -> list[RunView]:
        """The principal's runs, most recently changed first."""
        return self._tenant.reads.list_runs(limit=limit, open_only=open_only)

    def run(self, run_ref: str) -> RunView:
        """One run (:class:`~bridge.errors.NotFound` for another principal's)."""
        return self._tenant.reads.get_run(run_ref)

    def calls(self, run_ref: str) -> list[CallView]:
        """A run's calls, oldest first."""
        return self._tenant.reads.list_dispatches(run_ref=run_ref)

    def tasks(self, run_ref: str | None = None, *, open_only: bool = False) -> list[TaskView]:
        """Task handles (of one run), oldest first; ``open_only``: those still watched."""
        return self._tenant.reads.list_tasks(run_ref=run_ref, open_only=open_only)

    def pending_inputs(self) -> list[InputRequestView | CallInputView]:
        """Unanswered input requests: of open tasks, then of calls waiting before any task."""
        tenant = self._tenant
        tasks: list[InputRequestView | CallInputView] = [*tenant.reads.pending_input_requests()]
        return tasks + tenant.rounds.pending_call_inputs()

    def events(self, run_ref: str, *, after_seq: int = 0) -> list[ev.BridgeEvent]:
        """A run's events after ``after_seq``, in order."""
        return self._tenant.reads.events(run_ref, after_seq=after_seq)
