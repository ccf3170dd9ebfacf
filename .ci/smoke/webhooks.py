"""[webhooks]: an attention item recorded beside a real bridged call reaches a receiver on
loopback, signed; the receiver verifies it with the same package."""

import base64
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
from common import bridged_call, done, settings
from standardwebhooks import Webhook

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
verified: list[dict] = []
arrived = threading.Event()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        verified.append(Webhook(SECRET).verify(body, dict(self.headers.items())))
        self.send_response(204)
        self.end_headers()
        arrived.set()

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=server.serve_forever, daemon=True).start()


async def main() -> None:
    from dataclasses import replace

    from bridge import Bridge, WebhookEndpoint

    hook = WebhookEndpoint(
        principal="acme", url=f"http://127.0.0.1:{server.server_port}/", secret_ref="hook"
    )
    base = settings()
    token = base.credentials("smoke")
    configured = replace(
        base, webhooks=[hook], credentials=lambda ref: SECRET if ref == "hook" else token
    )
    async with Bridge.open(configured) as bridge:
        outcome = await bridged_call(bridge)
        tenant = bridge._ledger.for_principal("acme")
        run_ref = outcome.task.run_ref
        tenant.runs.record_anomaly(run_ref, "smoke", "an attention item")
        await anyio.to_thread.run_sync(arrived.wait, 30)


anyio.run(main)
assert verified and verified[0]["type"] == "attention.anomaly", verified
done("webhooks")
