"""The UHP serving kit (bridge.uhp.serving) in a tiny Starlette app.

Plain request/answer checks go through httpx's ASGI transport (a port adds nothing there);
streams that must arrive progressively (live tail, keep-alives) go through a real uvicorn
server on a loopback port the OS picks, in this process.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bridge.uhp import serving as uhp
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio

ALICE, BOB = "alice-token", "bob-token"
VERSIONS = ("2026-08-11", "2026-09-28")
DEADLINE_S = 10.0


class TinyServer:
    """Just enough of a UHP server to exercise every part of the kit."""

    def __init__(self) -> None:
        self.auth = uhp.BearerAuth([ALICE, BOB])
        self.keys = uhp.MemoryKeyStore()
        self.logs: dict[str, uhp.MemoryEventLog] = {}
        self.executions: Counter[str] = Counter()
        self.keepalive_s = 30.0

    async def whoami(self, request: Request) -> Response:
        principal = self.auth.principal(request)
        return JSONResponse({"principal": principal, "version": uhp.served_version(request)})

    async def create(self, request: Request) -> Response:
        principal = self.auth.principal(request)
        asked = await uhp.read_create_request(request)
        key = asked.idempotency_key
        if key is not None:
            first = uhp.replayed_response_id(self.keys.get(principal, key), asked.fingerprint)
            if first is not None:
                return JSONResponse({"id": first, "replayed": True})
        response_id = uhp.new_id("resp_")
        log = uhp.MemoryEventLog()
        log.append("response.created", response={"id": response_id})
        self.logs[response_id] = log
        if key is not None:
            self.keys.record(principal, key, uhp.KeyRecord(response_id, asked.fingerprint))
            self.executions[key] += 1
        return JSONResponse({"id": response_id, "replayed": False})

    async def stream(self, request: Request) -> Response:
        self.auth.principal(request)
        log = self.logs.get(request.path_params["response_id"])
        if log is None:
            raise uhp.not_found("response_not_found", "No such response.")
        frames = uhp.sse_frames(log, uhp.resume_start(request), keepalive_s=self.keepalive)
        return uhp.EventStreamResponse(frames)

    def keepalive(self) -> float:
        return self.keepalive_s

    async def refuse(self, request: Request) -> Response:
        raise uhp.UhpApiError(
            429, "rate_limit_error", "rate_limited", "Slow down.", detail={"n": 1}
        )

    async def crash(self, request: Request) -> Response:
        raise RuntimeError("secret internals")

    def app(self) -> Any:
        routes = [
            Route("/whoami", self.whoami),
            Route("/v1/responses", self.create, methods=["POST"]),
            Route("/v1/responses/{response_id}", self.stream),
            Route("/refuse", self.refuse),
            Route("/crash", self.crash),
        ]
        starlette = Starlette(routes=routes, exception_handlers=uhp.error_handlers())
        return uhp.VersionNegotiation(starlette, supported=VERSIONS, default="2026-09-28")


@pytest.fixture
def tiny() -> TinyServer:
    return TinyServer()


@pytest.fixture
async def client(tiny: TinyServer) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=tiny.app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://tiny", headers={"Authorization": f"Bearer {ALICE}"}
    ) as http:
        yield http


@pytest.fixture
async def served(tiny: TinyServer) -> AsyncIterator[str]:
    """The tiny app on a real loopback port (chosen by the OS, read back once bound)."""
    server = uvicorn.Server(uvicorn.Config(tiny.app(), host="127.0.0.1", port=0, log_level="error"))
    task = asyncio.create_task(server.serve())
    with anyio.fail_after(DEADLINE_S):
        while not server.started:
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def _envelope(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "code", "message", "param", "detail"}
    error: dict[str, Any] = body["error"]
    return error


# --------------------------------------------------------------------------- envelope
async def test_an_api_error_is_answered_in_the_envelope(client: httpx.AsyncClient) -> None:
    answer = await client.get("/refuse")
    assert answer.status_code == 429
    assert _envelope(answer) == {
        "type": "rate_limit_error",
        "code": "rate_limited",
        "message": "Slow down.",
        "param": None,
        "detail": {"n": 1},
    }


async def test_routing_errors_and_crashes_use_the_envelope(client: httpx.AsyncClient) -> None:
    missing = await client.get("/nowhere")
    assert missing.status_code == 404 and _envelope(missing)["code"] == "not_found"
    wrong = await client.delete("/whoami")
    assert wrong.status_code == 405 and _envelope(wrong)["code"] == "method_not_allowed"
    crash = await client.get("/crash")
    assert crash.status_code == 500
    error = _envelope(crash)
    assert error["type"] == "server_error" and "secret internals" not in crash.text
    assert "Traceback" not in crash.text


# --------------------------------------------------------------------------- versions
async def test_a_supported_version_is_served_and_stamped(client: httpx.AsyncClient) -> None:
    answer = await client.get("/whoami", headers={"UHP-Version": "2026-08-11"})
    assert answer.headers["UHP-Version"] == "2026-08-11"
    assert answer.json()["version"] == "2026-08-11"


async def test_without_a_version_the_default_is_served(client: httpx.AsyncClient) -> None:
    answer = await client.get("/whoami")
    assert answer.headers["UHP-Version"] == "2026-09-28" == answer.json()["version"]
    # Errors carry the served version too.
    assert (await client.get("/refuse")).headers["UHP-Version"] == "2026-09-28"


async def test_an_unsupported_version_is_refused_not_substituted(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.get("/whoami", headers={"UHP-Version": "2025-01-01"})
    assert answer.status_code == 400
    error = _envelope(answer)
    assert error["code"] == "unsupported_protocol_version" and error["param"] == "UHP-Version"
    assert error["detail"] == {"supported": list(VERSIONS)}
    assert answer.headers["UHP-Version"] == "2026-09-28"


def test_the_default_version_must_be_supported() -> None:
    with pytest.raises(ValueError, match="default version"):
        uhp.VersionNegotiation(Starlette(), supported=("2026-08-11",), default="2026-09-28")


# --------------------------------------------------------------------------- auth
async def test_a_missing_credential_is_a_401_envelope(client: httpx.AsyncClient) -> None:
    answer = await client.get("/whoami", headers={"Authorization": ""})
    assert answer.status_code == 401
    error = _envelope(answer)
    assert (error["type"], error["code"]) == ("authentication_error", "missing_credential")
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


async def test_an_unknown_token_is_a_401_envelope(client: httpx.AsyncClient) -> None:
    answer = await client.get("/whoami", headers={"Authorization": "Bearer not-a-token"})
    assert answer.status_code == 401 and _envelope(answer)["code"] == "invalid_credential"
    near_miss = await client.get("/whoami", headers={"Authorization": f"Bearer {ALICE}x"})
    assert near_miss.status_code == 401


async def test_a_token_maps_to_its_principal_never_to_itself(
    client: httpx.AsyncClient, tiny: TinyServer
) -> None:
    alice = (await client.get("/whoami")).json()["principal"]
    bob = (await client.get("/whoami", headers={"Authorization": f"Bearer {BOB}"})).json()
    assert alice == uhp.digest_principal(ALICE) != bob["principal"]
    assert ALICE not in alice and tiny.auth.principals == sorted([alice, bob["principal"]])


# --------------------------------------------------------------------------- SSE framing
def test_sse_frames_carry_id_event_and_every_data_line() -> None:
    assert uhp.sse_frame('{"a":1}', id=7) == b'id: 7\ndata: {"a":1}\n\n'
    assert uhp.sse_frame("one\ntwo", event="note") == b"event: note\ndata: one\ndata: two\n\n"
    assert uhp.KEEPALIVE_FRAME == b": keep-alive\n\n"
    event = uhp.LoggedEvent(3, "response.completed", '{"sequence_number":3}')
    assert event.frame() == b'id: 3\ndata: {"sequence_number":3}\n\n' and event.terminal


def test_the_memory_log_numbers_events_without_gaps() -> None:
    log = uhp.MemoryEventLog()
    first = log.append("response.created", response={"id": "resp_1"})
    second = log.append("response.in_progress")
    assert (first["sequence_number"], second["sequence_number"]) == (0, 1)
    assert json.loads(log.events[1].data) == second and not log.terminal
    log.append("response.failed", response={"status": "cancelled"})
    assert log.terminal and log.live_signal() is None


# --------------------------------------------------------------------------- replay
def _events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


async def _finished_response(client: httpx.AsyncClient, tiny: TinyServer) -> str:
    response_id: str = (await client.post("/v1/responses", json={"input": "x"})).json()["id"]
    log = tiny.logs[response_id]
    for n in range(3):
        log.append("response.output_text.delta", delta=f"d{n}")
    log.append("response.completed", response={"id": response_id, "status": "completed"})
    return response_id


async def test_last_event_id_replays_only_what_follows_it(
    client: httpx.AsyncClient, tiny: TinyServer
) -> None:
    response_id = await _finished_response(client, tiny)
    whole = await client.get(f"/v1/responses/{response_id}")
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert whole.headers["cache-control"] == "no-cache"
    assert [e["sequence_number"] for e in _events(whole.text)] == [0, 1, 2, 3, 4]
    assert "id: 4\n" in whole.text
    rest = await client.get(f"/v1/responses/{response_id}", headers={"Last-Event-ID": "2"})
    assert [e["sequence_number"] for e in _events(rest.text)] == [3, 4]
    bad = await client.get(f"/v1/responses/{response_id}", headers={"Last-Event-ID": "two"})
    assert bad.status_code == 400 and _envelope(bad)["param"] == "Last-Event-ID"


async def test_a_live_stream_resumes_and_follows_to_the_terminal_event(
    served: str, tiny: TinyServer
) -> None:
    tiny.keepalive_s = 0.05
    headers = {"Authorization": f"Bearer {ALICE}"}
    async with httpx.AsyncClient(base_url=served, headers=headers, timeout=DEADLINE_S) as http:
        response_id = (await http.post("/v1/responses", json={"input": "x"})).json()["id"]
        log = tiny.logs[response_id]
        log.append("response.in_progress")
        seen: list[int] = []
        keepalives = 0
        with anyio.fail_after(DEADLINE_S):
            async with http.stream(
                "GET", f"/v1/responses/{response_id}", headers={"Last-Event-ID": "0"}
            ) as stream:
                async for line in stream.aiter_lines():
                    if line == ": keep-alive":
                        keepalives += 1
                        if keepalives == 2:  # idle long enough: the log grows, then ends
                            log.append("response.output_text.delta", delta="hi")
                            log.append("response.completed", response={"id": response_id})
                    elif line.startswith("data: "):
                        seen.append(json.loads(line[6:])["sequence_number"])
    assert seen == [1, 2, 3]  # after Last-Event-ID 0, live until the terminal event
    assert keepalives >= 2


# --------------------------------------------------------------------------- idempotency
async def test_the_same_key_and_body_return_the_first_response(
    client: httpx.AsyncClient, tiny: TinyServer
) -> None:
    headers = {"Idempotency-Key": "k-1"}
    body = {"input": "report", "metadata": {"a": 1}}
    first = (await client.post("/v1/responses", json=body, headers=headers)).json()
    again = (await client.post("/v1/responses", json=body, headers=headers)).json()
    # Delivery flags choose how the answer comes, not what runs: still a replay.
    streamed = await client.post("/v1/responses", json={**body, "stream": True}, headers=headers)
    assert again == {"id": first["id"], "replayed": True} == streamed.json()
    assert tiny.executions["k-1"] == 1


async def test_the_same_key_with_another_body_is_refused(
    client: httpx.AsyncClient, tiny: TinyServer
) -> None:
    headers = {"Idempotency-Key": "k-2"}
    await client.post("/v1/responses", json={"input": "one"}, headers=headers)
    other = await client.post("/v1/responses", json={"input": "two"}, headers=headers)
    assert other.status_code == 422
    error = _envelope(other)
    assert error["code"] == "idempotency_key_reused" and error["param"] == "Idempotency-Key"
    assert tiny.executions["k-2"] == 1


async def test_keys_are_scoped_to_the_principal(
    client: httpx.AsyncClient, tiny: TinyServer
) -> None:
    headers = {"Idempotency-Key": "shared"}
    mine = (await client.post("/v1/responses", json={"input": "x"}, headers=headers)).json()
    theirs = await client.post(
        "/v1/responses",
        json={"input": "x"},
        headers={**headers, "Authorization": f"Bearer {BOB}"},
    )
    assert theirs.json()["id"] != mine["id"] and tiny.executions["shared"] == 2


async def test_an_empty_key_or_body_is_an_invalid_request(client: httpx.AsyncClient) -> None:
    empty_key = await client.post(
        "/v1/responses", json={"input": "x"}, headers={"Idempotency-Key": " "}
    )
    assert empty_key.status_code == 400 and _envelope(empty_key)["param"] == "Idempotency-Key"
    no_body = await client.post("/v1/responses", content=b"")
    assert no_body.status_code == 400 and _envelope(no_body)["code"] == "invalid_json"
    not_flag = await client.post("/v1/responses", json={"input": "x", "stream": "yes"})
    assert not_flag.status_code == 400 and _envelope(not_flag)["param"] == "stream"


def test_settling_a_response_closes_open_items_and_names_its_terminal_event() -> None:
    response = uhp.new_response("resp_1", model="m", metadata={}, previous_response_id=None)
    assert response["usage"] is None and response["status"] == "in_progress"
    response["output"].append(uhp.new_message_item())
    kind = uhp.settle_response(response, "cancelled", {"code": "ignored"})
    assert kind == "response.failed" and response["status"] == "cancelled"
    assert response["error"] is None and response["output"][0]["status"] == "incomplete"
    with pytest.raises(ValueError):
        uhp.settle_response(response, "in_progress")


# --------------------------------------------------------------------------- parse-time limits
HOSTILE_BODIES = {
    "NaN": b'{"input": NaN}',
    "Infinity": b'{"input": "x", "n": -Infinity}',
    "1e400": b'{"input": "x", "timeout_seconds": 1e400}',
    "lone surrogate": b'{"input": "\\ud800"}',
    "lone surrogate key": b'{"\\udfff": 1}',
    "not UTF-8": b'{"input": "\xff"}',
    "65 deep": b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}",
    "100000 deep": b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "not an object": b"[1, 2]",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
async def test_hostile_json_is_a_400_before_anything_runs(
    client: httpx.AsyncClient, tiny: TinyServer, name: str
) -> None:
    with anyio.fail_after(DEADLINE_S):
        answer = await client.post(
            "/v1/responses", content=HOSTILE_BODIES[name], headers={"Idempotency-Key": name}
        )
    assert answer.status_code == 400 and _envelope(answer)["code"] == "invalid_json"
    assert tiny.executions[name] == 0 and not tiny.logs


def test_json_at_the_depth_limit_parses() -> None:
    deepest = b'{"a": ' + b"[" * (uhp.MAX_JSON_DEPTH - 1) + b"]" * (uhp.MAX_JSON_DEPTH - 1) + b"}"
    assert uhp.parse_json(deepest)["a"] is not None
    assert uhp.parse_json(b'{"n": 1.5e300, "s": "\\ud83d\\ude00"}') == {"n": 1.5e300, "s": "😀"}


@pytest.mark.parametrize("value", ["9223372036854775807", "99999999999999999999", "abc", "1_0"])
async def test_an_out_of_range_last_event_id_is_a_400(
    client: httpx.AsyncClient, tiny: TinyServer, value: str
) -> None:
    response_id = await _finished_response(client, tiny)
    answer = await client.get(f"/v1/responses/{response_id}", headers={"Last-Event-ID": value})
    assert answer.status_code == 400 and _envelope(answer)["param"] == "Last-Event-ID"


@pytest.mark.parametrize("value", [1.5, -1, True, "3", 10**30])
def test_a_budget_must_be_a_bounded_integer(value: Any) -> None:
    with pytest.raises(uhp.UhpApiError) as refused:
        uhp.budget({"timeout_seconds": value}, "timeout_seconds")
    assert refused.value.status == 400 and refused.value.param == "timeout_seconds"
    assert uhp.budget({"timeout_seconds": 30}, "timeout_seconds") == 30


async def test_a_body_over_the_limit_is_a_413_however_it_is_sent(
    served: str, tiny: TinyServer
) -> None:
    big = b'{"input": "' + b"x" * uhp.MAX_BODY_BYTES + b'"}'

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds as it reads
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    headers = {"Authorization": f"Bearer {ALICE}"}
    async with httpx.AsyncClient(base_url=served, headers=headers, timeout=DEADLINE_S) as http:
        declared = await http.post("/v1/responses", content=big)
        streamed = await http.post("/v1/responses", content=chunked())
        small = await http.post("/v1/responses", json={"input": "fits"})
    for answer in (declared, streamed):
        assert answer.status_code == 413 and _envelope(answer)["code"] == "request_too_large"
    assert small.status_code == 200 and len(tiny.logs) == 1


async def test_the_access_log_never_shows_a_query_string(caplog: pytest.LogCaptureFixture) -> None:
    uhp.scrub_access_log()
    with caplog.at_level("INFO", logger="uvicorn.access"):
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/v1/x?access_token=s3cret", "1.1", 200
        )
    assert "s3cret" not in caplog.text and "/v1/x?<query redacted>" in caplog.text


@pytest.mark.e2e
def test_the_test_servers_access_log_never_shows_a_query_token() -> None:
    secret = "query-token-never-logged-77"
    with ServerProcess("tests.servers.uhp_server", args=["--token", ALICE]) as server:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=DEADLINE_S) as http:
            assert http.get(f"/v1/uhp?access_token={secret}").status_code == 200
            http.get(f"/v1/responses/resp_x?token={secret}", headers={"Authorization": "Bearer x"})
        log = server.log_path.read_text(errors="replace")
    assert "/v1/uhp?<query redacted>" in log and secret not in log
