"""Framework guide (DBOS): bridged MCP tool calls inside a DBOS workflow — a report task
polled with durable sleeps at the server's interval, and a payment whose approval an
operator gives through the bridge while the workflow waits.

Needs BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN and
BRIDGE_EXAMPLE_DB; DBOS's system database is a SQLite file beside the ledger.
"""

# --8<-- [start:imports]
import os
import secrets
from pathlib import Path

import anyio
from dbos import DBOS

from bridge import Bridge, BridgeSettings, McpServerConfig
from bridge.integrations.dbos import attach, call_tool
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
SYSTEM_DB = "sqlite:///" + str(Path(DB).with_name("dbos-system.db"))


# --8<-- [start:workflow]
@DBOS.workflow()
async def close_the_quarter(quarter: str, payment: dict[str, object]) -> list[str]:
    report = await call_tool(
        "reports",
        "generate_report",
        {"quarter": quarter, "sections": 2, "seconds_per_section": 0.2},
    )
    paid = await call_tool("payments", "approve_payment", payment)  # waits for an approval
    return [report.text().splitlines()[0], paid.text()]


# --8<-- [end:workflow]


async def main() -> None:
    payment = {
        "amount": 120,
        "currency": "EUR",
        "payee": "ACME",
        "payment_key": secrets.token_hex(4),
    }
    # --8<-- [start:worker]
    settings = BridgeSettings(
        ledger_url=DB,
        principals=["acme"],
        mcp_servers=servers,
        credentials=tokens.get,
        recover_on_start=False,  # DBOS recovery resumes the workflows, and with them the calls
    )
    async with Bridge.open(settings) as bridge:
        attach(bridge, "acme")  # the bridge this process's workflows call through
        DBOS(config={"name": "quarter-close", "system_database_url": SYSTEM_DB})
        DBOS.launch()  # inside the event loop: recovered workflows run on it
        handle = await DBOS.start_workflow_async(close_the_quarter, "Q3", payment)
        # --8<-- [end:worker]
        # --8<-- [start:operator]
        # An operator's inbox (the same list `bridge console` shows, and `bridge answer` takes)
        while not (waiting := await bridge.pending_inputs("acme")):
            await anyio.sleep(0.1)
        for request in waiting:
            print("asked:", request.message)  # Approve payment of 120 EUR to ACME (key …)?
            await request.accept({"approve": True})  # checked against the request's schema
        print(await handle.get_result())  # ['Quarterly report Q3', 'approved …']
        # --8<-- [end:operator]
        result = await handle.get_result()
        count = await bridge.run("acme", await _any_run(bridge)).call_tool(
            "payments", "payment_count", {"payment_key": payment["payment_key"]}
        )
        DBOS.destroy()
    assert result == ["Quarterly report Q3", f"approved {payment['payment_key']}"], result
    assert count.text() == "1", count.text()


async def _any_run(bridge: Bridge) -> str:
    run = await bridge.register_served_run(
        "acme", response_id="resp_" + secrets.token_hex(8), session_id=None, harness_id=None
    )
    return run.ref


if __name__ == "__main__":
    anyio.run(main)
