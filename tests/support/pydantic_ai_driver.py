"""A harness process running one pydantic-ai agent run through the bridge (for crash tests).

    python -m tests.support.pydantic_ai_driver --db PATH --url URL --token T --run-ref REF \
        --mode wait|detach --payment-key KEY [--approve]

The agent (a deterministic ``FunctionModel``) asks the example payments server for one payment
whose tool-call id is random, as a real model's would be: only the agent state saved beside the
run lets a restarted process replay *that* call. Without ``--approve`` the simulated human
never answers: the process prints ``ASKED`` when the approval is asked and waits (to be
SIGKILLed). With it, the request is accepted and the run's final output is printed as JSON,
with how many times the model was asked in this process.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from bridge import Bridge, BridgeSettings, InputRequest, McpServerConfig
from bridge.integrations.pydantic_ai import BridgedRun, BridgedToolset
from tests.support.bridging import FAST

PRINCIPAL = "acme"


def payment_model(payment: dict[str, Any], asked: list[int]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[0].model_response_str()}")])
        return ModelResponse(parts=[ToolCallPart("approve_payment", payment)])

    return FunctionModel(respond)


async def main(args: argparse.Namespace) -> None:
    server = McpServerConfig(name="payments", url=args.url, credential_ref="examples")
    payment = {"amount": 120, "currency": "EUR", "payee": "ACME", "payment_key": args.payment_key}
    asked: list[int] = []

    async def human(request: InputRequest) -> None:
        if not args.approve:
            print("ASKED", flush=True)
            await anyio.sleep_forever()
        await request.accept({"approve": True})

    async with Bridge.open(
        BridgeSettings(
            ledger_url=args.db,
            principals=[PRINCIPAL],
            mcp_servers=[server],
            credentials={"examples": args.token}.get,
            scheduler=FAST,
        )
    ) as bridge:
        toolset = BridgedToolset(bridge, PRINCIPAL, "payments", run=args.run_ref, mode=args.mode)
        agent = Agent(
            payment_model(payment, asked),
            output_type=[str, DeferredToolRequests],
            toolsets=[toolset],
        )
        result = await BridgedRun(agent, toolset, on_input=human).run("pay ACME 120 EUR")
        print(json.dumps({"output": result.output, "model_requests": len(asked)}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("--db", "--url", "--token", "--run-ref", "--payment-key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--mode", choices=["wait", "detach"], required=True)
    parser.add_argument("--approve", action="store_true")
    anyio.run(main, parser.parse_args(sys.argv[1:]))
