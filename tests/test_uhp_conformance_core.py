"""The UHP conformance suite's Core class, reproduced from the spec chapters, against the example
report harness as a real server process at each UHP version it serves.

REPRODUCED, not the official suite: ``uhp-conformance`` (HarnessRouter repository,
``protocol/conformance``) cannot be installed here without the network, so its 40 Core checks
are written again from the chapters they enforce and carry its ids (D-01..D-05, V-01..V-03,
A-01, A-02, E-01..E-04, H-01..H-04, T-01..T-10, S-01..S-09, C-01..C-03). Where the suite
validates against its JSON Schema, these check the required fields and types the schema chapter
names. Every request carries ``UHP-Version`` (as a run of the suite pinned to a version would)
unless the check sets it itself. A check never skips: a precondition missing is a failure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.compat import compat, uhp_peer
from tests.support.processes import ServerProcess
from tests.test_report_harness import TOKEN, _config

VERSIONS = ("2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04")
PROMPT = "Reply with exactly: ok"
TERMINAL = {"completed", "failed", "incomplete", "cancelled"}
TERMINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed"}
CANCEL_DEADLINE_S = 90.0  # sessions §4: a cancelled task reaches a terminal state
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("uhp-conformance")
    config = _config(tmp / "harness.json", dead_port=9)  # port 9: no tool call is made here
    settings = json.loads(config.read_text())
    # The default think time: a task outlasts half a second, so the progressiveness check
    # (S-09) has a stream to judge rather than one too short to tell from a buffered one.
    settings.update(think_seconds=0.6, pace_seconds=0.03)
    config.write_text(json.dumps(settings))
    server = ServerProcess(
        "harness_examples.report_harness",
        args=["--config", str(config), "--db", str(tmp / "harness.db")],
    )
    server.start(timeout=30)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Run:
    """One version's run of the suite: its client and what the shared tasks returned."""

    version: str
    http: httpx.Client
    state: dict[str, Any] = field(default_factory=dict)

    def get(self, path: str, *, auth: bool = True, **kw: Any) -> httpx.Response:
        return self.request("GET", path, auth=auth, **kw)

    def post(self, path: str, body: dict[str, Any] | None = None, **kw: Any) -> httpx.Response:
        return self.request("POST", path, json=body, **kw)

    def request(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ) -> httpx.Response:
        sent = {"UHP-Version": self.version}
        if auth:
            sent["Authorization"] = f"Bearer {TOKEN}"
        sent.update(headers or {})
        return self.http.request(method, path, headers=sent, **kw)

    def harness(self) -> dict[str, Any]:
        if "harness" not in self.state:
            listed = self.get("/v1/harnesses").json()["harnesses"]
            assert listed, "the server lists no harness, so no task can run"
            self.state["harness"] = listed[0]
        harness: dict[str, Any] = self.state["harness"]
        return harness

    def blocking(self) -> httpx.Response:
        """One non-streaming task, run once and shared."""
        if "blocking" not in self.state:
            body = {"input": PROMPT, "metadata": {"harness_id": self.harness()["id"]}}
            self.state["blocking"] = self.post("/v1/responses", {**body, "stream": False})
        reply: httpx.Response = self.state["blocking"]
        return reply

    def stream(self) -> list[dict[str, Any]]:
        """One streaming task, run once and shared; each event keeps its arrival time."""
        if "stream" not in self.state:
            body = {"input": PROMPT, "metadata": {"harness_id": self.harness()["id"]}}
            events: list[dict[str, Any]] = []
            started = time.monotonic()
            sent = {"UHP-Version": self.version, "Authorization": f"Bearer {TOKEN}"}
            with self.http.stream(
                "POST", "/v1/responses", json={**body, "stream": True}, headers=sent
            ) as reply:
                self.state["stream_headers"] = reply.headers
                for line in reply.iter_lines():
                    if line.startswith("data:"):
                        event = json.loads(line[5:].strip())
                        event["__t"] = time.monotonic() - started
                        events.append(event)
            self.state["stream"] = events
        stream: list[dict[str, Any]] = self.state["stream"]
        return stream


@pytest.fixture(scope="module")
def runs(harness: ServerProcess) -> Iterator[dict[str, Run]]:
    """One run per version, shared by its checks (the suite's tasks run once per version)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{harness.port}", timeout=DEADLINE_S) as http:
        yield {version: Run(version, http) for version in VERSIONS}


# --------------------------------------------------------------------------- shape checks
# The required fields and types of the schema chapter's objects (the suite's schema checks).


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _discovery_shape(d: Any) -> None:
    assert isinstance(d, dict), "discovery is not a JSON object"
    assert d.get("object") == "uhp.discovery" and d.get("protocol") == "uhp"
    assert isinstance(d.get("versions"), list) and d["versions"], "versions must be non-empty"
    assert all(_is_str(v) for v in d["versions"])
    assert _is_str(d.get("default_version"))
    assert d.get("conformance_class") in ("core", "extended", "full")
    caps = d.get("capabilities")
    assert isinstance(caps, dict) and all(isinstance(v, bool) for v in caps.values())


def _harness_shape(h: Any) -> None:
    assert isinstance(h, dict)
    assert _is_str(h.get("id")) and h["id"].startswith("chrn_")
    assert _is_str(h.get("name")) and _is_str(h.get("base"))
    assert h.get("object", "harness") == "harness"


def _response_shape(r: Any) -> None:
    assert isinstance(r, dict), "the response is not a JSON object"
    assert _is_str(r.get("id")) and r.get("object") == "response"
    assert isinstance(r.get("created_at"), int | float)
    assert r.get("status") in TERMINAL | {"in_progress"}
    assert isinstance(r.get("output"), list)
    assert all(isinstance(item, dict) and _is_str(item.get("type")) for item in r["output"])
    assert "error" in r and (r["error"] is None or isinstance(r["error"], dict))
    assert isinstance(r.get("metadata"), dict)


def _event_shape(e: dict[str, Any]) -> None:
    assert _is_str(e.get("type")), f"an event without a type: {e}"
    assert isinstance(e.get("sequence_number"), int)


def _envelope_shape(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict) and isinstance(body.get("error"), dict)
    error: dict[str, Any] = body["error"]
    for name in ("type", "code", "message"):
        assert _is_str(error.get(name)), f"error.{name} is missing or empty"
    return error


# --------------------------------------------------------------------------- the checks
CHECKS: dict[str, tuple[str, Callable[[Run], None]]] = {}


def check(check_id: str, title: str) -> Callable[[Callable[[Run], None]], Callable[[Run], None]]:
    def register(fn: Callable[[Run], None]) -> Callable[[Run], None]:
        CHECKS[check_id] = (title, fn)
        return fn

    return register


def _discovery(run: Run) -> dict[str, Any]:
    reply = run.get("/v1/uhp", auth=False)
    assert reply.status_code == 200
    body: dict[str, Any] = reply.json()
    return body


@check("D-01", "Discovery document is served")
def d01(run: Run) -> None:
    assert isinstance(_discovery(run), dict)


@check("D-02", "Discovery is served without authentication")
def d02(run: Run) -> None:
    assert run.get("/v1/uhp", auth=False).status_code == 200


@check("D-03", "Discovery document matches the schema")
def d03(run: Run) -> None:
    _discovery_shape(_discovery(run))


@check("D-04", "default_version is one of versions")
def d04(run: Run) -> None:
    d = _discovery(run)
    assert d["default_version"] in d["versions"]


@check("D-05", "conformance_class agrees with capabilities")
def d05(run: Run) -> None:
    d = _discovery(run)
    core = ["streaming", "sessions", "cancellation"]
    extended = [*core, "files_input", "files_output", "session_listing"]
    required = {
        "core": core,
        "extended": extended,
        "full": [*extended, "harness_management"],
    }[d["conformance_class"]]
    assert not [c for c in required if not d["capabilities"].get(c)]


@check("V-01", "UHP-Version header on every response")
def v01(run: Run) -> None:
    for reply in (run.get("/v1/uhp", auth=False), run.get("/v1/harnesses", auth=False)):
        assert reply.headers.get("UHP-Version"), reply.status_code


@check("V-02", "A supported version is honoured")
def v02(run: Run) -> None:
    assert run.version in _discovery(run)["versions"]
    reply = run.get("/v1/uhp", auth=False, headers={"UHP-Version": run.version})
    assert reply.status_code == 200 and reply.headers["UHP-Version"] == run.version


@check("V-03", "An unsupported version is refused, not silently substituted")
def v03(run: Run) -> None:
    reply = run.get("/v1/uhp", auth=False, headers={"UHP-Version": "1999-01-01"})
    assert reply.status_code == 400
    error = _envelope_shape(reply.json())
    assert error["code"] == "unsupported_protocol_version"
    assert error["detail"]["supported"], "the refusal lists no supported version"


@check("A-01", "Authenticated endpoints reject an absent credential")
def a01(run: Run) -> None:
    assert run.get("/v1/harnesses", auth=False).status_code == 401


@check("A-02", "Authenticated endpoints reject an invalid credential")
def a02(run: Run) -> None:
    reply = run.get("/v1/harnesses", auth=False, headers={"Authorization": "Bearer uhp-not-a-key"})
    assert reply.status_code == 401
    assert _envelope_shape(reply.json())["type"] == "authentication_error"


_NO_HARNESS = "/v1/harnesses/chrn_uhpconformancenosuchharness00"


@check("E-01", "Errors use the structured envelope")
def e01(run: Run) -> None:
    reply = run.get(_NO_HARNESS)
    assert reply.status_code == 404
    _envelope_shape(reply.json())


@check("E-02", "Unknown harness reports harness_not_found")
def e02(run: Run) -> None:
    assert _envelope_shape(run.get(_NO_HARNESS).json())["code"] == "harness_not_found"


@check("E-03", "Unknown response reports response_not_found")
def e03(run: Run) -> None:
    reply = run.get("/v1/responses/resp_uhpconformancenosuchresponse")
    assert reply.status_code == 404
    assert _envelope_shape(reply.json())["code"] == "response_not_found"


@check("E-04", "Error messages carry no stack traces")
def e04(run: Run) -> None:
    message = _envelope_shape(run.get(_NO_HARNESS).json())["message"]
    for leak in ("Traceback", 'File "/', "  at ", "\n  File"):
        assert leak not in message


@check("H-01", "Harness list is served and well formed")
def h01(run: Run) -> None:
    reply = run.get("/v1/harnesses")
    assert reply.status_code == 200 and isinstance(reply.json().get("harnesses"), list)
    for h in reply.json()["harnesses"]:
        _harness_shape(h)


@check("H-02", "A harness can be fetched by id")
def h02(run: Run) -> None:
    h = run.harness()
    reply = run.get(f"/v1/harnesses/{h['id']}")
    assert reply.status_code == 200 and reply.json()["id"] == h["id"]
    _harness_shape(reply.json())


@check("H-03", "Model catalogue is served and availability is a boolean")
def h03(run: Run) -> None:
    reply = run.get("/v1/models")
    assert reply.status_code == 200 and isinstance(reply.json().get("backends"), dict)
    models = [m for b in reply.json()["backends"].values() for m in b["models"]]
    assert models and all(_is_str(m.get("id")) for m in models)
    assert all(isinstance(m.get("available"), bool) for m in models)


@check("H-04", "Per-harness model list is served")
def h04(run: Run) -> None:
    reply = run.get(f"/v1/harnesses/{run.harness()['id']}/models")
    assert reply.status_code == 200 and isinstance(reply.json().get("models"), list)


@check("T-01", "A non-streaming task returns a valid Response")
def t01(run: Run) -> None:
    reply = run.blocking()
    assert reply.status_code == 200, reply.text
    _response_shape(reply.json())


@check("T-02", "A finished task is in a terminal state")
def t02(run: Run) -> None:
    assert run.blocking().json()["status"] in TERMINAL


@check("T-03", "The response names the model that actually ran")
def t03(run: Run) -> None:
    body = run.blocking().json()
    assert _is_str(body.get("model"))
    meta = body["metadata"]
    if meta.get("requested_model") and meta["requested_model"] != body["model"]:
        assert meta.get("model_fallback") is True


@check("T-04", "The response reports its session")
def t04(run: Run) -> None:
    assert _is_str(run.blocking().json()["metadata"].get("session_id"))


@check("T-05", "usage is an object or explicitly null, never fabricated")
def t05(run: Run) -> None:
    body = run.blocking().json()
    assert "usage" in body and (body["usage"] is None or isinstance(body["usage"], dict))


@check("T-06", "A stored response can be read back")
def t06(run: Run) -> None:
    first = run.blocking().json()
    again = run.get(f"/v1/responses/{first['id']}")
    assert again.status_code == 200
    assert (again.json()["id"], again.json()["status"]) == (first["id"], first["status"])


@check("T-07", "Response ids are prefixed")
def t07(run: Run) -> None:
    assert run.blocking().json()["id"].startswith("resp_")


def _reserved(run: Run) -> dict[str, Any]:
    if "reserved" not in run.state:
        body = {
            "input": PROMPT,
            "metadata": {"harness_id": run.harness()["id"]},
            "tools": [{"type": "function", "name": "probe"}],
            "include": ["reasoning.encrypted_content"],
        }
        run.state["reserved"] = run.post("/v1/responses", body)
    reply: httpx.Response = run.state["reserved"]
    assert reply.status_code == 200, reply.text
    answered: dict[str, Any] = reply.json()
    return answered


@check("T-08", "A request carrying the reserved tools and include is accepted")
def t08(run: Run) -> None:
    _response_shape(_reserved(run))


@check("T-09", "The reserved fields are reported in metadata.ignored_fields")
def t09(run: Run) -> None:
    ignored = _reserved(run)["metadata"].get("ignored_fields")
    assert isinstance(ignored, list) and {"tools", "include"} <= set(ignored)


@check("T-10", "A request that sent neither is not told one was ignored")
def t10(run: Run) -> None:
    ignored = run.blocking().json()["metadata"].get("ignored_fields") or []
    assert "tools" not in ignored and "include" not in ignored


@check("S-01", "A streaming task emits events")
def s01(run: Run) -> None:
    assert run.stream()


@check("S-02", "Stream content type is text/event-stream")
def s02(run: Run) -> None:
    run.stream()
    assert "text/event-stream" in run.state["stream_headers"]["content-type"]


@check("S-03", "Every event validates against the schema")
def s03(run: Run) -> None:
    for event in run.stream():
        _event_shape(event)


@check("S-04", "sequence_number starts at 0 and has no gaps")
def s04(run: Run) -> None:
    seqs = [e["sequence_number"] for e in run.stream()]
    assert seqs == list(range(len(seqs)))


@check("S-05", "The first event is response.created")
def s05(run: Run) -> None:
    assert run.stream()[0]["type"] == "response.created"


@check("S-06", "The stream ends with exactly one terminal event")
def s06(run: Run) -> None:
    events = run.stream()
    assert sum(e["type"] in TERMINAL_EVENTS for e in events) == 1
    assert events[-1]["type"] in TERMINAL_EVENTS


@check("S-07", "The terminal event carries the complete response")
def s07(run: Run) -> None:
    final = run.stream()[-1].get("response")
    _response_shape(final)
    assert final["status"] in TERMINAL


@check("S-08", "Streaming and non-streaming agree on the result shape")
def s08(run: Run) -> None:
    blocking, streamed = run.blocking().json(), run.stream()[-1]["response"]
    assert blocking["object"] == streamed["object"] == "response"
    assert blocking["status"] == streamed["status"]


@check("S-09", "The stream is progressive, not buffered to the end")
def s09(run: Run) -> None:
    events = run.stream()
    assert len(events) >= 3 and events[-1]["__t"] >= 0.5, "too short a stream to judge"
    assert events[-1]["__t"] - events[0]["__t"] > 0.05, "every event arrived at once"


@check("C-01", "A task can continue a session")
def c01(run: Run) -> None:
    first = run.blocking().json()
    body = {
        "input": "Reply with exactly: two",
        "previous_response_id": first["id"],
        "metadata": {"harness_id": run.harness()["id"]},
    }
    reply = run.post("/v1/responses", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["metadata"]["session_id"] == first["metadata"]["session_id"]
    assert reply.json()["previous_response_id"] == first["id"]


@check("C-02", "Cancelling a terminal task succeeds and changes nothing")
def c02(run: Run) -> None:
    rid = run.blocking().json()["id"]
    before = run.get(f"/v1/responses/{rid}").json()["status"]
    assert run.post(f"/v1/responses/{rid}/cancel").status_code in (200, 409)
    assert run.get(f"/v1/responses/{rid}").json()["status"] == before


@check("C-03", "A running task can be cancelled and ends non-running")
def c03(run: Run) -> None:
    body = {
        "input": "Count slowly from 1 to 200, one number per line.",
        "metadata": {"harness_id": run.harness()["id"]},
        "background": True,
    }
    started = run.post("/v1/responses", body)
    assert started.status_code == 200, started.text
    rid = started.json()["id"]
    # The suite waits a fixed two seconds; here the first number is the sign it runs.
    _until(lambda: run.get(f"/v1/responses/{rid}").json()["output"], DEADLINE_S)
    assert run.post(f"/v1/responses/{rid}/cancel").status_code == 200
    status = _until(
        lambda: (s := run.get(f"/v1/responses/{rid}").json()["status"]) in TERMINAL and s,
        CANCEL_DEADLINE_S,
    )
    assert status == "cancelled"


def _until(fn: Callable[[], Any], deadline_s: float) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if value := fn():
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_the_core_class_is_the_suites_forty_checks() -> None:
    prefixes = [check_id.split("-")[0] for check_id in CHECKS]
    counts = {p: prefixes.count(p) for p in dict.fromkeys(prefixes)}
    assert counts == {"D": 5, "V": 3, "A": 2, "E": 4, "H": 4, "T": 10, "S": 9, "C": 3}
    assert len(CHECKS) == 40


def _core_class_at(version: str) -> Callable[..., None]:
    """The test of the Core class at ``version``: one row of ``docs/compatibility.md``, one
    pytest item per check (``[D-01]`` ... ``[C-03]``)."""

    @pytest.mark.parametrize("check_id", list(CHECKS))
    def test(runs: dict[str, Run], check_id: str) -> None:
        _title, fn = CHECKS[check_id]
        fn(runs[version])

    test.__name__ = f"test_core_class_at_{version.replace('-', '_')}"
    checks = (
        "the 40 Core checks (discovery, versions, auth, errors, harnesses, models, tasks, "
        "reserved fields, streaming, sessions, cancellation) against the example report harness "
        f"with every request pinned to `UHP-Version: {version}`"
    )
    marked: Callable[..., None] = compat(uhp_peer(version), checks)(test)
    return marked


test_core_class_at_2026_08_11 = _core_class_at("2026-08-11")
test_core_class_at_2026_09_12 = _core_class_at("2026-09-12")
test_core_class_at_2026_09_28 = _core_class_at("2026-09-28")
test_core_class_at_2026_10_04 = _core_class_at("2026-10-04")
