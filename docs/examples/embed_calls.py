"""Embed guide, part 1: open the bridge, list tools, call a tool, read a call by its operation id,
read the records through the bridge.

Run against the example servers (see docs/guides/embed-in-a-harness.md):
BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN, BRIDGE_EXAMPLE_DB.
"""

# --8<-- [start:imports]
import os
import secrets

import anyio
# --8<-- [end:imports]

# --8<-- [start:open]
from bridge import (
    Bridge,
    BridgeSettings,
    InlineResult,
    InputPending,
    McpServerConfig,
    Policies,
    RejectedCall,
    TaskSettled,
    ToolPolicy,
    UnknownOutcome,
    WaitMode,
)

servers = [
    McpServerConfig(
        name="reports",
        url=os.environ["BRIDGE_EXAMPLE_REPORTS_URL"],
        credential_ref="examples",  # a name: the token itself never reaches the ledger
    ),
    McpServerConfig(
        name="payments",
        url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"],
        credential_ref="examples",
    ),
]
policies = Policies(
    default=ToolPolicy(wait=WaitMode.WAIT, wait_deadline_s=120),
    per_tool={"payments.approve_payment": ToolPolicy(wait=WaitMode.ASK)},
)
tokens = {"examples": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
# --8<-- [end:open]


async def main() -> None:
    # --8<-- [start:enter]
    settings = BridgeSettings(
        ledger_url=os.environ["BRIDGE_EXAMPLE_DB"],  # a SQLite path, or "postgresql://…"
        principals=["acme"],  # this process's scope: every read and write is bound to it
        mcp_servers=servers,
        credentials=tokens.get,
        policies=policies,
    )
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        # --8<-- [end:enter]
        # --8<-- [start:list_tools]
        tools = await bridge.list_tools("acme", "reports")  # list[mcp.types.Tool]
        schemas = {tool.name: tool.input_schema for tool in tools}
        assert "quarter" in schemas["generate_report"]["properties"]
        # --8<-- [end:list_tools]
        # --8<-- [start:call]
        args = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.1}
        step_7 = f"{run.ref}:step-7"  # your stable name for this step: its operation id
        step = await run.call_tool("reports", "generate_report", args, operation_id=step_7)
        print(step.kind, step.text().splitlines()[0])  # task_ended Quarterly report Q3
        match step:  # one type, CallOutcome: match on its classes (or switch on step.kind)
            case TaskSettled(lost=False, task=task):
                print("task", task.status.value)  # completed, failed or cancelled
            case TaskSettled() | UnknownOutcome():
                print("outcome unknown: resolve it before acting on it")
            case InputPending() | RejectedCall() | InlineResult():
                print("answered at once:", step.kind)
            case _:  # TaskPending, RecoverableFailure, TaskHandle: the task is still watched
                print("still open:", step.kind)
        # --8<-- [end:call]
        # --8<-- [start:operation]
        done = await run.operation(step_7)
        assert done is not None and done.task is not None  # step 7 became a task…
        print(done.state.value, done.task.status.value)  # …and it completed
        # a replay: nothing is sent, the same outcome returns
        again = await run.call_tool("reports", "generate_report", args, operation_id=step_7)
        assert again.text() == step.text()
        # --8<-- [end:operation]
        # --8<-- [start:read]
        # Records as the ledger holds them, through the bridge: fn(reader) runs as the bridge
        # runs its own ledger calls (never blocking the event loop), its reads in one hop.
        view, calls = await bridge.read("acme", lambda r: (r.run(run.ref), r.calls(run.ref)))
        assert [call.operation_id for call in calls] == [step_7]  # the replay sent nothing
        assert calls[0].task is not None and not calls[0].task.is_open
        open_runs = await bridge.read("acme", lambda r: r.runs(open_only=True))
        assert view.ref in {r.ref for r in open_runs}  # served, not ended yet
        # --8<-- [end:read]


if __name__ == "__main__":
    anyio.run(main)
