"""The bridge this process's DBOS workflows call through.

DBOS steps are plain module functions that DBOS may re-run in any process of the application
(recovery after a crash): they cannot carry an open bridge as an argument, so each process
attaches its own, once, before ``DBOS.launch()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge._errors import BridgeError
from bridge._facade import Bridge
from bridge._ledger.reads.views import TaskView
from bridge._mcp.polling.handle_resumption import HostPoll
from bridge._mcp.polling.watches import SchedulerConfig
from bridge._run import Run


@dataclass(frozen=True, slots=True)
class Attached:
    """This process's bridge and the principal its workflows act for."""

    bridge: Bridge
    principal: str

    def run(self, run_ref: str) -> Run:
        return self.bridge.run(self.principal, run_ref)

    async def poll(self, task_ref: str, carried: HostPoll) -> tuple[TaskView, HostPoll]:
        """One ``tasks/get`` of a handle the workflow holds (:meth:`Run.poll`, with what the
        workflow's previous poll step carried: failures for the backoff, a cancel sent)."""
        requester = self.bridge._services.requester
        return await requester.poll_now(self.principal, task_ref, carried)

    @property
    def pacing(self) -> SchedulerConfig:
        """The poll floor, default interval and optional ceiling the bridge was opened with."""
        return self.bridge.settings.scheduler or SchedulerConfig()


_current: Attached | None = None


def attach(bridge: Bridge, principal: str) -> None:
    """Make ``bridge`` the one this process's workflows call through, for ``principal``.

    Open the bridge with ``recover_on_start=False``: DBOS recovery resumes the workflows, and
    each resumed workflow takes its own handles back one poll at a time (a bridge recovering
    on its own would poll them a second time, and settle other live workers' calls)."""
    global _current
    if principal not in bridge.principals:
        raise BridgeError(f"principal {principal!r} is not in this bridge's scope")
    _current = Attached(bridge, principal)


def attached() -> Attached:
    """The attached bridge; :class:`~bridge.errors.BridgeError` when none is."""
    if _current is None:
        raise BridgeError(
            "no bridge attached in this process: call bridge.integrations.dbos.attach(bridge, "
            "principal) before DBOS.launch()"
        )
    return _current
