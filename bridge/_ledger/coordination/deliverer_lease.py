"""Who delivers the webhook outbox: one replica incarnation per ledger at a time.

The lease is one row (``bridge_webhook_deliverer``) held exactly as a leased task or run is
(:mod:`bridge._ledger.coordination.leases`): it names a ``(replica, incarnation)``, stays theirs
while that membership is unexpired, and any live replica takes it once the holder's membership
lapsed or a newer incarnation of it started. Two deliverers may overlap only across a lapse;
a receiver then sees a repeat, with the same id.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, and_, or_, update

from bridge._ledger.coordination.leases import _alive, _claimable
from bridge._ledger.fencing import Membership
from bridge._ledger.schema.models import WebhookDeliverer
from bridge._ledger.store import Ledger

DELIVERER = cast(Table, WebhookDeliverer.__table__)  # type: ignore[attr-defined]
_ROW = "outbox"


def hold_deliverer(ledger: Ledger, member: Membership) -> bool:
    """Take or keep the deliverer's lease for ``member``: True while it is theirs."""
    mine = and_(
        DELIVERER.c.lease_owner == member.replica_id,
        DELIVERER.c.lease_incarnation == member.incarnation,
    )
    statement = (
        update(DELIVERER)
        .where(
            DELIVERER.c.name == _ROW,
            or_(mine, _claimable(DELIVERER)),
            _alive(member.replica_id, member.incarnation),
        )
        .values(lease_owner=member.replica_id, lease_incarnation=member.incarnation)
    )
    with ledger.engine.begin() as conn:
        return conn.execute(statement).rowcount == 1


def release_deliverer(ledger: Ledger, member: Membership) -> None:
    """Clean shutdown: let another replica take over at once."""
    statement = (
        update(DELIVERER)
        .where(
            DELIVERER.c.name == _ROW,
            DELIVERER.c.lease_owner == member.replica_id,
            DELIVERER.c.lease_incarnation == member.incarnation,
        )
        .values(lease_owner=None, lease_incarnation=None)
    )
    with ledger.engine.begin() as conn:
        conn.execute(statement)
