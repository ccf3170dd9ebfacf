"""The OpenAI Agents SDK on the bridge (extra ``uhp-mcp-bridge[openai-agents]``).

    server = BridgedMCPServer(bridge, "payments")
    agent = Agent(name="clerk", model=..., mcp_servers=[server])
    with bridged_run(run.ref, principal="acme"):
        result = await Runner.run(agent, "pay the invoice")
        # result.interruptions: parked calls -> parked_calls / resume_when_settled

Guide: ``docs/guides/frameworks/openai-agents.md``.
"""

from bridge._extras import require_extra

require_extra("bridge.integrations.openai_agents", "openai-agents")

from bridge.integrations.openai_agents._parking import (
    STATE_NAME,
    ParkedCall,
    load_run_state,
    parked_calls,
    resume_when_settled,
    run_to_completion,
    save_run_state,
)
from bridge.integrations.openai_agents._run import BridgedRun, bridged_run, operation_id
from bridge.integrations.openai_agents._server import (
    CALL_ID_META_KEY,
    BridgedMCPServer,
    model_visible_result,
)

__all__ = [
    "CALL_ID_META_KEY",
    "STATE_NAME",
    "BridgedMCPServer",
    "BridgedRun",
    "ParkedCall",
    "bridged_run",
    "load_run_state",
    "model_visible_result",
    "operation_id",
    "parked_calls",
    "resume_when_settled",
    "run_to_completion",
    "save_run_state",
]
