"""[postgres]: a real bridged call on a PostgreSQL ledger (argv[3], a throwaway server the
check started), or, where no PostgreSQL runs here, the driver loading and a refused connect
reported as LedgerUnavailable."""

import sys

import anyio
from common import bridged_call, done, settings

import psycopg  # noqa: F401

PG_URL = sys.argv[3] if len(sys.argv) > 3 else ""


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings(ledger_url=PG_URL)) as bridge:
        await bridged_call(bridge)


if PG_URL:
    anyio.run(main)
else:
    from bridge import Ledger
    from bridge.errors import LedgerUnavailable

    try:
        Ledger.open("postgresql://smoke@127.0.0.1:1/none")
    except LedgerUnavailable:
        pass
    else:
        raise AssertionError("a refused PostgreSQL connect must raise LedgerUnavailable")
done("postgres" + ("" if PG_URL else " (no PostgreSQL here: driver and refused connect only)"))
