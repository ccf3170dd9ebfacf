"""The event loop the bridge's own processes run on (the gateway; the example harness gets
the same from uvicorn's ``loop="auto"``): uvloop where it is installed, asyncio's otherwise.

uvloop is a dependency outside Windows. Measured on the example harness serving 200
concurrent responses (bench section 10), uvloop with httptools cut the harness's CPU per
response by about a tenth against asyncio's loop with h11. An application embedding the
bridge picks its own loop; the bridge runs on either.
"""

from __future__ import annotations

from importlib.util import find_spec


def backend_options() -> dict[str, bool]:
    """``anyio.run(..., backend_options=backend_options())``: uvloop when it is installed."""
    return {"use_uvloop": True} if find_spec("uvloop") is not None else {}
