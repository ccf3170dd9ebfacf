"""[dbos]: one bridged task call inside a DBOS workflow (SQLite system database)."""

import anyio
from common import WORK, done, settings
from dbos import DBOS

from bridge.integrations.dbos import attach, call_tool


@DBOS.workflow()
async def report() -> str:
    args = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.05}
    outcome = await call_tool("reports", "generate_report", args)
    return outcome.text()


async def main() -> None:
    from dataclasses import replace

    from bridge import Bridge

    async with Bridge.open(replace(settings(), recover_on_start=False)) as bridge:
        attach(bridge, "acme")
        DBOS(config={"name": "smoke", "system_database_url": f"sqlite:///{WORK / 'dbos.db'}"})
        DBOS.launch()
        try:
            text = await report()
        finally:
            DBOS.destroy()
    assert text.startswith("Quarterly report Q3"), text


anyio.run(main)
done("dbos")
