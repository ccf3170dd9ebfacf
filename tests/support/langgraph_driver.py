"""A LangGraph harness process that SIGKILLs itself mid-run (for the restart tests).

    LANGGRAPH_DRIVER_TOKEN=T python -m tests.support.langgraph_driver --db PATH \
        --payments-url URL --key PAYMENT_KEY --crash {approved,parked}

It registers a run (printed first, one line), then runs the payment agent of
:mod:`tests.support.langgraph_agent` with ``durability="sync"``:

* ``approved`` — ``wait`` mode: a concurrent human accepts the approval and the process dies
  at once, while the tool node is still blocked on the task.
* ``parked`` — ``detach`` mode: the graph parks with an interrupt and the process dies before
  anyone resumes it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import anyio

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode, events as ev
from bridge.integrations.langgraph import bridge_tools, graph_config
from tests.support.bridging import FAST
from tests.support.langgraph_agent import agent_graph, pay

P = "acme"


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def _run(args: argparse.Namespace) -> None:
    server = McpServerConfig(name="payments", url=args.payments_url, credential_ref="mcp")
    async with Bridge.open(
        BridgeSettings(
            ledger_url=args.db,
            principals=[P],
            mcp_servers=[server],
            credentials={"mcp": os.environ["LANGGRAPH_DRIVER_TOKEN"]}.get,
            scheduler=FAST,
        )
    ) as bridge:
        run = await bridge.register_served_run(
            P, response_id="resp_crash", session_id="hsesscrash", harness_id="chrn_langgraph"
        )
        print(run.ref, flush=True)
        mode = WaitMode.WAIT if args.crash == "approved" else WaitMode.DETACH
        tools = await bridge_tools(bridge, P, "payments", wait=mode)
        graph = agent_graph(bridge, P, tools, pay(args.key))
        start = {"messages": [("user", "pay")]}

        async def human() -> None:
            async for event in bridge.run(P, run.ref).subscribe():
                if isinstance(event, ev.TaskInputRequired):
                    await (
                        bridge.run(P, event.run_ref).input_request(event).accept({"approve": True})
                    )
                    _die()

        async with anyio.create_task_group() as group:
            if args.crash == "approved":
                group.start_soon(human)
            state = await graph.ainvoke(start, graph_config(run.ref), durability="sync")
            if args.crash == "parked" and state.get("__interrupt__"):
                _die()
    sys.exit(f"the driver did not reach its crash point {args.crash!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--payments-url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--crash", choices=["approved", "parked"], required=True)
    anyio.run(_run, parser.parse_args())


if __name__ == "__main__":
    main()
