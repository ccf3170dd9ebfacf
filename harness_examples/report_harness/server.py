"""The report harness's UHP server: the Starlette app over the runtime and the endpoints.

The UHP plumbing (error envelope, version negotiation, bearer auth, event log replay, SSE
framing, idempotency keys) is the library's ``bridge.uhp.serving`` kit; the modules here
hold only what is this harness's own: ``runtime`` (live runs and the scripted agent),
``create`` (``POST /v1/responses``), ``responses`` (the other response endpoints),
``catalogue`` (discovery, harnesses, models) and ``store`` (its tables).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from bridge.uhp.serving import VersionNegotiation, absent_capability_routes, error_handlers
from harness_examples.report_harness.catalogue import (
    CAPABILITIES,
    DEFAULT_VERSION,
    VERSIONS,
    discovery,
    get_harness,
    harness_models,
    list_harnesses,
    list_models,
)
from harness_examples.report_harness.config import HarnessConfig
from harness_examples.report_harness.create import create_response
from harness_examples.report_harness.responses import (
    answer_mcp_input,
    cancel_response,
    cancel_session,
    delete_response,
    delete_session,
    get_response,
    get_session,
    input_items,
)
from harness_examples.report_harness.runtime import Runtime
from harness_examples.report_harness.store import HarnessStore


def create_app(config: HarnessConfig, db_url: str, store: HarnessStore | None = None) -> ASGIApp:
    """The harness app over ``db_url`` (``store``: its tables, opened here by default)."""
    store = store or HarnessStore.open(db_url)
    runtime = Runtime(config, store, db_url)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with runtime.running():
            yield
        store.close()

    routes = [
        Route("/v1/uhp", discovery, methods=["GET"]),
        Route("/v1/harnesses", list_harnesses, methods=["GET"]),
        Route("/v1/harnesses/{harness_id}", get_harness, methods=["GET"]),
        Route("/v1/harnesses/{harness_id}/models", harness_models, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
        Route("/v1/responses/{response_id}/mcp_inputs", answer_mcp_input, methods=["POST"]),
        Route("/v1/sessions/{session_id}", get_session, methods=["GET"]),
        Route("/v1/sessions/{session_id}", delete_session, methods=["DELETE"]),
        Route("/v1/sessions/{session_id}/cancel", cancel_session, methods=["POST"]),
        *absent_capability_routes(CAPABILITIES),
    ]
    app = Starlette(routes=routes, exception_handlers=error_handlers(), lifespan=lifespan)
    app.state.runtime = runtime
    return VersionNegotiation(app, supported=VERSIONS, default=DEFAULT_VERSION)
