"""A harness process driving an Agents SDK agent through the bridge (for SIGKILL tests).

    python -m tests.support.openai_agents_driver --db PATH --payments-url URL --token T \\
        --run-ref REF --payment-key KEY [--crash-after-answer]

It pays one invoice: the payments task asks for approval, the run parks (its state saved
beside the run), the simulated human approves through the typed ``InputRequest`` and the run
resumes. ``--crash-after-answer`` SIGKILLs the process right after the answer is recorded in
the ledger (maybe not yet sent): started again without it, the process resumes the saved run.
It prints ``FINAL <output>`` when the agent finished.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
from typing import Any

import anyio
from agents import Agent, RunConfig, RunResult, set_tracing_disabled

from bridge import Bridge, BridgeSettings, McpServerConfig
from bridge._ledger.inputs import InputWrites
from bridge.integrations.openai_agents import (
    BridgedMCPServer,
    ParkedCall,
    bridged_run,
    run_to_completion,
)
from tests.support.bridging import FAST
from tests.support.openai_agents_model import PlannedCall, PlannedToolsModel

P = "acme"


def _die_after_answer_recorded() -> None:
    original = InputWrites.record_input_answer

    @functools.wraps(original)
    def wrapper(self: InputWrites, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(InputWrites, "record_input_answer", wrapper)  # noqa: B010


async def approve(parked: ParkedCall) -> None:
    for request in parked.inputs:
        print("asked:", request.message, flush=True)
        await request.accept({"approve": True})


async def _run(args: argparse.Namespace) -> None:
    payment = {"amount": 120, "currency": "EUR", "payee": "ACME", "payment_key": args.payment_key}
    model = PlannedToolsModel([PlannedCall("call_pay", "approve_payment", payment)])
    server = McpServerConfig(name="payments", url=args.payments_url, credential_ref="examples")
    async with Bridge.open(
        BridgeSettings(
            ledger_url=args.db,
            principals=[P],
            mcp_servers=[server],
            credentials={"examples": args.token}.get,
            scheduler=FAST,
        )
    ) as bridge:
        agent = Agent(name="clerk", model=model, mcp_servers=[BridgedMCPServer(bridge, "payments")])
        with bridged_run(args.run_ref, principal=P):
            result = await run_to_completion(
                bridge, agent, "pay the invoice", ask_human=approve,
                run_config=RunConfig(tracing_disabled=True), settle_timeout=30,
            )  # fmt: skip
        assert isinstance(result, RunResult), result
        print("FINAL", result.final_output, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--db", "--payments-url", "--token", "--run-ref", "--payment-key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--crash-after-answer", action="store_true")
    args = parser.parse_args()
    set_tracing_disabled(True)
    if args.crash_after_answer:
        _die_after_answer_recorded()
    anyio.run(_run, args)


if __name__ == "__main__":
    main()
