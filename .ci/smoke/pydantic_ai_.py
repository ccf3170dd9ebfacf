"""[pydantic-ai]: a scripted agent (bridge.testing) calls the task tool through BridgedToolset."""

import anyio
from common import done, settings
from pydantic_ai import Agent

from bridge.integrations.pydantic_ai import BridgedToolset
from bridge.testing.pydantic_ai import scripted_model


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_pai", session_id="hsess_pai", harness_id="chrn_smoke"
        )
        report = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.05}
        toolset = BridgedToolset(bridge, "acme", "reports", run=run.ref, mode="wait")
        agent = Agent(scripted_model("generate_report", report), toolsets=[toolset])
        result = await agent.run("write the Q3 report")
        assert result.output.startswith("Quarterly report Q3"), result.output


anyio.run(main)
done("pydantic-ai")
