"""A read-only view of one principal's records: of a running bridge's ledger
(:meth:`bridge.Bridge.read`), or of a ledger opened alone, without a bridge (which would recover,
poll and send), unmigrated. It has no write method."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bridge import events as ev
from bridge._ledger.reads.views import CallInputView, CallView, InputRequestView, RunView, TaskView
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission


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

    def runs(
        self, *, open_only: bool = False, limit: int = 50, response_id: str | None = None
    ) -> list[RunView]:
        """The principal's runs, most recently changed first; ``response_id``: only those
        recorded under that UHP response id (on any UHP server)."""
        reads = self._tenant.reads
        return reads.list_runs(limit=limit, open_only=open_only, response_id=response_id)

    def run(self, run_ref: str) -> RunView:
        """One run (:class:`~bridge.errors.NotFound` for another principal's)."""
        return self._tenant.reads.get_run(run_ref)

    def calls(self, run_ref: str) -> list[CallView]:
        """A run's calls, oldest first, each with the task it became (``task``), read at once."""
        tasks, calls, _ = self._tenant.reads.run_work(run_ref)
        by_ref = {task.ref: task for task in tasks}
        return [replace(call, task=by_ref.get(call.task_ref or "")) for call in calls]

    def operation(self, operation_id: str) -> CallView | None:
        """The call recorded under this operation id, in any run (None: no such call)."""
        return self._tenant.reads.find_dispatch(operation_id)

    def admission(self, call_ref: str) -> Admission | None:
        """The latest admission verdict on a call (``op_…``; None: never checked)."""
        return self._tenant.calls.admission_of(call_ref)

    def tasks(self, run_ref: str | None = None, *, open_only: bool = False) -> list[TaskView]:
        """Task handles (of one run), oldest first; ``open_only``: those still watched."""
        return self._tenant.reads.list_tasks(run_ref=run_ref, open_only=open_only)

    def inputs(self, task_ref: str, *, pending_only: bool = False) -> list[InputRequestView]:
        """A task's input requests, oldest first; ``pending_only``: those not answered."""
        return self._tenant.reads.input_requests(task_ref, pending_only=pending_only)

    def pending_inputs(self) -> list[InputRequestView | CallInputView]:
        """Unanswered input requests: of open tasks, then of calls waiting before any task."""
        tenant = self._tenant
        tasks: list[InputRequestView | CallInputView] = [*tenant.reads.pending_input_requests()]
        return tasks + tenant.rounds.pending_call_inputs()

    def run_work(self, run_ref: str) -> tuple[list[TaskView], list[CallView], int]:
        """A run's tasks and calls (oldest first) and how many of its tasks' input requests are
        unanswered, read together (one snapshot, so the three agree)."""
        return self._tenant.reads.run_work(run_ref)

    def events(self, run_ref: str, *, after_seq: int = 0) -> list[ev.BridgeEvent]:
        """A run's events after ``after_seq``, in order."""
        return self._tenant.reads.events(run_ref, after_seq=after_seq)
