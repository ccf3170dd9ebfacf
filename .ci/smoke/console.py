"""[console]: `python -m bridge.console` serves the runs page of a ledger a bridged call wrote,
to a bearer token, and refuses a request without one."""

import os
import subprocess
import sys
import time

import anyio
import httpx
from common import WORK, bridged_call, done, settings

CONSOLE_TOKEN = "console-smoke-token"


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


anyio.run(main)
port_file = WORK / "console.port"
env = {**os.environ, "BRIDGE_CONSOLE_TOKENS": f"acme={CONSOLE_TOKEN}"}
console = subprocess.Popen(
    [sys.executable, "-m", "bridge.console", "--db", str(WORK / "smoke-ledger.db"),
     "--port", "0", "--port-file", str(port_file)],
    env=env,
)
try:
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        assert console.poll() is None, f"the console exited with {console.returncode}"
        assert time.monotonic() < deadline, "the console did not report its port in time"
        time.sleep(0.1)
    base = f"http://127.0.0.1:{port_file.read_text().strip()}"
    page = httpx.get(f"{base}/runs", headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})
    assert page.status_code == 200, page.status_code
    assert "resp_smoke" in page.text, page.text[:400]
    refused = httpx.get(f"{base}/runs", follow_redirects=False)
    assert refused.status_code in (302, 303, 401), refused.status_code
finally:
    console.terminate()
    console.wait(10)
done("console")
