"""Agent-framework integrations: bridged tool calls inside the frameworks people already run.

Each integration is a subpackage that imports its framework at top level, so it is loaded
only when you import it (``import bridge`` and ``import bridge.integrations`` load none of
them). Install the matching extra, e.g. ``uhp-mcp-bridge[pydantic-ai]``:

* :mod:`bridge.integrations.pydantic_ai` — ``BridgedToolset`` and ``BridgedRun``.
* :mod:`bridge.integrations.openai_agents` — ``BridgedMCPServer`` and ``run_to_completion``.
* :mod:`bridge.integrations.langgraph` — ``bridge_tools``, ``when_settled`` and
  ``BridgeCheckpointer``.
* :mod:`bridge.integrations.dbos` — ``attach`` and ``call_tool``: a bridged call inside a DBOS
  workflow (extra ``uhp-mcp-bridge[dbos]``).
* :mod:`bridge.integrations.temporal` — ``call_tool`` (workflow side) and
  ``BridgeActivities`` (worker side).
"""
