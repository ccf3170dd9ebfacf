"""A UHP-following process that SIGKILLs itself mid-stream (for crash tests).

    python -m tests.support.uhp_driver --db PATH --base-url URL --input TEXT --kill-after N

It starts a streaming response through :class:`UhpClient`, prints the run reference, consumes
N events (each one checkpointed), then dies with SIGKILL.
"""

from __future__ import annotations

import argparse
import os
import signal

import anyio

from bridge._config import FollowConfig
from bridge._ledger.store import Ledger
from bridge.uhp._client import UhpClient


async def _run(args: argparse.Namespace) -> None:
    ledger = Ledger.open(args.db)
    follow = FollowConfig(checkpoint_interval_ms=0)  # every delivered event is committed
    async with UhpClient(
        args.base_url, token="test-token", ledger=ledger, principal="acme", follow=follow
    ) as client:
        follower = await client.stream_response(args.input, harness_id="chrn_test")
        print(follower.run_ref, flush=True)
        seen = 0
        async for event in follower:
            seen += 1
            print(event.sequence_number, flush=True)
            if seen == args.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--kill-after", type=int, required=True)
    anyio.run(_run, parser.parse_args())


if __name__ == "__main__":
    main()
