"""A webhook receiver in a process of its own, for the delivery-latency benchmark (a receiver
in the bridge's own process would share its interpreter lock, and measure that).

    BENCH_WEBHOOK_SECRET=whsec_… python -m bench.webhook_receiver --port 0 --port-file F

``POST /hook``: verified with ``standardwebhooks`` (400 if it does not verify), the arrival
time of each id's first delivery kept; ``GET /received``: ``{id: arrival time (epoch s)}``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

SECRET_ENV = "BENCH_WEBHOOK_SECRET"


def build_app(secret: str) -> web.Application:
    hook = Webhook(secret)
    arrived: dict[str, float] = {}

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        try:
            hook.verify(body, dict(request.headers))
        except WebhookVerificationError:
            return web.Response(status=400)
        arrived.setdefault(request.headers["webhook-id"], now)
        return web.Response(status=204)

    async def received(_request: web.Request) -> web.Response:
        return web.json_response(arrived)

    app = web.Application()
    app.router.add_post("/hook", receive)
    app.router.add_get("/received", received)
    return app


async def serve(port: int, port_file: Path) -> None:
    runner = web.AppRunner(build_app(os.environ[SECRET_ENV]), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = site._server
    assert server is not None and server.sockets  # type: ignore[attr-defined]
    bound = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    port_file.write_text(f"{bound}\n")
    import asyncio

    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    import asyncio

    asyncio.run(serve(args.port, args.port_file))


if __name__ == "__main__":
    main()
