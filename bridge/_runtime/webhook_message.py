"""One attention item as a signed webhook request: its body and its Standard Webhooks headers.

The body is built from the stored event, the same bytes on every attempt; the signature is
made by the ``standardwebhooks`` package (extra ``[webhooks]``), never by hand, over the
item's stable id, the attempt's timestamp and the body.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bridge._extras import require_extra

require_extra("webhooks", "webhooks")

from standardwebhooks import Webhook  # noqa: E402

from bridge._ids import canonical_json  # noqa: E402
from bridge._ledger.webhook_outbox import OutboxItem  # noqa: E402


def message_body(principal: str, item: OutboxItem) -> bytes:
    """``{"type": "attention.<kind>", "timestamp", "data": {...}}`` (the Standard Webhooks
    payload shape); ``data.event`` is the run's event as its log holds it."""
    created = datetime.fromtimestamp(item.created_at_ms / 1000, tz=UTC)
    payload = {
        "type": f"attention.{item.kind}",
        "timestamp": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "data": {
            "id": item.id,
            "kind": item.kind,
            "principal": principal,
            "run_ref": item.run_ref,
            "seq": item.seq,
            "event": json.loads(item.event_json),
        },
    }
    return canonical_json(payload)


def signed_headers(secret: str, item_id: str, body: bytes, now: datetime) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, and the body's content type."""
    signature = Webhook(secret).sign(item_id, now, body)
    return {
        "content-type": "application/json",
        "webhook-id": item_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
