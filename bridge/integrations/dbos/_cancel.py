"""What a DBOS workflow's cancellation (``DBOS.cancel_workflow``) does to the task of a bridged
call it was waiting for: the policy the Temporal integration has, with the same name and
default (:class:`~bridge.integrations.dbos.OnWorkflowCancel`): ``tasks/cancel`` only when it
says so.

A cancelled workflow runs no more steps (DBOS refuses each one), so this is not a step: the
ledger is what makes it durable (the intent to cancel recorded before ``tasks/cancel`` leaves,
the server's acknowledgement after). Either way the handle goes back to this process's poll
scheduler, which records how the task ends: no workflow polls it any more.
"""

from __future__ import annotations

import contextvars

import anyio
from dbos import DBOS

from bridge._policies import OnWorkflowCancel
from bridge.integrations.dbos._attach import WORKFLOW_CANCELLED, attached

# How a cancel this policy asked for is recorded (``task.cancel_requested`` ``requested_by``):
# the next worker's attach takes such a handle back (see ``attach``).
REQUESTED_BY = WORKFLOW_CANCELLED


async def is_cancelled(workflow_id: str) -> bool:
    """Whether DBOS records the workflow as cancelled. Read in an empty context: inside the
    workflow's, DBOS would record the read as one of its steps, which a workflow this
    execution no longer owns cannot checkpoint."""
    read = contextvars.Context().run
    status = await anyio.to_thread.run_sync(read, DBOS.get_workflow_status, workflow_id)
    return status is not None and status.status == "CANCELLED"


async def workflow_cancelled(run_ref: str, operation_id: str, policy: OnWorkflowCancel) -> None:
    """Apply ``policy`` to the call's task, if it made one that is still open."""
    here = attached()
    record = await here.run(run_ref).operation(operation_id)
    task = record.task if record is not None else None
    if task is None or not task.is_open:
        return
    if policy is OnWorkflowCancel.CANCEL_TASK:
        await here.cancel(task.ref, REQUESTED_BY)
    await here.give_back(task)
