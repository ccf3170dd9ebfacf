"""A UHP-creating process that SIGKILLs itself after its POST was answered and before the
response id is committed (for recover + repost tests).

    python -m tests.support.uhp_post_driver --db PATH --base-url URL --token T --input TEXT

It sends one blocking ``POST /v1/responses`` through :class:`UhpClient`, prints the run
reference as soon as the run (its key and body) is committed, and dies with SIGKILL when the
client is about to record the server's answer: the server ran the request, the ledger holds no
response id. The crash is injected by wrapping one ledger method; the client is unaltered.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from typing import Any

import anyio

from bridge._ledger.runs import RunWrites
from bridge._ledger.store import Ledger
from bridge.uhp._client import UhpClient


def _inject() -> None:
    opened = RunWrites.open_run

    @functools.wraps(opened)
    def announce(self: RunWrites, *args: Any, **kwargs: Any) -> Any:
        run = opened(self, *args, **kwargs)
        print(run.ref, flush=True)  # committed with its key and body; the POST comes next
        return run

    def die(self: RunWrites, *args: Any, **kwargs: Any) -> Any:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    for name, replacement in {"open_run": announce, "record_outer_ids": die}.items():
        setattr(RunWrites, name, replacement)


async def _run(args: argparse.Namespace) -> None:
    _inject()
    ledger = Ledger.open(args.db)
    async with UhpClient(
        args.base_url, token=args.token, ledger=ledger, principal="acme"
    ) as client:
        await client.discover()
        await client.create_response(args.input, metadata={"ticket": "T-1"})
    sys.exit("the response id was recorded: the crash point was never reached")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--input", required=True)
    anyio.run(_run, parser.parse_args())


if __name__ == "__main__":
    main()
