"""The chunk-at-a-time SSE decoding the stream follower relies on (bridge.uhp._sse_decoding).

It drives httpx-sse's *private* decoders, so these tests pin exactly what the follower needs
from them: any split of the byte stream into chunks decodes to the same events, ``id:`` is
kept, multi-line ``data:`` is joined, a comment comes out as an empty-data event (skipped by
the follower), and an event cut off without its blank line is never dispatched.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge._errors import BridgeError
from bridge.uhp._sse_decoding import SUPPORTED_HTTPX_SSE, SseDecodingUnavailable, sse_frames

pytestmark = pytest.mark.anyio

WIRE = (
    b'id: 0\ndata: {"type":"response.created","sequence_number":0}\n\n'
    b": keep-alive\n\n"
    b"id: 1\r\ndata: first line\r\ndata: second line\r\n\r\n"
    b"event: vendor.thing\ndata: x\n\n"
)


def _response(chunks: list[bytes]) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"})


async def _decode(chunks: list[bytes]) -> list[tuple[str, str, str | None]]:
    return [(e.event, e.data, e.id) async for e in sse_frames(_response(chunks))]


EXPECTED = [
    ("message", '{"type":"response.created","sequence_number":0}', "0"),
    ("message", "", None),  # the comment's blank line: empty data, skipped by the follower
    ("message", "first line\nsecond line", "1"),
    ("vendor.thing", "x", None),
]


async def test_one_chunk_decodes_every_event() -> None:
    decoded = await _decode([WIRE])
    assert [(event, data) for event, data, _ in decoded] == [(e, d) for e, d, _ in EXPECTED]
    assert decoded[0][2] == "0" and decoded[2][2] == "1"


async def test_every_split_point_decodes_the_same_events() -> None:
    whole = await _decode([WIRE])
    for cut in range(1, len(WIRE)):
        assert await _decode([WIRE[:cut], WIRE[cut:]]) == whole, f"split at byte {cut}"


async def test_byte_at_a_time_decodes_the_same_events() -> None:
    assert await _decode([WIRE[i : i + 1] for i in range(len(WIRE))]) == await _decode([WIRE])


async def test_an_event_without_its_blank_line_is_never_dispatched() -> None:
    # A connection cut mid-event must not hand the follower a half event.
    decoded = await _decode([b"id: 0\ndata: {}\n\n", b"id: 1\ndata: {}"])
    assert [data_id for _, _, data_id in decoded] == ["0"]


def test_the_supported_range_is_the_pinned_one() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("httpx-sse")]
    assert pins == [f"httpx-sse{SUPPORTED_HTTPX_SSE}"]


# Run in a fresh interpreter: an httpx-sse whose private decoders moved (a stand-in module
# without them), then the import of the decoding module.
_MOVED_API = """
import sys, types
import httpx_sse  # the real package loads; then its private module "moves"
sys.modules["httpx_sse._decoders"] = types.ModuleType("httpx_sse._decoders")
try:
    import bridge.uhp._sse_decoding
except ImportError as exc:
    print(type(exc).__name__, exc)
"""


def test_a_moved_private_api_fails_with_a_typed_error_naming_the_range() -> None:
    assert issubclass(SseDecodingUnavailable, ImportError)
    assert issubclass(SseDecodingUnavailable, BridgeError)
    out = subprocess.run(
        [sys.executable, "-c", _MOVED_API], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.startswith("SseDecodingUnavailable ")
    assert f"httpx-sse{SUPPORTED_HTTPX_SSE}" in out and "SSEDecoder" in out
