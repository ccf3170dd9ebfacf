"""Property-based fuzzing of the report harness's HTTP surface (a real server over loopback).

Every generated request (``POST /v1/responses`` bodies, raw or JSON, with hostile numbers,
strings and nesting; the ``UHP-Version``, ``Idempotency-Key``, ``Last-Event-ID`` and
``Authorization`` headers; path and query parameters) must be answered within a deadline with
a 2xx or with a 4xx in the UHP error envelope, never a 5xx; and the responses created before
the run must read back unchanged after every case.

Case count: ``BRIDGE_FUZZ_EXAMPLES`` (default 300, the CI size). The nightly size is
``BRIDGE_FUZZ_EXAMPLES=10000 python -m pytest tests/test_uhp_api_fuzz.py -p no:cacheprovider``
(see docs/guarantees.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness_examples.report_harness.create import KNOWN_FIELDS
from tests.support.processes import ServerProcess

TOKEN = "fuzz-token"
OTHER_TOKEN = "fuzz-other-token"
EXAMPLES = int(os.environ.get("BRIDGE_FUZZ_EXAMPLES", "300"))
REQUEST_DEADLINE_S = 15.0
ANCHORS = ("reply with the word anchor", "call nowhere.tool", "say one two three")
FIELDS = sorted(KNOWN_FIELDS)  # every field the harness reads, each drawn on purpose


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("fuzz")
    config = {
        "harnesses": [{"id": "chrn_fuzz", "base": "scripted", "model": "scripted-1"}],
        "tokens": [TOKEN, OTHER_TOKEN],
        "think_seconds": 0,
        "pace_seconds": 0,
        "count_interval_seconds": 0,
        "keepalive_seconds": 0.2,
        "max_body_bytes": 256 * 1024,
    }
    (folder / "harness.json").write_text(json.dumps(config))
    proc = ServerProcess(
        "harness_examples.report_harness",
        args=[
            *("--config", str(folder / "harness.json")),
            *("--db", str(folder / "harness.db")),
            *("--log-level", "warning"),
        ],
    )
    proc.start(timeout=30)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"http://127.0.0.1:{server.port}", timeout=REQUEST_DEADLINE_S
    ) as client:
        yield client


@pytest.fixture(scope="module")
def anchors(http: httpx.Client) -> dict[str, Any]:
    """Responses created before the fuzzing: they must never change."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    made = [http.post("/v1/responses", json={"input": text}, headers=auth) for text in ANCHORS]
    assert all(r.status_code == 200 for r in made)
    return {r.json()["id"]: r.json() for r in made}


# --------------------------------------------------------------------------- strategies
printable = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
#: What a client can put in a header at all (h11 refuses surrounding whitespace).
header_text = printable.map(str.strip)
hostile_floats = st.floats(allow_nan=True, allow_infinity=True)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), hostile_floats, st.sampled_from([0, 1, 30])
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=30), printable)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
inputs = st.one_of(
    st.sampled_from(["hi", "reply with the word fuzz", "count slowly to 3", "call a.b {}"]),
    st.text(max_size=60),
    json_values,
)


@st.composite
def create_bodies(draw: st.DrawFn, known_ids: list[str]) -> bytes:
    fields = draw(st.sets(st.sampled_from(FIELDS), max_size=6))
    body: dict[str, Any] = {}
    for name in fields:
        if name == "input":
            body[name] = draw(inputs)
        elif name == "previous_response_id":
            body[name] = draw(st.one_of(st.sampled_from(known_ids), json_values))
        elif name in ("stream", "background", "store"):
            body[name] = draw(st.one_of(st.booleans(), scalars))
        else:
            body[name] = draw(json_values)
    body.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    encoded = json.dumps(body, allow_nan=True).encode()  # NaN / Infinity on the wire on purpose
    return draw(
        st.one_of(
            st.just(encoded),
            st.binary(max_size=80),
            st.just(b"[" * 200 + b"]" * 200),
            st.just(encoded[: draw(st.integers(0, len(encoded)))]),
        )
    )


@st.composite
def headers(draw: st.DrawFn) -> dict[str, str]:
    out: dict[str, str] = {}
    auth = draw(st.sampled_from(["ok", "ok", "other", "missing", "bad", "garbage"]))
    if auth in ("ok", "other"):
        out["Authorization"] = f"Bearer {TOKEN if auth == 'ok' else OTHER_TOKEN}"
    elif auth == "bad":
        out["Authorization"] = "Bearer nope"
    elif auth == "garbage":
        out["Authorization"] = draw(header_text)
    if draw(st.booleans()):
        out["UHP-Version"] = draw(
            st.one_of(
                st.sampled_from(["2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04"]),
                header_text,
            )
        )
    if draw(st.booleans()):
        out["Idempotency-Key"] = draw(st.one_of(header_text, st.sampled_from(["k1", "k2"])))
    if draw(st.booleans()):
        out["Last-Event-ID"] = draw(
            st.one_of(st.integers(-5, 2**64).map(str), header_text, st.just(str(2**63)))
        )
    if draw(st.booleans()):
        out["Accept"] = draw(st.sampled_from(["text/event-stream", "application/json", "*/*"]))
    return out


@st.composite
def requests(draw: st.DrawFn, known_ids: list[str]) -> tuple[str, str, dict[str, Any]]:
    response_id = draw(st.one_of(st.sampled_from(known_ids), printable.map(_path_safe)))
    query = draw(
        st.dictionaries(
            st.sampled_from(["stream", "access_token", "limit", "x"]), printable, max_size=2
        )
    )
    kind = draw(
        st.sampled_from(["create", "create", "create", "get", "cancel", "items", "delete", "other"])
    )
    options: dict[str, Any] = {"headers": draw(headers()), "params": query}
    if kind == "create":
        return "POST", "/v1/responses", {**options, "content": draw(create_bodies(known_ids))}
    if kind == "get":
        return "GET", f"/v1/responses/{response_id}", options
    if kind == "cancel":
        return "POST", f"/v1/responses/{response_id}/cancel", options
    if kind == "items":
        return "GET", f"/v1/responses/{response_id}/input_items", options
    if kind == "delete":  # never an anchor: deleting one is allowed and would change it
        return "DELETE", f"/v1/responses/{_path_safe(draw(printable))}x", options
    path = draw(st.sampled_from(["/v1/uhp", "/v1/harnesses/", "/v1/models", "/v1/sessions/"]))
    return (
        draw(st.sampled_from(["GET", "POST", "PUT"])),
        path + _path_safe(draw(printable)),
        options,
    )


def _path_safe(text: str) -> str:
    return "".join(c for c in text if c not in "/?#%\\") or "id"


# --------------------------------------------------------------------------- the property
def _answer(http: httpx.Client, method: str, url: str, options: dict[str, Any]) -> None:
    deadline = time.monotonic() + REQUEST_DEADLINE_S
    with http.stream(method, url, **options) as answer:
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            assert 200 <= answer.status_code < 300
            for _ in answer.iter_lines():  # to the end of the stream, within the deadline
                assert time.monotonic() < deadline, f"{method} {url}: the stream did not end"
            return
        raw = answer.read()
    assert time.monotonic() < deadline, f"{method} {url}: no answer in time"
    assert answer.status_code < 500, (method, url, options, answer.status_code, raw[:300])
    if answer.status_code >= 400:
        body = json.loads(raw)
        assert set(body) == {"error"}, raw[:300]
        assert {"type", "code", "message", "param", "detail"} == set(body["error"]), raw[:300]


def test_any_request_gets_a_2xx_or_an_enveloped_4xx_and_nothing_stored_changes(
    http: httpx.Client, anchors: dict[str, Any]
) -> None:
    known = list(anchors)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cases = {"n": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=requests(known))
    def case(request: tuple[str, str, dict[str, Any]]) -> None:
        method, url, options = request
        _answer(http, method, url, options)
        anchor = known[cases["n"] % len(known)]
        cases["n"] += 1
        assert http.get(f"/v1/responses/{anchor}", headers=auth).json() == anchors[anchor]

    case()
    for response_id, body in anchors.items():
        assert http.get(f"/v1/responses/{response_id}", headers=auth).json() == body
    assert cases["n"] >= min(EXAMPLES, 50)


def test_the_nightly_size_is_documented() -> None:
    guarantees = (Path(__file__).parents[1] / "docs" / "guarantees.md").read_text()
    assert "BRIDGE_FUZZ_EXAMPLES=10000" in guarantees
