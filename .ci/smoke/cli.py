"""[cli]: the `bridge` command reads the ledger a bridged call wrote."""

import subprocess
import sys
from pathlib import Path

import anyio
from common import WORK, bridged_call, done, settings


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


anyio.run(main)
command = Path(sys.executable).with_name("bridge")
listed = subprocess.run(
    [str(command), "--db", str(WORK / "smoke-ledger.db"), "--principal", "acme", "runs"],
    capture_output=True,
    text=True,
    check=True,
)
assert "resp_smoke" in listed.stdout or "run_" in listed.stdout, listed.stdout
done("cli")
