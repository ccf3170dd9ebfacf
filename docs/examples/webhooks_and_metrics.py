"""Webhooks and metrics guide: a person is told by a signed webhook that a payment waits for
approval, the receiver verifies it, the answer goes back through the bridge; the figures are
scraped from a Prometheus endpoint meanwhile.

Run against the example servers (see docs/guides/webhooks-and-metrics.md):
BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN, BRIDGE_EXAMPLE_DB.
"""

# --8<-- [start:receiver]
import base64
import secrets

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

WEBHOOK_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
seen_ids: set[str] = set()  # a delivery may come twice (at least once): dedupe on its id
items: list[dict] = []


async def receive(request: web.Request) -> web.Response:
    body = await request.read()  # the raw bytes: the signature covers them exactly
    try:
        payload = Webhook(WEBHOOK_SECRET).verify(body, dict(request.headers))
    except WebhookVerificationError:
        return web.Response(status=400)  # not from the bridge (or too old): ignore it
    if request.headers["webhook-id"] not in seen_ids:
        seen_ids.add(request.headers["webhook-id"])
        items.append(payload)  # e.g. {"type": "attention.input_waiting", "data": {...}}
    return web.Response(status=204)  # any 2xx settles it; anything else is retried
    # --8<-- [end:receiver]


async def serve_receiver() -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/bridge-hooks", receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/bridge-hooks"


def serve_metrics() -> int:
    # --8<-- [start:metrics]
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    server, _thread = start_http_server(0, addr="127.0.0.1")  # GET /metrics
    # --8<-- [end:metrics]
    return int(server.server_port)


def scrape(port: int, name: str, **labels: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} is not on the page")


async def main() -> None:
    metrics_port = serve_metrics()
    receiver, hook_url = await serve_receiver()
    try:
        await approve_through_the_webhook(hook_url, metrics_port)
    finally:
        await receiver.cleanup()


async def approve_through_the_webhook(hook_url: str, metrics_port: int) -> None:
    # --8<-- [start:settings]
    import os

    import anyio

    from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode, WebhookEndpoint

    payments = McpServerConfig(
        name="payments", url=os.environ["BRIDGE_EXAMPLE_PAYMENTS_URL"], credential_ref="payments"
    )
    secrets_by_ref = {  # your secret store: the ledger only ever holds the references
        "payments": os.environ["BRIDGE_EXAMPLE_TOKEN"],
        "acme-webhook": WEBHOOK_SECRET,
    }
    settings = BridgeSettings(
        ledger_url=os.environ["BRIDGE_EXAMPLE_DB"],
        principals=["acme"],
        mcp_servers=[payments],
        credentials=secrets_by_ref.get,
        webhooks=[WebhookEndpoint(principal="acme", url=hook_url, secret_ref="acme-webhook")],
    )
    # --8<-- [end:settings]
    payment = {
        "amount": 120,
        "currency": "EUR",
        "payee": "ACME Corp",
        "payment_key": "pay-" + secrets.token_hex(4),
    }
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        await run.call_tool("payments", "approve_payment", payment, wait=WaitMode.DETACH)
        with anyio.fail_after(30):  # the payment asks for approval: the receiver is told
            while not items:
                await anyio.sleep(0.05)
        [item] = items
        assert item["type"] == "attention.input_waiting", item
        waiting = scrape(metrics_port, "bridge_attention_items", kind="input_waiting")
        assert waiting == 1, waiting
        # --8<-- [start:answer]
        input_ref = item["data"]["event"]["input_ref"]
        [request] = [r for r in await bridge.pending_inputs("acme") if r.input_ref == input_ref]
        await request.accept({"approve": True})
        # --8<-- [end:answer]
        [task] = await run.wait_for([item["data"]["event"]["task_ref"]], timeout=30)
        assert task.status.value == "completed", task.status
        assert scrape(metrics_port, "bridge_attention_items", kind="input_waiting") == 0
        delivered = scrape(metrics_port, "bridge_webhook_deliveries_total", outcome="delivered")
        assert delivered >= 1, delivered
        print("approved after the webhook:", item["data"]["id"])


if __name__ == "__main__":
    import anyio

    anyio.run(main)
