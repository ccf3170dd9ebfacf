"""Agent state beside a run: versioned, bounded, principal-scoped, never a credential store."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge import Bridge, BridgeSettings
from bridge._errors import AgentStateTooLarge, BridgeError, InvalidTransition, NotFound
from bridge._ledger.agent_states import MAX_AGENT_STATE_BYTES
from bridge._ledger.store import Ledger
from tests.support.builders import new_run


def test_save_load_and_versions(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    assert tenant.agent_states.agent_state(run.ref, "pydantic-ai") is None
    assert (
        tenant.agent_states.save_agent_state(
            run.ref, "pydantic-ai", {"messages": [1]}, expected_version=0
        )
        == 1
    )
    assert tenant.agent_states.save_agent_state(run.ref, "pydantic-ai", {"messages": [1, 2]}) == 2
    saved = tenant.agent_states.agent_state(run.ref, "pydantic-ai")
    assert saved is not None
    assert (saved.state, saved.version, saved.name) == ({"messages": [1, 2]}, 2, "pydantic-ai")
    # Another name beside the same run is a state of its own.
    assert tenant.agent_states.save_agent_state(run.ref, "langgraph", ["x"]) == 1


def test_a_stale_writer_is_refused_and_nothing_changes(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    tenant.agent_states.save_agent_state(run.ref, "agent", {"turn": 1})
    tenant.agent_states.save_agent_state(run.ref, "agent", {"turn": 2}, expected_version=1)
    with pytest.raises(InvalidTransition):
        tenant.agent_states.save_agent_state(
            run.ref, "agent", {"turn": "stale"}, expected_version=1
        )
    with pytest.raises(InvalidTransition):  # "nothing saved yet" is a claim checked too
        tenant.agent_states.save_agent_state(run.ref, "agent", {"turn": "new"}, expected_version=0)
    saved = tenant.agent_states.agent_state(run.ref, "agent")
    assert saved is not None and saved.state == {"turn": 2} and saved.version == 2


def test_oversized_and_credential_states_are_refused(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    with pytest.raises(AgentStateTooLarge):
        tenant.agent_states.save_agent_state(run.ref, "agent", "x" * (MAX_AGENT_STATE_BYTES + 1))
    with pytest.raises(BridgeError, match="credential"):
        tenant.agent_states.save_agent_state(
            run.ref, "agent", {"deps": {"Authorization": "Bearer s3cret"}}
        )
    assert tenant.agent_states.agent_state(run.ref, "agent") is None
    # An empty credential-named field carries nothing and is allowed.
    assert tenant.agent_states.save_agent_state(run.ref, "agent", {"token": None}) == 1


def test_another_principal_neither_reads_nor_writes(ledger: Ledger) -> None:
    run = new_run(ledger.for_principal("acme"))
    ledger.for_principal("acme").agent_states.save_agent_state(run.ref, "agent", {"secret_plan": 1})
    mallory = ledger.for_principal("mallory")
    with pytest.raises(NotFound):
        mallory.agent_states.agent_state(run.ref, "agent")
    with pytest.raises(NotFound):
        mallory.agent_states.save_agent_state(run.ref, "agent", {})


@pytest.mark.anyio
async def test_the_bridge_keeps_it_across_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    async with Bridge.open(BridgeSettings(ledger_url=db, principals=["acme"])) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_1", session_id=None, harness_id=None
        )
        version = await run.save_agent_state("agent", {"parked": {"c1": "tk"}})
        with pytest.raises(BridgeError):
            await bridge.run("mallory", run.ref).save_agent_state("agent", {})
    async with Bridge.open(BridgeSettings(ledger_url=db, principals=["acme"])) as bridge:
        saved = await bridge.run("acme", run.ref).agent_state("agent")
        assert saved is not None and saved.version == version
        assert saved.state == {"parked": {"c1": "tk"}}
