"""Which principals a ledger holds runs of: for an operator who owns the whole ledger
(``bridge attention --all-principals``). The only ledger-wide read: everything else it leads
to is read per principal, each through its own scope."""

from __future__ import annotations

from sqlalchemy import select

from bridge._ledger._base import RUNS, LedgerCore


def principals_in(ledger: LedgerCore) -> list[str]:
    """Every principal with at least one run in the ledger, sorted."""
    with ledger._read() as conn:
        rows = conn.execute(select(RUNS.c.principal).distinct().order_by(RUNS.c.principal))
        return [str(principal) for (principal,) in rows]
