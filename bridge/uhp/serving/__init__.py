"""A small Starlette toolkit for a harness that serves UHP.

One module a job, each usable on its own:

=====================  ===================================================================
``access_log``         :func:`scrub_access_log`: no query strings (tokens) in access logs
``envelope``           :class:`UhpApiError` and the exception handlers: every non-2xx body
                       in the UHP error envelope
``versions``           :class:`VersionNegotiation`: ``UHP-Version`` refused or stamped;
                       :data:`SERVED_VERSIONS` (2026-08-11, 2026-09-12, 2026-09-28, 2026-10-04)
``capabilities``       the optional capabilities later versions introduced, per version:
                       :func:`absent_capability_routes` (their endpoints answer 404),
                       :func:`refuse_absent_references` (a task naming one of their objects)
``discovery``          :func:`discovery_document` for ``GET /v1/uhp``, at the served version
``auth``               :class:`BearerAuth`: bearer token -> principal, 401 in the envelope
``event_log``          :class:`MemoryEventLog`, :class:`EventSource`, :func:`follow_log`:
                       sequence numbers, replay from ``Last-Event-ID``, live tail
``sse``                frames, keep-alives, :class:`EventStreamResponse`, the stream headers
``idempotency``        ``Idempotency-Key``: the key record and the replay decision
``json_body``          the body read under a size limit (413) and parsed strictly (400)
``request_body``       the JSON body, its flags and budgets, :func:`read_create_request`
``response_object``    a new Response, and settling it in a terminal state
``listening``          the listening socket bound before start, the port reported to a parent
host tables            a harness's own tables beside the ledger, run as the ledger runs its
                       own (``harness_examples/report_harness/store.py``):
                       :func:`create_ledger_engine` opens a URL as the ledger does,
                       :func:`dialect_of` says whether its calls run inline and gives its
                       driver session (a :class:`Cursor` a transaction), :class:`GroupCommit`
                       commits concurrent :class:`StagedCommit` writes together,
                       :class:`LedgerRunner` runs them from async code,
                       :func:`refuse_if_unavailable` turns "no writes now" into
                       ``LedgerUnavailable`` (:func:`first_line`: an error's first line)
=====================  ===================================================================

The app keeps what is its own: the runs, what it stores, the routes. See
``docs/uhp-side.md`` ("Serving UHP from your harness").
"""

from bridge._extras import require_extra

require_extra("the UHP serving kit (bridge.uhp.serving)", "serve")

from typing import TYPE_CHECKING, Any

from bridge._public import load_public, publish

if TYPE_CHECKING:
    from bridge._ledger.commit.availability import (
        first_line as first_line,
        refuse_if_unavailable as refuse_if_unavailable,
    )
    from bridge._ledger.commit.driver_sessions import Cursor as Cursor
    from bridge._ledger.commit.group_commit import (
        GroupCommit as GroupCommit,
        StagedCommit as StagedCommit,
    )
    from bridge._ledger.runner import LedgerRunner as LedgerRunner
    from bridge._ledger.schema.dialects import dialect_of as dialect_of
    from bridge._ledger.schema.engine import create_ledger_engine as create_ledger_engine
from bridge.uhp.serving._access_log import scrub_access_log
from bridge.uhp.serving._auth import BearerAuth, digest_principal
from bridge.uhp.serving._capabilities import (
    absent_capability_routes,
    capabilities_at,
    refuse_absent_references,
)
from bridge.uhp.serving._discovery import discovery_document
from bridge.uhp.serving._envelope import (
    UhpApiError,
    conflict,
    error_handlers,
    invalid_request,
    not_found,
)
from bridge.uhp.serving._event_log import (
    TERMINAL_EVENT_FOR_STATUS,
    TERMINAL_STATUSES,
    ChangeSignal,
    EventSource,
    LoggedEvent,
    MemoryEventLog,
    follow_log,
    sse_frames,
)
from bridge.uhp.serving._idempotency import (
    KeyRecord,
    MemoryKeyStore,
    idempotency_key,
    replayed_response_id,
    request_fingerprint,
)
from bridge.uhp.serving._json_body import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    parse_json,
    read_limited,
)
from bridge.uhp.serving._listening import (
    BACKLOG,
    ReportPortOnStartup,
    add_port_arguments,
    bound_port,
    check_port_arguments,
    listening_socket,
    run_uvicorn,
    uvicorn_server,
    write_port_file,
)
from bridge.uhp.serving._request_body import (
    MAX_BUDGET,
    CreateRequest,
    budget,
    flag,
    json_object,
    read_create_request,
)
from bridge.uhp.serving._response_object import (
    RESERVED_FIELDS,
    ignored_fields,
    new_id,
    new_message_item,
    new_response,
    new_text_part,
    settle_response,
)
from bridge.uhp.serving._sse import (
    KEEPALIVE_FRAME,
    EventStreamResponse,
    resume_start,
    sse_frame,
    wants_stream,
)
from bridge.uhp.serving._versions import (
    SERVED_VERSIONS,
    V2026_08_11,
    V2026_09_12,
    V2026_09_28,
    V2026_10_04,
    VersionNegotiation,
    served_version,
)

__all__ = [
    "BACKLOG",
    "KEEPALIVE_FRAME",
    "MAX_BODY_BYTES",
    "MAX_BUDGET",
    "MAX_JSON_DEPTH",
    "RESERVED_FIELDS",
    "SERVED_VERSIONS",
    "TERMINAL_EVENT_FOR_STATUS",
    "TERMINAL_STATUSES",
    "V2026_08_11",
    "V2026_09_12",
    "V2026_09_28",
    "V2026_10_04",
    "BearerAuth",
    "ChangeSignal",
    "CreateRequest",
    "Cursor",
    "EventSource",
    "EventStreamResponse",
    "GroupCommit",
    "KeyRecord",
    "LedgerRunner",
    "LoggedEvent",
    "MemoryEventLog",
    "MemoryKeyStore",
    "ReportPortOnStartup",
    "StagedCommit",
    "UhpApiError",
    "VersionNegotiation",
    "absent_capability_routes",
    "add_port_arguments",
    "bound_port",
    "budget",
    "capabilities_at",
    "check_port_arguments",
    "conflict",
    "create_ledger_engine",
    "dialect_of",
    "digest_principal",
    "discovery_document",
    "error_handlers",
    "first_line",
    "flag",
    "follow_log",
    "idempotency_key",
    "ignored_fields",
    "invalid_request",
    "json_object",
    "listening_socket",
    "new_id",
    "new_message_item",
    "new_response",
    "new_text_part",
    "not_found",
    "parse_json",
    "read_create_request",
    "read_limited",
    "refuse_absent_references",
    "refuse_if_unavailable",
    "replayed_response_id",
    "request_fingerprint",
    "resume_start",
    "run_uvicorn",
    "scrub_access_log",
    "served_version",
    "settle_response",
    "sse_frame",
    "sse_frames",
    "uvicorn_server",
    "wants_stream",
    "write_port_file",
]


# The host-table names load the ledger's database stack (SQLAlchemy): only on first use, so a
# server that takes only the listening helpers stays light.
_HOST_TABLES = {
    "Cursor": "bridge._ledger.commit.driver_sessions",
    "GroupCommit": "bridge._ledger.commit.group_commit",
    "StagedCommit": "bridge._ledger.commit.group_commit",
    "first_line": "bridge._ledger.commit.availability",
    "refuse_if_unavailable": "bridge._ledger.commit.availability",
    "LedgerRunner": "bridge._ledger.runner",
    "dialect_of": "bridge._ledger.schema.dialects",
    "create_ledger_engine": "bridge._ledger.schema.engine",
}

for _name in set(__all__) - _HOST_TABLES.keys():
    publish(globals()[_name], __name__)


def __getattr__(name: str) -> Any:
    return load_public(__name__, globals(), _HOST_TABLES, name)
