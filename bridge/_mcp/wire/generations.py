"""Which task protocol a server speaks, chosen per server from what it negotiated.

Two generations of MCP tasks are not wire-compatible (SEP-2663, "Backward compatibility"):

- the **Tasks extension** (``io.modelcontextprotocol/tasks``, protocol 2026-07-28): a server
  may answer any ``tools/call`` with a task; ``tasks/get`` carries the result; answers go in
  ``tasks/update``;
- the **experimental tasks of 2025-11-25** (core protocol, negotiated in ``initialize``): the
  client asks for a task per call with ``params.task``, only on tools whose
  ``execution.taskSupport`` allows it; ``tasks/get`` reports status only and ``tasks/result``
  returns the result.

The generation a handle was created under is recorded with it (``task_generation``), so a
restarted bridge polls it with the same methods whatever the server negotiates by then.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import mcp_types

from bridge._ledger.reads.views import TaskView

EXPERIMENTAL_TASKS_VERSION = "2025-11-25"


class TaskGeneration(StrEnum):
    EXTENSION = "io.modelcontextprotocol/tasks"  # stored as NULL (every row before it existed)
    EXPERIMENTAL_2025_11_25 = EXPERIMENTAL_TASKS_VERSION


def negotiated_generation(session: Any) -> TaskGeneration:
    """The generation to speak with a connected SDK session.

    2025-11-25 only when the server negotiated exactly that revision in ``initialize`` *and*
    declared ``capabilities.tasks.requests.tools.call`` (the spec: without it, a client MUST NOT
    augment any call); everything else is the extension (a server without tasks then simply
    answers every call with a result).
    """
    if session.initialize_result is None or session.protocol_version != EXPERIMENTAL_TASKS_VERSION:
        return TaskGeneration.EXTENSION
    capabilities: mcp_types.ServerCapabilities | None = session.server_capabilities
    tasks = capabilities.tasks if capabilities is not None else None
    requests = tasks.requests if tasks is not None else None
    tools = requests.tools if requests is not None else None
    if tools is None or tools.call is None:
        return TaskGeneration.EXTENSION
    return TaskGeneration.EXPERIMENTAL_2025_11_25


def stored_generation(generation: TaskGeneration) -> str | None:
    """The ledger's ``task_generation`` value (NULL keeps meaning the extension)."""
    return None if generation is TaskGeneration.EXTENSION else generation.value


def generation_of(task: TaskView) -> TaskGeneration:
    if task.task_generation is None:
        return TaskGeneration.EXTENSION
    return TaskGeneration(task.task_generation)
