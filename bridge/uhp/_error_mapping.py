"""A non-2xx UHP answer -> the typed error to raise (carrying the server's envelope)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from bridge.uhp._errors import (
    UhpAuthError,
    UhpError,
    UhpInvalidRequest,
    UhpNotFound,
    UhpQuotaExhausted,
    UhpRateLimited,
    UhpServerError,
    UhpSessionBusy,
    UhpUnsupportedVersion,
)
from bridge.uhp._models import ErrorEnvelope


def raise_for_status(response: httpx.Response) -> None:
    if not response.is_success:
        raise error_for(response)


def error_for(response: httpx.Response) -> UhpError:
    """The typed error for a non-2xx answer, carrying the envelope when there is one."""
    envelope: ErrorEnvelope | None
    try:
        envelope = ErrorEnvelope.model_validate(response.json())
    except ValueError:
        envelope = None
    status = response.status_code
    code = envelope.error.code if envelope else None
    if status in (401, 403):
        return UhpAuthError(status, envelope, response.text[:200])
    if status == 429:
        if code == "quota_exhausted":
            return UhpQuotaExhausted(status, envelope)
        return UhpRateLimited(status, envelope, retry_after(response))
    if status >= 500:
        return UhpServerError(status, envelope, response.text[:200])
    if code == "session_busy":
        return UhpSessionBusy(status, envelope)
    if code == "unsupported_protocol_version":
        return UhpUnsupportedVersion(status, envelope)
    if status == 404:
        return UhpNotFound(status, envelope)
    return UhpInvalidRequest(status, envelope, response.text[:200])


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())
