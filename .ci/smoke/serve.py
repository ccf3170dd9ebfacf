"""[serve]: the serving modules import; this venv also runs the task server the others call
(its real call), and a bridged call works here too."""

import anyio
from common import bridged_call, done, settings

import bridge.gateway._serve  # noqa: F401
import bridge.testing.server
import bridge.uhp.serving  # noqa: F401


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


assert bridge.testing.server.build_server() is not None
anyio.run(main)
done("serve")
