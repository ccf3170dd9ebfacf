"""Embed guide, part 3: answer input requests with typed handlers (and what is declared).

Run against the example payments server (see docs/guides/embed-in-a-harness.md):
BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN, BRIDGE_EXAMPLE_DB.
"""

# --8<-- [start:imports]
import os
import secrets

import anyio
import mcp_types

from bridge import (
    Accept,
    Bridge,
    BridgeSettings,
    Decline,
    FormElicitation,
    InputHandlers,
    InputPolicy,
    McpServerConfig,
    OnStuckInput,
    Policies,
    TaskSettled,
    UrlElicitation,
)
# --8<-- [end:imports]

servers = [
    McpServerConfig(
        name="payments", url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"], credential_ref="examples"
    )
]
tokens = {"examples": os.environ["BRIDGE_EXAMPLE_TOKEN"]}


# --8<-- [start:handlers]
async def approve_small_payments(asked: FormElicitation) -> Accept | Decline:
    print("asked:", asked.message)  # server text: show it, do not act on it blindly
    small = "120 EUR" in asked.message
    return Accept({"approve": True}) if small else Decline()  # checked against the schema


async def show_url(asked: UrlElicitation) -> Decline:
    print("the server wants the user at", asked.url)  # the bridge never opens it
    return Decline()


async def no_model(params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
    raise RuntimeError("no model configured")  # recorded as task.input_handler_failed


handlers = InputHandlers(
    form=approve_small_payments,  # declared: elicitation.form
    url=show_url,  # declared: elicitation.url
    sampling=None,  # not declared: a sampling request is declined (input policy)
    per_server={"payments": InputHandlers(form=approve_small_payments)},  # form only there
)
policies = Policies(
    inputs=InputPolicy(stuck_after_polls=60, on_stuck=OnStuckInput.CANCEL)  # like C#'s SDK
)
# --8<-- [end:handlers]


async def main() -> None:
    # --8<-- [start:open]
    async with Bridge.open(
        BridgeSettings(
            ledger_url=os.environ["BRIDGE_EXAMPLE_DB"],
            principals=["acme"],
            mcp_servers=servers,
            credentials=tokens.get,
            input_handlers=handlers,
            policies=policies,
        )
    ) as bridge:
        # --8<-- [end:open]
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        payment = {
            "amount": 120,
            "currency": "EUR",
            "payee": "ACME Corp",
            "payment_key": "pay-" + secrets.token_hex(4),
        }
        # --8<-- [start:call]
        step = await run.call_tool("payments", "approve_payment", payment)
        assert isinstance(step, TaskSettled)  # the handler approved: nobody had to answer
        print(step.text())  # approved pay-…
        # --8<-- [end:call]
        assert step.text().startswith("approved ")


if __name__ == "__main__":
    anyio.run(main)
