"""The UHP error envelope: every non-2xx body is ``{"error": {type, code, message, param,
detail}}`` (errors chapter). Raise :class:`UhpApiError` anywhere in a handler; the handlers
from :func:`error_handlers` turn it, Starlette's own HTTP errors and any crash into that shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge._errors import LedgerUnavailable

log = logging.getLogger("bridge.uhp.serving")

#: Status -> (code, message) for Starlette's own errors (unknown path, wrong method).
_ROUTING_ERRORS = {
    404: ("not_found", "No such endpoint."),
    405: ("method_not_allowed", "Method not allowed on this endpoint."),
}


class UhpApiError(Exception):
    """A request failure, answered with the UHP error envelope and ``status``."""

    def __init__(
        self,
        status: int,
        type_: str,
        code: str,
        message: str,
        *,
        param: str | None = None,
        detail: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.code = code
        self.message = message
        self.param = param
        self.detail = detail
        self.headers = dict(headers) if headers else None

    def body(self) -> dict[str, Any]:
        """The envelope as JSON data."""
        return {
            "error": {
                "type": self.type,
                "code": self.code,
                "message": self.message,
                "param": self.param,
                "detail": self.detail,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid_request(
    message: str, param: str | None = None, *, code: str = "invalid_value", status: int = 400
) -> UhpApiError:
    """``invalid_request_error``: the client sent something this server cannot act on."""
    return UhpApiError(status, "invalid_request_error", code, message, param=param)


def not_found(code: str, message: str) -> UhpApiError:
    """404 ``invalid_request_error``; out-of-scope ids answer this too, never 403."""
    return UhpApiError(404, "invalid_request_error", code, message)


def conflict(
    code: str, message: str, *, param: str | None = None, detail: Any = None
) -> UhpApiError:
    """409 ``invalid_request_error`` (``session_busy``, ``harness_mismatch``, ...)."""
    return UhpApiError(409, "invalid_request_error", code, message, param=param, detail=detail)


Handler = Callable[[Request, Exception], Awaitable[Response]]


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UhpApiError)
    return exc.response()


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code, message = _ROUTING_ERRORS.get(
        exc.status_code, ("invalid_request", "The request is not valid.")
    )
    return invalid_request(message, code=code, status=exc.status_code).response()


async def _on_crash(request: Request, exc: Exception) -> Response:
    # The traceback goes to the log only: a message must never carry a stack trace.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return UhpApiError(500, "server_error", "internal_error", "The server failed.").response()


#: Seconds a client is told to wait after a 503: the ledger cannot take work now (its file
#: deleted under the process, read-only, full, or its write lock held past the wait; or the
#: database driver's ``OperationalError``: PostgreSQL stopped or unreachable while serving).
#: The reason stays in the server's log (it names a file path or host).
RETRY_AFTER_S = 5


async def _on_ledger_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LedgerUnavailable)
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return _unavailable()


async def _on_database_unreachable(request: Request, exc: Exception) -> Response:
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


def error_handlers() -> dict[Any, Handler]:
    """``exception_handlers`` for ``Starlette(...)``: every error leaves in the envelope."""
    from sqlalchemy.exc import OperationalError

    return {
        UhpApiError: _on_api_error,
        HTTPException: _on_http_error,
        LedgerUnavailable: _on_ledger_unavailable,
        OperationalError: _on_database_unreachable,
        Exception: _on_crash,
    }
