"""503 for a ledger that cannot take work: :class:`~bridge.errors.LedgerUnavailable` (its file
deleted under the process, read-only, full, or its write lock held past the wait), and the
database driver's ``OperationalError`` (PostgreSQL stopped or unreachable while serving). The
client may retry later; the reason stays in the server's log (it names a file path or host)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from bridge.errors import LedgerUnavailable
from bridge.uhp.serving.envelope import UhpApiError

log = logging.getLogger("bridge.uhp.serving")

RETRY_AFTER_S = 5


async def on_ledger_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LedgerUnavailable)
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return _unavailable()


async def on_database_unreachable(request: Request, exc: Exception) -> Response:
    # Only the first line: a driver message can run to a page of connection attempts.
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    log.error("%s %s: database unavailable: %s", request.method, request.url.path, reason)
    return _unavailable()


def _unavailable() -> Response:
    return UhpApiError(
        503,
        "server_error",
        "ledger_unavailable",
        "The server cannot store work right now; try again later.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    ).response()
