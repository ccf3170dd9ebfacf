"""A bridge process with a webhook endpoint, for the crash test of the webhook outbox.

    BRIDGE_TEST_WEBHOOK_SECRET=whsec_… python -m tests.support.webhook_driver \
        --db PATH --url URL [--items N]

With ``--items N`` it first records N attention items (one anomaly on each of N runs), each
committed with its outbox row, and prints ``written``; then (or at once without it) it
delivers until it is killed. The test SIGKILLs it while deliveries are in flight.
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio

from bridge import Bridge, BridgeSettings, WebhookEndpoint
from bridge._runtime import webhook_deliverer
from tests.support.builders import new_run

SECRET_ENV = "BRIDGE_TEST_WEBHOOK_SECRET"
# The killed process's deliverer lease lapses after this (not the default 15 s): the restarted
# one takes over sooner, and the test stays short.
webhook_deliverer.OWN_LEASE_MS = 3_000


async def _main(db: str, url: str, items: int) -> None:
    secret = os.environ[SECRET_ENV]
    hook = WebhookEndpoint(principal="acme", url=url, secret_ref="hook", first_retry_ms=100)
    settings = BridgeSettings(
        ledger_url=db,
        principals=["acme"],
        webhooks=[hook],
        credentials=lambda ref: secret if ref == "hook" else None,
        recover_on_start=False,
    )
    async with Bridge.open(settings) as bridge:
        tenant = bridge._ledger.for_principal("acme")
        for n in range(items):
            run = new_run(tenant)
            tenant.runs.record_anomaly(run.ref, "malformed_reply", f"item {n}")
        if items:
            print("written", flush=True)
        await anyio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--items", type=int, default=0)
    args = parser.parse_args()
    anyio.run(_main, args.db, args.url, args.items)


if __name__ == "__main__":
    sys.exit(main())
