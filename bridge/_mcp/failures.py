"""Sorting what went wrong with an MCP request into what it means for the caller.

The SDK reports three different things as exceptions: the server answered with a JSON-RPC
error (a definite reply), the transport gave no answer (the request may or may not have been
processed), or the reply did not fit the expected shape. They must not be confused: only the
first one says anything definite about what happened on the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx2
import pydantic
from anyio import BrokenResourceError, ClosedResourceError, EndOfStream
from mcp import MCPError
from mcp.client import UnexpectedClaimedResult

from bridge._errors import ServerConnectFailed
from bridge._mcp.wire.shapes import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    TRANSPORT_CODES,
)
from bridge._mcp.wire.transport import RETRY_AFTER_CAP_MS, SYNTHETIC_KEY


class FailureKind(StrEnum):
    NO_ANSWER = "no_answer"  # transport failure or timeout: outcome unknown
    RPC_ERROR = "rpc_error"  # the server answered with a JSON-RPC error
    MALFORMED = "malformed"  # the server answered, but not with a valid shape
    UNREACHABLE = "unreachable"  # could not connect: nothing was sent


class Misbehaviour(StrEnum):
    """How a server that is reachable answered badly. It took the request, so it is never
    reported as unreachable: it is named as a misbehaving server, by kind."""

    NOT_JSON = "not_json"  # a reply that is not JSON-RPC (or not of a content type MCP uses)
    RATE_LIMITED = "rate_limited"  # HTTP 429 (a 503 may be a restart: not named)
    SLOW_REPLY = "slow_reply"  # no complete reply within the request timeout (a trickle, an
    # SSE stream that never delivers the response)
    WRONG_TASK = "wrong_task"  # a reply about another task than the one asked for


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    detail: str
    code: int | None = None
    data: Any = None
    # How long the server asked us to wait (429/503 ``Retry-After``, capped), if it did.
    retry_after_ms: int | None = None
    # Set when the server took the request and answered badly (see :class:`Misbehaviour`).
    misbehaviour: Misbehaviour | None = None

    def as_error_object(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.detail}
        if self.data is not None:
            error["data"] = self.data
        return error

    @property
    def leaves_call_outcome_unknown(self) -> bool:
        """For ``tools/call``: could the server have started the work?

        An internal error (-32603) may be raised after the tool already acted, so it is treated
        as ambiguous like a lost connection; other JSON-RPC errors reject the request itself.
        """
        if self.kind is FailureKind.RPC_ERROR:
            return self.code == INTERNAL_ERROR
        return self.kind in (FailureKind.NO_ANSWER, FailureKind.MALFORMED)


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx2.TransportError,
    ClosedResourceError,
    BrokenResourceError,
    EndOfStream,
    ConnectionError,
    TimeoutError,
    OSError,
)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def classify(exc: BaseException) -> Failure | None:
    """Map an exception from an SDK request to a :class:`Failure`; ``None`` if it is a bug."""
    exc = _leaf(exc)
    if isinstance(exc, ServerConnectFailed):
        return Failure(FailureKind.UNREACHABLE, exc.detail)
    if isinstance(exc, MCPError):
        if exc.code in TRANSPORT_CODES:
            delay = _retry_after(exc)
            return Failure(
                FailureKind.NO_ANSWER, exc.message, exc.code, None, delay, _transport_kind(exc)
            )
        if _made_by_the_sdk(exc):
            return Failure(
                FailureKind.NO_ANSWER,
                _sdk_reason(exc),
                exc.code,
                misbehaviour=Misbehaviour.NOT_JSON,
            )
        return Failure(FailureKind.RPC_ERROR, exc.message, exc.code, exc.data)
    if isinstance(exc, pydantic.ValidationError | UnexpectedClaimedResult | ValueError):
        return Failure(FailureKind.MALFORMED, _short(exc))
    if isinstance(exc, _TRANSPORT_ERRORS):
        return Failure(FailureKind.NO_ANSWER, f"{type(exc).__name__}: {exc}")
    return None


def _made_by_the_sdk(exc: MCPError) -> bool:
    """Errors the SDK fabricates locally when the reply could not be read (a non-JSON body,
    an unexpected content type, a 202 to a request). The server said nothing definite, so
    they must not be taken for a JSON-RPC rejection. Every ``-32700`` counts: a server's own
    "parse error" cannot be told apart from the SDK's, and "unknown" is the safe reading."""
    if exc.code == PARSE_ERROR:
        return True
    return exc.code == INVALID_REQUEST and exc.message.startswith(_SDK_INVALID_REQUEST_PREFIXES)


# The messages the SDK's Streamable HTTP client uses for the -32600 errors it makes itself.
_SDK_INVALID_REQUEST_PREFIXES = (
    "Unexpected content type",
    "server answered a request with 202 Accepted",
)


def _sdk_reason(exc: MCPError) -> str:
    """The bridge's own words for a reply the SDK could not read. The SDK's message quotes the
    server's raw body (its parser's error carries the input), and a reason is recorded in
    events and shown to operators: it names what went wrong, never what the server sent."""
    if exc.code == PARSE_ERROR:
        return "the server's reply could not be parsed as JSON-RPC (body not quoted)"
    for prefix in _SDK_INVALID_REQUEST_PREFIXES:
        if exc.message.startswith(prefix):
            return f"the server's reply was not read: {prefix[0].lower()}{prefix[1:]}"
    return "the server's reply was not read"


NOT_JSON = Misbehaviour.NOT_JSON


def _transport_kind(exc: MCPError) -> Misbehaviour | None:
    """A transport-level error that still shows the server answering: it ran out the request
    timeout (it accepted the connection, then never completed a reply), or it said 429."""
    if exc.code == REQUEST_TIMEOUT:
        return Misbehaviour.SLOW_REPLY
    data = exc.data
    synthetic = data.get(SYNTHETIC_KEY) if isinstance(data, dict) else None
    status = synthetic.get("httpStatus") if isinstance(synthetic, dict) else None
    return Misbehaviour.RATE_LIMITED if status == 429 else None


def _retry_after(exc: MCPError) -> int | None:
    data = exc.data
    synthetic = data.get(SYNTHETIC_KEY) if isinstance(data, dict) else None
    delay = synthetic.get("retryAfterMs") if isinstance(synthetic, dict) else None
    if isinstance(delay, int) and not isinstance(delay, bool):
        return min(max(delay, 0), RETRY_AFTER_CAP_MS)
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
