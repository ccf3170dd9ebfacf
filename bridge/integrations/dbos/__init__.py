"""DBOS integration (extra ``uhp-mcp-bridge[dbos]``): a bridged MCP tool call as a durable
object inside a ``@DBOS.workflow``.

* :func:`attach` — the bridge (and principal) this process's workflows call through; open the
  bridge with ``recover_on_start=False`` and attach it before ``DBOS.launch()``.
* :func:`call_tool` — inside a workflow: the call is sent in one DBOS step (write-ahead in the
  bridge's ledger, operation id ``dbos:<workflow id>:<step id>``); its task is polled at the
  server's ``pollIntervalMs`` in steps that each go on polling until the task's state changes
  (or ``poll_window_s`` passes), with a durable ``DBOS.sleep`` between steps (the backoff
  after a failed poll); the outcome is read back from the ledger once settled.
* :class:`OnWorkflowCancel` — what ``DBOS.cancel_workflow`` does to the task of a call the
  workflow waits for (``call_tool(..., on_cancel=)``): by default (``LEAVE``) nothing is sent
  and the bridge watches the handle to its end; ``CANCEL_TASK`` sends ``tasks/cancel``. The
  Temporal integration's policy, with the same name and default.
* :func:`workflow_run` — the bridge run a workflow's calls are recorded under (one per
  workflow, registered by the first call's send step; pass another with ``run_ref=``).

The ledger is the source of truth for the call; the workflow's steps hold references and the
statuses the ledger recorded, never a raw task id. See ``docs/guides/frameworks/dbos.md``.
"""

from bridge._extras import require_extra

require_extra("bridge.integrations.dbos", "dbos")

from bridge._policies import OnWorkflowCancel
from bridge.integrations.dbos._attach import attach, attached
from bridge.integrations.dbos._workflow import call_tool, workflow_run

__all__ = ["OnWorkflowCancel", "attach", "attached", "call_tool", "workflow_run"]
