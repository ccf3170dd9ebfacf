"""Embed guide, part 2: answer an input request, wait for final events, cancel and detach.

Run against the example servers (see docs/guides/embed-in-a-harness.md):
BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN, BRIDGE_EXAMPLE_DB.
"""

# --8<-- [start:imports]
import os
import secrets

import anyio

from bridge import (
    Bridge,
    BridgeSettings,
    McpServerConfig,
    OuterStatus,
    TaskPending,
    WaitMode,
    events as ev,
)
from bridge.errors import AnswerRefused, InvalidAnswer, WaitTimedOut
# --8<-- [end:imports]

servers = [
    McpServerConfig(
        name="reports", url=os.environ["BRIDGE_EXAMPLE_REPORTS_URL"], credential_ref="examples"
    ),
    McpServerConfig(
        name="payments", url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"], credential_ref="examples"
    ),
]
tokens = {"examples": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
PAYMENT = {
    "amount": 120,
    "currency": "EUR",
    "payee": "ACME Corp",
    "payment_key": "pay-" + secrets.token_hex(4),
}


async def main() -> None:
    async with Bridge.open(
        BridgeSettings(
            ledger_url=os.environ["BRIDGE_EXAMPLE_DB"],
            principals=["acme"],
            mcp_servers=servers,
            credentials=tokens.get,
        )
    ) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        step = await run.call_tool("payments", "approve_payment", PAYMENT, wait=WaitMode.DETACH)
        assert isinstance(step, TaskPending)
        # --8<-- [start:events]
        last_seen = 0
        # until_idle: the loop ends once the run waits on nothing (a result, an unknown outcome,
        # a settled task alike); without it, subscribe() follows the run forever
        async for event in run.subscribe(after_seq=last_seen, until_idle=True):
            last_seen = event.seq  # store it with your run: resume from it after a restart
            if isinstance(event, ev.TaskInputRequired):
                request = run.input_request(event)
                print(request.method, request.message, request.requested_schema)
                try:
                    await request.accept({"approve": "yes please"})  # not a boolean
                except InvalidAnswer as refused:  # checked first: nothing was recorded
                    print("refused:", refused.detail)
                try:
                    receipt = await request.accept({"approve": True})  # or .decline() / .dismiss()
                    print("answer", receipt.delivery.value)  # delivered | queued | task_lost
                except AnswerRefused as refused:  # the server said no: not delivered, not resent
                    print("answer refused:", refused.reason)
            elif isinstance(event, ev.CallUnknownOutcome | ev.ServerUnreachable | ev.Anomaly):
                print("needs attention:", event.type)
            elif event.is_final:  # task.terminal or task.lost: this task is done
                print("final:", event.type)
        # --8<-- [end:events]
        # --8<-- [start:wait_for]
        [task] = await run.wait_for([step.task.ref], timeout=30)
        if task.lost_reason is not None:  # lost counts as final: there is no result
            print("lost:", task.lost_reason.value, task.lost_detail)
        else:
            print(task.status.value, task.result["content"][0]["text"])
        # --8<-- [end:wait_for]
        # --8<-- [start:pending]
        for request in await bridge.pending_inputs("acme"):  # e.g. after a restart
            print("still waiting for an answer:", request.input_ref, request.message)
        # --8<-- [end:pending]
        # --8<-- [start:cancel]
        slow = {"quarter": "Q4", "sections": 3, "seconds_per_section": 2}
        first = await run.call_tool("reports", "generate_report", slow, wait=WaitMode.DETACH)
        second = await run.call_tool(
            "reports",
            "generate_report",
            {**slow, "quarter": "Q1"},
            wait=WaitMode.DETACH,
        )
        assert isinstance(first, TaskPending) and isinstance(second, TaskPending)
        await run.cancel_task(first.task.ref)  # intent recorded; an ack is no stop
        await run.detach(second.task.ref)  # keeps running, no longer watched
        [cancelled] = await run.wait_for([first.task.ref], timeout=30)
        print("first:", cancelled.status.value)  # what the server says it did
        try:
            await run.wait_for([second.task.ref], timeout=0.5)
        except WaitTimedOut:
            print("second: detached, never settles here")
        # --8<-- [end:cancel]
        await run.record_status(OuterStatus.COMPLETED)


if __name__ == "__main__":
    anyio.run(main)
