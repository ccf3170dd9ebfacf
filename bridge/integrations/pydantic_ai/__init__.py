"""pydantic-ai integration (extra ``uhp-mcp-bridge[pydantic-ai]``): MCP tools called through
the bridge from a pydantic-ai agent, with parked calls that survive a restart.

* :class:`BridgedToolset` — lists a server's tools through the bridge and calls them with
  ``operation_id = "<run ref>:<tool call id>"``; ``mode="wait"`` blocks the call until its
  task settles, ``mode="detach"`` parks it with ``CallDeferred``.
* :class:`BridgedRun` — drives the agent run: resumes parked calls with
  ``DeferredToolResults`` when their tasks settle, offers input requests (approvals) to the
  host, and after a crash resumes from the state saved beside the run.

See ``docs/guides/frameworks/pydantic-ai.md``.
"""

from bridge._extras import require_extra

require_extra("bridge.integrations.pydantic_ai", "pydantic-ai")

from bridge.integrations.pydantic_ai._journal import STATE_NAME, CallEntry, RunJournal, SavedRun
from bridge.integrations.pydantic_ai._results import settled_value, tool_return
from bridge.integrations.pydantic_ai._run import BridgedRun, InputAnswerer
from bridge.integrations.pydantic_ai._toolset import BridgedToolset, deferral_metadata, operation_id

__all__ = [
    "STATE_NAME",
    "BridgedRun",
    "BridgedToolset",
    "CallEntry",
    "InputAnswerer",
    "RunJournal",
    "SavedRun",
    "deferral_metadata",
    "operation_id",
    "settled_value",
    "tool_return",
]
