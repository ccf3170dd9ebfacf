"""[metrics]: the Prometheus scrape endpoint serves the figures of a real bridged call."""

import urllib.request

import anyio
from common import bridged_call, done, settings

from bridge._telemetry.prometheus import serve_prometheus

port, stop = serve_prometheus("127.0.0.1", 0)


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
            text = page.read().decode()
    assert "bridge_polls_total" in text and "bridge_attention_items" in text, text[-2000:]
    assert "bridge_ledger_commit_duration_seconds_count" in text, text[-2000:]


anyio.run(main)
stop()
done("metrics")
