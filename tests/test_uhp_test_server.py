"""Smoke tests for the UHP test server (``tests.servers.uhp_server``) with plain httpx.

If these fail, the fault is in the test server, not in the bridge's UHP client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from tests.support.processes import ServerProcess

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with ServerProcess("tests.servers.uhp_server", args=["--token", TOKEN]) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=10.0) as http:
        yield http


def _stream(client: httpx.Client, method: str, url: str, **kwargs: Any) -> list[dict[str, Any]]:
    with connect_sse(client, method, url, **kwargs) as source:
        assert source.response.status_code == 200
        return [sse.json() for sse in source.iter_sse()]


def _create_stream(client: httpx.Client, text: str) -> list[dict[str, Any]]:
    body = {"input": text, "stream": True, "metadata": {"harness_id": "chrn_test"}}
    return _stream(client, "POST", "/v1/responses", json=body)


def _without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in output]


def test_discovery_needs_no_auth_and_versions_are_checked(base_url: str) -> None:
    reply = httpx.get(f"{base_url}/v1/uhp")
    assert reply.status_code == 200
    assert reply.headers["UHP-Version"] == "2026-09-28"
    body = reply.json()
    assert body["object"] == "uhp.discovery"
    assert body["versions"] == ["2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04"]
    assert body["capabilities"]["stream_resumption"] is True

    bad = httpx.get(f"{base_url}/v1/uhp", headers={"UHP-Version": "2020-01-01"})
    assert bad.status_code == 400
    assert bad.headers["UHP-Version"] == "2026-09-28"
    error = bad.json()["error"]
    assert error["code"] == "unsupported_protocol_version"
    assert error["detail"]["supported"] == ["2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04"]


def test_auth_errors_use_the_envelope(base_url: str) -> None:
    missing = httpx.get(f"{base_url}/v1/harnesses")
    wrong = httpx.get(f"{base_url}/v1/harnesses", headers={"Authorization": "Bearer nope"})
    for reply, code in ((missing, "missing_credential"), (wrong, "invalid_credential")):
        assert reply.status_code == 401
        assert reply.headers["UHP-Version"] == "2026-09-28"
        assert reply.json() == {
            "error": {
                "type": "authentication_error",
                "code": code,
                "message": reply.json()["error"]["message"],
                "param": None,
                "detail": None,
            }
        }
    ok = httpx.get(f"{base_url}/v1/harnesses", headers=AUTH)
    assert ok.json()["data"][0]["id"] == "chrn_test"


def test_stream_is_gapless_with_one_terminal(client: httpx.Client) -> None:
    events = _create_stream(client, "words=3 delay_ms=5 vendor_events")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert [e["type"] in TERMINAL for e in events].count(True) == 1
    final = events[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["status"] == "completed"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["w0 ", "w1 ", "w2 "]
    assert final["response"]["output"][0]["content"][0]["text"] == "w0 w1 w2 "
    vendor = [e["type"] for e in events if e["type"].startswith("bridge.")]
    assert vendor == ["bridge.mcp_task.created", "bridge.mcp_task.completed"]


def test_blocking_output_equals_streamed_output(client: httpx.Client) -> None:
    streamed = _create_stream(client, "words=4 delay_ms=5")[-1]["response"]
    blocking = client.post("/v1/responses", json={"input": "words=4 delay_ms=5"}).json()
    assert blocking["status"] == "completed"
    assert blocking["id"] != streamed["id"]
    assert _without_ids(blocking["output"]) == _without_ids(streamed["output"])
    stored = client.get(f"/v1/responses/{streamed['id']}").json()
    assert stored == streamed


def test_cut_stream_resumes_after_last_event_id_without_replay(client: httpx.Client) -> None:
    seen: list[dict[str, Any]] = []
    body = {"input": "words=6 delay_ms=30 cut_after=4", "stream": True}
    with (
        pytest.raises(httpx.RemoteProtocolError),
        connect_sse(client, "POST", "/v1/responses", json=body) as source,
    ):
        for sse in source.iter_sse():
            seen.append(sse.json())
    assert [e["sequence_number"] for e in seen] == [0, 1, 2, 3]
    response_id = seen[0]["response"]["id"]

    resumed = _stream(client, "GET", f"/v1/responses/{response_id}", headers={"Last-Event-ID": "3"})
    assert resumed[0]["sequence_number"] == 4
    numbers = [e["sequence_number"] for e in seen + resumed]
    assert numbers == list(range(len(numbers)))
    assert resumed[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in seen + resumed if e["type"] == "response.output_text.delta")
    assert text == "w0 w1 w2 w3 w4 w5 "

    again = _stream(client, "GET", f"/v1/responses/{response_id}?stream=true")
    assert [e["type"] for e in again] == [e["type"] for e in seen + resumed]


def test_idempotent_retry_returns_the_first_response(client: httpx.Client) -> None:
    key = f"key-{uuid.uuid4()}"
    headers = {"Idempotency-Key": key}
    body = {"input": "words=3 delay_ms=5 slow_post_ms=1500"}
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/responses", json=body, headers=headers, timeout=0.3)
    first = client.post("/v1/responses", json=body, headers=headers)
    second = client.post("/v1/responses", json={**body, "background": True}, headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.json()["status"] == "completed"
    assert second.json()["id"] == first.json()["id"]
    stats = client.get("/_test/stats").json()
    assert stats["executions"][key] == 1


def test_cancel_ends_cancelled_with_a_failed_terminal_event(client: httpx.Client) -> None:
    created = client.post(
        "/v1/responses", json={"input": "words=200 delay_ms=20", "background": True}
    ).json()
    assert created["status"] == "in_progress"
    cancelled = client.post(f"/v1/responses/{created['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert client.post(f"/v1/responses/{created['id']}/cancel").json() == cancelled
    events = _stream(client, "GET", f"/v1/responses/{created['id']}")
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"


def test_without_resumption_get_answers_json() -> None:
    with ServerProcess("tests.servers.uhp_server", args=["--no-last-event-id"]) as server:
        base = f"http://127.0.0.1:{server.port}"
        with httpx.Client(base_url=base, headers=AUTH, timeout=10.0) as client:
            assert client.get("/v1/uhp").json()["capabilities"]["stream_resumption"] is False
            done = client.post("/v1/responses", json={"input": "words=1 delay_ms=1"}).json()
            reply = client.get(
                f"/v1/responses/{done['id']}?stream=true",
                headers={"Accept": "text/event-stream", "Last-Event-ID": "2"},
            )
            assert reply.headers["content-type"].startswith("application/json")
            assert reply.json() == done
