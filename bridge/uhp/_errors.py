"""Typed UHP errors: a failed *request* (non-2xx with the error envelope), and stream faults.

A failed *task* is not an error here: it is a response with ``status: "failed"`` (HTTP 200).
"""

from __future__ import annotations

from bridge._errors import BridgeError
from bridge.uhp._models import ErrorBody, ErrorEnvelope


class UhpError(BridgeError):
    """A UHP request failed; carries the server's envelope when it sent one."""

    def __init__(self, status: int, envelope: ErrorEnvelope | None, text: str = "") -> None:
        self.status = status
        self.envelope = envelope
        body = envelope.error if envelope else None
        self.type = body.type if body else None
        self.code = body.code if body else None
        message = (body.message if body else None) or text or "request failed"
        super().__init__(f"HTTP {status} {self.code or ''}: {message}".strip())


class UhpAuthError(UhpError):
    """401/403: fix the credential or the scope; never retried."""


class UhpInvalidRequest(UhpError):
    """4xx invalid_request_error (including not found, harness_mismatch): never retried."""


class UhpNotFound(UhpInvalidRequest):
    """404 ``response_not_found`` / ``session_not_found`` / ``session_expired``."""


class UhpSessionBusy(UhpInvalidRequest):
    """409 ``session_busy``: retried only after the session's in-flight task ends."""


class UhpRateLimited(UhpError):
    """429 ``rate_limited``: retried after ``Retry-After``."""

    def __init__(self, status: int, envelope: ErrorEnvelope | None, retry_after: float | None):
        super().__init__(status, envelope)
        self.retry_after = retry_after


class UhpQuotaExhausted(UhpError):
    """429 ``quota_exhausted``: nothing changes until the quota does; never retried."""


class UhpServerError(UhpError):
    """5xx: retried with exponential backoff and jitter."""


class UhpUnsupportedVersion(UhpInvalidRequest):
    """400 ``unsupported_protocol_version``; ``supported`` lists what the server serves."""

    @property
    def supported(self) -> list[str]:
        """The protocol versions the server says it supports."""
        detail = self.envelope.error.detail if self.envelope else None
        found = detail.get("supported") if isinstance(detail, dict) else None
        return [str(v) for v in found] if isinstance(found, list) else []


def no_common_version(served: list[str], spoken: tuple[str, ...]) -> UhpUnsupportedVersion:
    """Discovery lists no version this client speaks: refused before any request is sent,
    shaped as the server's own refusal would be (``supported`` lists what it serves)."""
    body = ErrorBody(
        type="invalid_request_error",
        code="unsupported_protocol_version",
        message=f"the server serves UHP {served or 'no version'}; the client speaks {list(spoken)}",
        param="UHP-Version",
        detail={"supported": list(served), "client_versions": list(spoken)},
    )
    return UhpUnsupportedVersion(400, ErrorEnvelope(error=body))


class StreamFault(BridgeError):
    """The stream broke in a way that makes it unsafe to keep reading it (resume instead)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class ResponseNotFollowable(BridgeError):
    """The run has no response id yet, or the server no longer knows it."""


class RequestNotRepostable(BridgeError):
    """A run's request cannot be sent again as it was: no body was recorded (a run registered
    by an older bridge, or not by the UHP client), or credentials were scrubbed out of it."""
