"""OpenAI Agents SDK guide: an agent whose MCP tools run through the bridge.

A long report task parked as an interruption (detach) and resumed when it settles, then a
payment the server asks approval for, answered through the typed InputRequest, with the run
state saved beside the run. The model is the SDK's deterministic ScriptedModel: no network,
no API key. Needs BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL,
BRIDGE_EXAMPLE_TOKEN and BRIDGE_EXAMPLE_DB (see the guide).
"""

# --8<-- [start:imports]
import os
import secrets

import anyio
from agents import Agent, RunConfig, Runner, RunResult, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from bridge import Bridge, BridgeSettings, McpServerConfig, Run, WaitMode
from bridge.integrations.openai_agents import (
    BridgedMCPServer,
    ParkedCall,
    bridged_run,
    parked_calls,
    resume_when_settled,
    run_to_completion,
    save_run_state,
)
# --8<-- [end:imports]

set_tracing_disabled(True)  # nothing leaves the process
NO_TRACES = RunConfig(tracing_disabled=True)


async def main() -> None:
    servers = [
        McpServerConfig(name=name, url=os.environ[var], credential_ref="examples")
        for name, var in (
            ("reports", "BRIDGE_EXAMPLE_REPORTS_URL"),
            ("payments", "BRIDGE_EXAMPLE_PAYMENTS_URL"),
        )
    ]
    tokens = {"examples": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
    async with Bridge.open(BridgeSettings(
        ledger_url=os.environ["BRIDGE_EXAMPLE_DB"], principals=["acme"], mcp_servers=servers,
        credentials=tokens.get,
    )) as bridge:  # fmt: skip

        async def new_run() -> Run:  # one agent run per bridged run (one saved state each)
            return await bridge.register_served_run(
                "acme",
                response_id="resp_" + secrets.token_hex(8),
                session_id="hsess" + secrets.token_hex(8),
                harness_id="chrn_example",
            )

        run = await new_run()
        report = {"quarter": "Q3", "sections": 2, "seconds_per_section": 0.5}
        model = ScriptedModel(
            [
                [function_call("generate_report", report, call_id="call_report")],
                [assistant_message("The Q3 report is ready.")],
            ]
        )
        # --8<-- [start:agent]
        reports = BridgedMCPServer(bridge, "reports", wait=WaitMode.DETACH)
        agent = Agent(name="analyst", model=model, mcp_servers=[reports])
        with bridged_run(run.ref, principal="acme"):  # every tool call joins this run
            result = await Runner.run(agent, "write the Q3 report", run_config=NO_TRACES)
            state = result.to_state()  # parked: the task works on, watched by the bridge
            await save_run_state(bridge, state)  # beside the run: a restart resumes here
            [parked] = await parked_calls(bridge, state)
            print("parked:", parked.operation_id, parked.task.status.value)  # RUN:call_report
            await resume_when_settled(bridge, state, timeout=60)  # wait_for, then approve
            result = await Runner.run(agent, state, run_config=NO_TRACES)
        print(result.final_output)  # The Q3 report is ready.
        # --8<-- [end:agent]
        assert not result.interruptions and model.remaining_steps == 0
        done = await run.operation(f"{run.ref}:call_report")
        assert done is not None and done.task is not None
        assert done.task.status.value == "completed"

        run = await new_run()  # a new response: a new agent run
        key = "pay-" + secrets.token_hex(4)
        payment = {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": key}
        model = ScriptedModel(
            [
                [function_call("approve_payment", payment, call_id="call_pay")],
                [assistant_message("Paid.")],
            ]
        )

        # --8<-- [start:approval]
        async def ask_human(parked: ParkedCall) -> None:
            for question in parked.inputs:  # the server's own typed question
                print("asked:", question.message)
                await question.accept({"approve": True})  # or .decline() / .dismiss()

        payments = BridgedMCPServer(bridge, "payments")  # approvals=True: asks park the run
        clerk = Agent(name="clerk", model=model, mcp_servers=[payments])
        with bridged_run(run.ref, principal="acme"):
            finished = await run_to_completion(
                bridge, clerk, "pay the invoice", ask_human=ask_human, run_config=NO_TRACES
            )
        assert isinstance(finished, RunResult)
        print(finished.final_output)  # Paid.
        # --8<-- [end:approval]
        count = await run.call_tool("payments", "payment_count", {"payment_key": key})
        assert count.text() == "1", count.text()  # exactly one payment on the server


anyio.run(main)
