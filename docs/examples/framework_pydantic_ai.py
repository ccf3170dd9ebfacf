"""Framework guide (pydantic-ai): a bridged toolset in wait and detach mode, an approval
answered through the typed InputRequest, and an agent run resumed after its process stopped.

Needs BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN and
BRIDGE_EXAMPLE_DB; the model is a scripted pydantic-ai FunctionModel (no LLM is called).
"""

# --8<-- [start:imports]
import os
import secrets

import anyio
from pydantic_ai import Agent
from pydantic_ai.tools import DeferredToolRequests

from bridge import Bridge, BridgeSettings, InputRequest, McpServerConfig
from bridge.integrations.pydantic_ai import BridgedRun, BridgedToolset
from bridge.testing.pydantic_ai import scripted_model
# --8<-- [end:imports]

servers = [
    McpServerConfig(
        name="reports", url=os.environ["BRIDGE_EXAMPLE_REPORTS_URL"], credential_ref="ex"
    ),
    McpServerConfig(
        name="payments", url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"], credential_ref="ex"
    ),
]
tokens = {"ex": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
DB = os.environ["BRIDGE_EXAMPLE_DB"]


async def new_run(bridge: Bridge) -> str:
    run = await bridge.register_served_run(
        "acme",
        response_id="resp_" + secrets.token_hex(8),
        session_id="hsess" + secrets.token_hex(8),
        harness_id="chrn_example",
    )
    return run.ref


async def main() -> None:
    payment = {
        "amount": 120,
        "currency": "EUR",
        "payee": "ACME",
        "payment_key": secrets.token_hex(4),
    }
    async with Bridge.open(
        BridgeSettings(
            ledger_url=DB, principals=["acme"], mcp_servers=servers, credentials=tokens.get
        )
    ) as bridge:
        run_ref = await new_run(bridge)
        report = {"quarter": "Q3", "sections": 2, "seconds_per_section": 0.2}
        model = scripted_model("generate_report", report)
        # --8<-- [start:wait]
        reports = BridgedToolset(bridge, "acme", "reports", run=run_ref, mode="wait")
        agent = Agent(model, toolsets=[reports])
        result = await agent.run("write the Q3 report")  # the tool call blocks until the task ends
        print(result.output.splitlines()[0])  # Quarterly report Q3
        # --8<-- [end:wait]
        assert result.output.startswith("Quarterly report Q3"), result.output

        run_ref = await new_run(bridge)
        model = scripted_model("approve_payment", payment)
        # --8<-- [start:detach]
        payments = BridgedToolset(bridge, "acme", "payments", run=run_ref, mode="detach")
        agent = Agent(model, output_type=[str, DeferredToolRequests], toolsets=[payments])

        async def ask_a_person(request: InputRequest) -> None:
            print("asked:", request.message)  # server text: show it to the person
            await request.accept({"approve": True})  # checked against request.requested_schema

        bridged = BridgedRun(agent, payments, on_input=ask_a_person)
        result = await bridged.run("pay ACME 120 EUR")  # parks, waits, resumes: final output
        print(result.output)  # approved <payment key>
        # --8<-- [end:detach]
        assert result.output == f"approved {payment['payment_key']}", result.output

    # A harness that stops while a payment waits for approval, and a new process that resumes it.
    payment = {**payment, "payment_key": secrets.token_hex(4)}
    model = scripted_model("approve_payment", payment)
    async with Bridge.open(
        BridgeSettings(
            ledger_url=DB, principals=["acme"], mcp_servers=servers, credentials=tokens.get
        )
    ) as bridge:
        run_ref = await new_run(bridge)
        payments = BridgedToolset(bridge, "acme", "payments", run=run_ref, mode="wait")
        agent = Agent(model, toolsets=[payments])
        asked = anyio.Event()

        async def nobody_answers(request: InputRequest) -> None:
            asked.set()

        async with anyio.create_task_group() as harness:
            harness.start_soon(BridgedRun(agent, payments, on_input=nobody_answers).run, "pay")
            await asked.wait()
            harness.cancel_scope.cancel()  # the process stops mid-task
    # --8<-- [start:resume]
    async with Bridge.open(
        BridgeSettings(
            ledger_url=DB, principals=["acme"], mcp_servers=servers, credentials=tokens.get
        )
    ) as bridge:
        payments = BridgedToolset(bridge, "acme", "payments", run=run_ref, mode="wait")
        agent = Agent(model, toolsets=[payments])
        bridged = BridgedRun(agent, payments, on_input=ask_a_person)
        result = await bridged.run()  # resumes from the saved history: the call is replayed
        count = await bridge.run("acme", run_ref).call_tool(
            "payments", "payment_count", {"payment_key": payment["payment_key"]}
        )
        print(result.output, "- payments recorded:", count.text())  # approved … - … 1
    # --8<-- [end:resume]
    assert result.output == f"approved {payment['payment_key']}", result.output
    assert count.text() == "1", count.text()


if __name__ == "__main__":
    anyio.run(main)
