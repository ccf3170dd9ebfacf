"""Discovery and the catalogue: ``GET /v1/uhp``, harnesses and models."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge.uhp.serving import (
    SERVED_VERSIONS,
    V2026_08_11,
    discovery_document,
    served_version,
)
from harness_examples.report_harness.config import HarnessEntry
from harness_examples.report_harness.context import authenticate, harness_or_404, runtime_of

#: All four served from one code path (each version is additive; plugins, environments and
#: memories, the optional capabilities 2026-09-12, 2026-09-28 and 2026-10-04 added, are stated
#: false at the versions that define them, and their endpoints answer 404). A client that sends
#: no ``UHP-Version`` keeps getting the version this harness first served.
VERSIONS = SERVED_VERSIONS
DEFAULT_VERSION = V2026_08_11
CAPABILITIES = {
    "streaming": True,
    "sessions": True,
    "cancellation": True,
    "idempotency": True,
    "stream_resumption": True,
}


async def discovery(request: Request) -> Response:
    return JSONResponse(
        discovery_document(
            versions=VERSIONS,
            default_version=DEFAULT_VERSION,
            capabilities=CAPABILITIES,
            served=served_version(request),
            implementation={"name": "report_harness", "version": "0.1"},
        )
    )


async def list_harnesses(request: Request) -> Response:
    authenticate(request)
    harnesses = [h.public() for h in runtime_of(request).config.harnesses]
    return JSONResponse({"object": "list", "harnesses": harnesses})


async def get_harness(request: Request) -> Response:
    authenticate(request)
    return JSONResponse(harness_or_404(request, request.path_params["harness_id"]).public())


def _model(harness: HarnessEntry) -> dict[str, Any]:
    return {
        "id": harness.model,
        "label": f"{harness.model} (scripted, deterministic)",
        "backend": harness.base,
        "available": True,
        "default": True,
    }


async def list_models(request: Request) -> Response:
    authenticate(request)
    backends: dict[str, dict[str, Any]] = {}
    for h in runtime_of(request).config.harnesses:
        backend = backends.setdefault(h.base, {"default": h.model, "models": []})
        if all(m["id"] != h.model for m in backend["models"]):
            backend["models"].append(_model(h))
    return JSONResponse({"backends": backends})


async def harness_models(request: Request) -> Response:
    authenticate(request)
    h = harness_or_404(request, request.path_params["harness_id"])
    return JSONResponse(
        {"harness_id": h.id, "backend": h.base, "default": h.model, "models": [_model(h)]}
    )
