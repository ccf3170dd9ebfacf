"""Embed guide: input before any task (MRTR), answered by the host and by a typed handler.

Starts the repository's MRTR test server (``tests/servers/mrtr_server.py``, the official SDK's
``MCPServer``: its tools answer ``tools/call`` with an ``InputRequiredResult`` first) on a free
port; BRIDGE_EXAMPLE_DB is the ledger.
"""

# --8<-- [start:imports]
import os
import secrets

import anyio

from bridge import (
    Accept,
    Bridge,
    BridgeSettings,
    FormElicitation,
    InlineResult,
    InputHandlers,
    InputPending,
    McpServerConfig,
    WaitMode,
)
from harness_examples.launch import ServerProcess
# --8<-- [end:imports]


# --8<-- [start:handler]
async def approve_small_payments(asked: FormElicitation) -> Accept:
    # asked.task_ref is None and asked.op_ref names the call: no task exists yet
    print("asked by call", asked.op_ref, ":", asked.message)
    return Accept({"approve": "10 EUR" in asked.message})


handlers = InputHandlers(form=approve_small_payments)  # tasks' inputs and calls' alike
# --8<-- [end:handler]


async def main(url: str) -> None:
    servers = [McpServerConfig(name="payments", url=url)]
    db = os.environ["BRIDGE_EXAMPLE_DB"]
    async with Bridge.open(
        BridgeSettings(ledger_url=db, principals=["acme"], mcp_servers=servers)
    ) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        # --8<-- [start:host]
        pending = await run.call_tool(
            "payments", "approve_payment", {"amount": 10}, wait=WaitMode.WAIT
        )
        assert isinstance(pending, InputPending)  # nothing started on the server yet
        (asked,) = pending.inputs  # or bridge.pending_inputs("acme"), also after a restart
        receipt = await asked.accept({"approve": True})  # the call is sent again
        assert receipt.outcome is not None
        print(receipt.delivery, receipt.outcome.text())  # retried paid 10
        # --8<-- [end:host]
        assert receipt.outcome.text() == "paid 10", receipt

    async with Bridge.open(
        BridgeSettings(
            ledger_url=db, principals=["acme"], mcp_servers=servers, input_handlers=handlers
        )
    ) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        # --8<-- [start:handled]
        # wait=ASK: the step pauses while the call waits for input, and the handler answers it
        step = await run.call_tool("payments", "approve_payment", {"amount": 10}, wait=WaitMode.ASK)
        assert isinstance(step, InlineResult)
        print(step.text())  # paid 10: no host involved
        # --8<-- [end:handled]
        assert step.text() == "paid 10", step


if __name__ == "__main__":
    with ServerProcess("tests.servers.mrtr_server") as server:
        anyio.run(main, server.url)
