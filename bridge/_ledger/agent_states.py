"""Agent state kept beside a run: whatever an agent framework must reload to resume the run
after a crash (its message history, which of its tool calls became which task, a serialised
run state). The bridge never reads inside it; it only scopes it to the run's principal, bounds
its size, and versions it (compare-and-set) so a stale writer cannot overwrite a newer state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, insert, select, update

from bridge._errors import AgentStateTooLarge, BridgeError, InvalidTransition
from bridge._ledger.reads.queries import WriteScope
from bridge._ledger.schema.models import AgentState
from bridge._redaction import is_credential_name

AGENT_STATES = cast(Table, AgentState.__table__)  # type: ignore[attr-defined]

MAX_AGENT_STATE_BYTES = 4 * 1024 * 1024  # a message history, not a blob store


@dataclass(frozen=True, slots=True)
class AgentStateView:
    """An agent framework's saved state beside a run (``Run.save_agent_state``): the JSON
    value, its version (bumped on every save) and when it was saved."""

    run_ref: str
    name: str
    state: Any  # the JSON value saved
    version: int
    updated_at_ms: int


class AgentStateWrites(WriteScope):
    """Save and load agent state per (run, name)."""

    def save_agent_state(
        self, run_ref: str, name: str, state: Any, *, expected_version: int | None = None
    ) -> int:
        """Store ``state`` (any JSON value) as the agent state ``name`` of ``run_ref``; returns
        its new version. ``expected_version``: the version this writer loaded (``0``: none
        saved yet); a different current version raises :class:`InvalidTransition` and writes
        nothing. ``None`` overwrites whatever is there."""
        encoded = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
        if len(encoded.encode()) > MAX_AGENT_STATE_BYTES:
            raise AgentStateTooLarge(
                f"agent state {name!r} is over {MAX_AGENT_STATE_BYTES} bytes serialised"
            )
        _refuse_credentials(state, name)
        with self._write() as tx:
            self._run_row(tx.conn, run_ref)  # the run is this principal's, or NotFound
            current = tx.conn.execute(
                select(AGENT_STATES.c.version).where(
                    self._owned(AGENT_STATES),
                    AGENT_STATES.c.run_ref == run_ref,
                    AGENT_STATES.c.name == name,
                )
            ).scalar_one_or_none()
            have = int(current) if current is not None else 0
            if expected_version is not None and expected_version != have:
                raise InvalidTransition(
                    f"agent state {name!r} of {run_ref!r} is at version {have}, "
                    f"not {expected_version}: reload it before saving"
                )
            values = {"state_json": encoded, "version": have + 1, "updated_at_ms": self.now}
            if current is None:
                tx.conn.execute(
                    insert(AGENT_STATES).values(
                        principal=self.principal, run_ref=run_ref, name=name, **values
                    )
                )
            else:
                tx.conn.execute(
                    update(AGENT_STATES)
                    .where(
                        self._owned(AGENT_STATES),
                        AGENT_STATES.c.run_ref == run_ref,
                        AGENT_STATES.c.name == name,
                        AGENT_STATES.c.version == have,
                    )
                    .values(**values)
                )
        return have + 1

    def agent_state(self, run_ref: str, name: str) -> AgentStateView | None:
        """The agent state ``name`` of ``run_ref`` (``None``: never saved)."""
        with self._read() as conn:
            self._run_row(conn, run_ref)
            row = conn.execute(
                select(AGENT_STATES).where(
                    self._owned(AGENT_STATES),
                    AGENT_STATES.c.run_ref == run_ref,
                    AGENT_STATES.c.name == name,
                )
            ).first()
        if row is None:
            return None
        return AgentStateView(
            run_ref=row.run_ref,
            name=row.name,
            state=json.loads(row.state_json),
            version=int(row.version),
            updated_at_ms=int(row.updated_at_ms),
        )


def _refuse_credentials(value: Any, name: str, depth: int = 0) -> None:
    # The ledger never stores bearer tokens: a state carrying a credential-named field is a
    # mistake of the integration, refused before anything is written.
    if depth > 64:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and is_credential_name(key) and item:
                raise BridgeError(
                    f"agent state {name!r} carries a credential-like field {key!r}: not stored"
                )
            _refuse_credentials(item, name, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _refuse_credentials(item, name, depth + 1)
