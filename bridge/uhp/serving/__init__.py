"""A small Starlette toolkit for a harness that serves UHP.

One module a job, each usable on its own:

=====================  ===================================================================
``access_log``         :func:`scrub_access_log`: no query strings (tokens) in access logs
``envelope``           :class:`UhpApiError` and the exception handlers: every non-2xx body
                       in the UHP error envelope
``versions``           :class:`VersionNegotiation`: ``UHP-Version`` refused or stamped;
                       :data:`SERVED_VERSIONS` (2026-08-11 and 2026-09-28)
``discovery``          :func:`discovery_document` for ``GET /v1/uhp``
``auth``               :class:`BearerAuth`: bearer token -> principal, 401 in the envelope
``event_log``          :class:`MemoryEventLog`, :class:`EventSource`, :func:`follow_log`:
                       sequence numbers, replay from ``Last-Event-ID``, live tail
``sse``                frames, keep-alives, :class:`EventStreamResponse`, the stream headers
``idempotency``        ``Idempotency-Key``: the key record and the replay decision
``json_body``          the body read under a size limit (413) and parsed strictly (400)
``request_body``       the JSON body, its flags and budgets, :func:`read_create_request`
``response_object``    a new Response, and settling it in a terminal state
=====================  ===================================================================

The app keeps what is its own: the runs, what it stores, the routes. See
``docs/uhp-side.md`` ("Serving UHP from your harness").
"""

from bridge.extras import require_extra

require_extra("the UHP serving kit (bridge.uhp.serving)", "serve")

from bridge.uhp.serving.access_log import scrub_access_log
from bridge.uhp.serving.auth import BearerAuth, digest_principal
from bridge.uhp.serving.discovery import discovery_document
from bridge.uhp.serving.envelope import (
    UhpApiError,
    conflict,
    error_handlers,
    invalid_request,
    not_found,
)
from bridge.uhp.serving.event_log import (
    TERMINAL_EVENT_FOR_STATUS,
    TERMINAL_STATUSES,
    ChangeSignal,
    EventSource,
    LoggedEvent,
    MemoryEventLog,
    follow_log,
    sse_frames,
)
from bridge.uhp.serving.idempotency import (
    KeyRecord,
    MemoryKeyStore,
    idempotency_key,
    replayed_response_id,
    request_fingerprint,
)
from bridge.uhp.serving.json_body import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    parse_json,
    read_limited,
)
from bridge.uhp.serving.request_body import (
    MAX_BUDGET,
    CreateRequest,
    budget,
    flag,
    json_object,
    read_create_request,
)
from bridge.uhp.serving.response_object import (
    RESERVED_FIELDS,
    ignored_fields,
    new_id,
    new_message_item,
    new_response,
    new_text_part,
    settle_response,
)
from bridge.uhp.serving.sse import (
    KEEPALIVE_FRAME,
    EventStreamResponse,
    resume_start,
    sse_frame,
    wants_stream,
)
from bridge.uhp.serving.versions import (
    SERVED_VERSIONS,
    V2026_08_11,
    V2026_09_28,
    VersionNegotiation,
    served_version,
)

__all__ = [
    "KEEPALIVE_FRAME",
    "MAX_BODY_BYTES",
    "MAX_BUDGET",
    "MAX_JSON_DEPTH",
    "RESERVED_FIELDS",
    "SERVED_VERSIONS",
    "TERMINAL_EVENT_FOR_STATUS",
    "TERMINAL_STATUSES",
    "V2026_08_11",
    "V2026_09_28",
    "BearerAuth",
    "ChangeSignal",
    "CreateRequest",
    "EventSource",
    "EventStreamResponse",
    "KeyRecord",
    "LoggedEvent",
    "MemoryEventLog",
    "MemoryKeyStore",
    "UhpApiError",
    "VersionNegotiation",
    "budget",
    "conflict",
    "digest_principal",
    "discovery_document",
    "error_handlers",
    "flag",
    "follow_log",
    "idempotency_key",
    "ignored_fields",
    "invalid_request",
    "json_object",
    "new_id",
    "new_message_item",
    "new_response",
    "new_text_part",
    "not_found",
    "parse_json",
    "read_create_request",
    "read_limited",
    "replayed_response_id",
    "request_fingerprint",
    "resume_start",
    "scrub_access_log",
    "served_version",
    "settle_response",
    "sse_frame",
    "sse_frames",
    "wants_stream",
]
