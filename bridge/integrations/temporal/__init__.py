"""Temporal integration (extra ``uhp-mcp-bridge[temporal]``): a nested MCP task as a durable
object inside a Temporal workflow.

* :func:`call_tool` — in workflow code: one bridged call, awaited until its task settles. The
  handle (bridge references, never the raw task id) is in workflow history before anything
  waits on it; an input the task asks for waits for the ``bridge.answer`` update, whose
  validator checks the answer against the request's schema, or for an answer given through
  the bridge (API, CLI, console), and so does an input the server asks before creating any
  task (MRTR), after which the call is sent again with the answer; cancelling the workflow
  sends ``tasks/cancel`` only with ``on_cancel=OnWorkflowCancel.CANCEL_TASK``.
* :class:`BridgeActivities` — in the worker: the activities, on one open bridge.
* :class:`ToolOutcome` (``kind``: completed, failed, cancelled, lost, unknown_outcome),
  :class:`InputAnswer` (the update's argument), :class:`PendingInput` (the
  ``bridge.pending_inputs`` query), :class:`CallOptions`, :class:`OnWorkflowCancel`.

Import it in a workflow module inside ``workflow.unsafe.imports_passed_through()``. See
``docs/guides/frameworks/temporal.md``.
"""

from bridge._extras import require_extra

require_extra("bridge.integrations.temporal", "temporal")

from bridge.integrations.temporal._activities import BridgeActivities
from bridge.integrations.temporal._values import (
    ANSWER_UPDATE,
    PENDING_INPUTS_QUERY,
    CallOptions,
    InputAnswer,
    OnWorkflowCancel,
    OutcomeKind,
    PendingInput,
    ToolOutcome,
)
from bridge.integrations.temporal._workflow import call_tool

__all__ = [
    "ANSWER_UPDATE",
    "PENDING_INPUTS_QUERY",
    "BridgeActivities",
    "CallOptions",
    "InputAnswer",
    "OnWorkflowCancel",
    "OutcomeKind",
    "PendingInput",
    "ToolOutcome",
    "call_tool",
]
