"""[uvloop]: a real bridged call on uvloop."""

import asyncio

import anyio
from common import bridged_call, done, settings


async def main() -> None:
    import uvloop

    from bridge import Bridge

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


anyio.run(main, backend_options={"use_uvloop": True})
done("uvloop")
