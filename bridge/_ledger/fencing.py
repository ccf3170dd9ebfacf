"""The fencing token of leased rows (pure: no I/O).

A replica incarnation holds a row when the row's ``(lease_owner, lease_incarnation)`` equals its
:class:`Membership`. Every observation a replica writes for a leased row carries that pair and
is refused inside the same locked transaction if the row has moved on, so a replica that lost
its lease (paused, partitioned, slow) cannot write a stale observation over a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge._errors import LeaseLost


@dataclass(frozen=True, slots=True)
class Membership:
    """One incarnation of a replica: its stable id and the number of this start."""

    replica_id: str
    incarnation: int

    def __str__(self) -> str:
        return f"{self.replica_id}#{self.incarnation}"


def holds(row: Any, lease: Membership) -> bool:
    return bool(row.lease_owner == lease.replica_id and row.lease_incarnation == lease.incarnation)


def check_lease(row: Any, lease: Membership | None, kind: str) -> None:
    """Refuse a leased write on a row this incarnation does not hold (no-op when unleased)."""
    if lease is not None and not holds(row, lease):
        raise LeaseLost(kind, row.ref)
