"""Agent state beside a run, for framework integrations (:mod:`bridge.integrations`): the
part of :class:`~bridge.facade.Bridge` that saves and loads it, scoped to one principal."""

from __future__ import annotations

from typing import Any

from bridge.errors import BridgeError
from bridge.ledger.agent_states import AgentStateView
from bridge.ledger.runner import LedgerRunner
from bridge.ledger.store import Ledger


class AgentStates:
    """Set up by :class:`~bridge.facade.Bridge`'s constructor."""

    ledger: Ledger
    principals: tuple[str, ...]
    _db: LedgerRunner

    async def _save_agent_state(
        self,
        principal: str,
        run_ref: str,
        name: str,
        state: Any,
        *,
        expected_version: int | None = None,
    ) -> int:
        """Durably store ``state`` (a JSON value: message history, tool-call ↔ task-ref map,
        a serialised run state) as ``name`` beside the run; returns the new version.

        ``expected_version`` is the version you loaded (``0`` when there was none): if another
        writer saved since, :class:`~bridge.errors.InvalidTransition` is raised and nothing is
        written. States over 4 MiB (:class:`AgentStateTooLarge`) or carrying a credential-named
        field are refused: the ledger never stores bearer tokens.
        """
        self._check_scope(principal)
        tenant = self.ledger.for_principal(principal)
        version: int = await self._db(
            tenant.save_agent_state, run_ref, name, state, expected_version=expected_version
        )
        return version

    async def _agent_state(self, principal: str, run_ref: str, name: str) -> AgentStateView | None:
        """The state saved as ``name`` beside the run (``None``: never saved)."""
        self._check_scope(principal)
        view: AgentStateView | None = await self._db(
            self.ledger.for_principal(principal).agent_state, run_ref, name
        )
        return view

    def _check_scope(self, principal: str) -> None:
        if principal not in self.principals:
            raise BridgeError(f"principal {principal!r} is not in this bridge's scope")
