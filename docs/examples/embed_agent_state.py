"""Embed guide, part 7: keep an agent's state beside its run, and find it after a restart.

Needs only BRIDGE_EXAMPLE_DB (a ledger file; no server is called).
"""

import os
import secrets

import anyio

from bridge import Bridge, BridgeSettings
from bridge.errors import InvalidTransition


async def main() -> None:
    history = [{"role": "user", "content": "pay ACME 120 EUR"}]
    async with Bridge.open(
        BridgeSettings(ledger_url=os.environ["BRIDGE_EXAMPLE_DB"], principals=["acme"])
    ) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        # --8<-- [start:save]
        version = await run.save_agent_state("my-agent", {"history": history})
        saved = await run.agent_state("my-agent")  # after a restart
        new_state = {"history": [*saved.state["history"], {"role": "tool", "content": "ok"}]}
        await run.save_agent_state("my-agent", new_state, expected_version=saved.version)
        # --8<-- [end:save]
        assert version == 1
        try:  # a writer still holding version 1 lost the race: refused, nothing written
            await run.save_agent_state("my-agent", {}, expected_version=1)
        except InvalidTransition:
            pass
        else:
            raise AssertionError("a stale writer was not refused")
    async with Bridge.open(
        BridgeSettings(ledger_url=os.environ["BRIDGE_EXAMPLE_DB"], principals=["acme"])
    ) as bridge:
        reloaded = await bridge.run("acme", run.ref).agent_state("my-agent")  # a new process
        assert reloaded is not None and reloaded.version == 2
        print(len(reloaded.state["history"]), "messages")  # 2 messages


if __name__ == "__main__":
    anyio.run(main)
