"""LangGraph / LangChain: MCP tools through the bridge, parked with ``interrupt()``, and a
checkpointer beside the run (``uhp-mcp-bridge[langgraph]``; guide:
``docs/guides/frameworks/langgraph.md``).

* :func:`bridge_tools` — the server's tools (listed through the bridge) as LangChain tools for a
  ``ToolNode``; each call is ``Run.call_tool`` with ``operation_id = <run ref>:<tool call
  id>``. ``wait`` blocks the node; a detached task or a question from the server parks the graph
  with ``interrupt(ParkedTask | AskedInput)``.
* :func:`when_settled` / :func:`answer` — build the ``Command(resume=…)`` that goes on.
* :class:`BridgeCheckpointer` — the graph's checkpoints in the bridge ledger.
"""

from bridge._extras import require_extra

require_extra("bridge.integrations.langgraph", "langgraph")

from bridge.integrations.langgraph._checkpointer import BridgeCheckpointer
from bridge.integrations.langgraph._payloads import (
    ASKED_INPUT,
    PARKED_TASK,
    AskedInput,
    InputAnswer,
    ParkedTask,
    answer,
    tool_message,
)
from bridge.integrations.langgraph._resume import bridge_interrupts, when_settled
from bridge.integrations.langgraph._tools import (
    RUN_REF_KEY,
    bridge_tools,
    bridged_tool,
    current_run_ref,
    graph_config,
    run_ref_of,
)

__all__ = [
    "ASKED_INPUT",
    "PARKED_TASK",
    "RUN_REF_KEY",
    "AskedInput",
    "BridgeCheckpointer",
    "InputAnswer",
    "ParkedTask",
    "answer",
    "bridge_interrupts",
    "bridge_tools",
    "bridged_tool",
    "current_run_ref",
    "graph_config",
    "run_ref_of",
    "tool_message",
    "when_settled",
]
