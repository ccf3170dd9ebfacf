"""What every endpoint of the report harness needs from a request: the runtime, the caller's
principal, and the objects it may see (anything out of its scope answers 404)."""

from __future__ import annotations

import copy
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bridge.uhp.serving import EventStreamResponse, not_found
from harness_examples.report_harness.config import HarnessEntry
from harness_examples.report_harness.runtime import Runtime
from harness_examples.report_harness.store import StoredResponse


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def authenticate(request: Request) -> str:
    """The caller's principal (a digest of its bearer token)."""
    return runtime_of(request).auth.principal(request)


def harness_or_404(request: Request, harness_id: str) -> HarnessEntry:
    harness = runtime_of(request).config.harness(harness_id)
    if harness is None:
        raise not_found("harness_not_found", f"No harness {harness_id!r}.")
    return harness


async def response_or_404(request: Request, principal: str, response_id: str) -> StoredResponse:
    rt = runtime_of(request)
    stored: StoredResponse | None = await rt.db(rt.store.get, response_id, principal)
    if stored is None:
        raise not_found("response_not_found", f"No response {response_id!r}.")
    return stored


def current_body(request: Request, stored: StoredResponse) -> dict[str, Any]:
    """The response as it is now: the live run's body while it runs here, else the stored one
    (also while the store refuses the run's terminal write: memory claims nothing it lacks)."""
    rt = runtime_of(request)
    live = rt.live.get(stored.id)
    if live is None or stored.id in rt.unsettled:
        return stored.body
    return copy.deepcopy(live.body)


def stream(request: Request, response_id: str, start: int) -> Response:
    """The response's event log from sequence ``start`` on, as an SSE stream."""
    return EventStreamResponse(runtime_of(request).frames(response_id, start))
