"""The example report harness (harness_examples/report_harness) as a real UHP server process.

Every wait is an event or a poll with a deadline; the scripted agent is paced by the config
(fast pacing here) so the whole module runs in a few seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import ServerProcess, loads_native_code_of, refused_port

TOKEN = "report-harness-test-token"
OTHER_TOKEN = "report-harness-other-token"
MCP_SECRET = "mcp-secret-never-shown"
DEADLINE_S = 10.0
COUNT_INTERVAL_S = 0.25  # "count slowly": one number per interval
COUNT_TO_50_S = 50 * COUNT_INTERVAL_S


@pytest.fixture(scope="module")
def dead_port() -> Iterator[int]:
    """Where the enabled "reports" MCP server would listen: connections are refused."""
    with refused_port() as port:
        yield port


def _config(path: Path, dead_port: int) -> Path:
    config = {
        "harnesses": [
            {
                "id": "chrn_reports",
                "name": "Reports",
                "base": "scripted",
                "model": "scripted-1",
                "mcpServers": [
                    {  # enabled but nothing listens there: must not fail the task
                        "name": "reports",
                        "url": f"http://127.0.0.1:{dead_port}/mcp",
                        "enabled": True,
                        "auth": {"credential_ref": "reports-token"},
                    },
                    {"name": "archive", "url": "http://127.0.0.1:9/mcp", "enabled": False},
                ],
            },
            {"id": "chrn_other", "base": "scripted", "model": "scripted-1"},
        ],
        "tokens": [TOKEN, OTHER_TOKEN],
        "credentials": {"reports-token": MCP_SECRET},
        "think_seconds": 0.05,
        "pace_seconds": 0.01,
        "count_interval_seconds": COUNT_INTERVAL_S,
        "keepalive_seconds": 0.1,
    }
    path.write_text(json.dumps(config))
    return path


def _start(tmp: Path, dead_port: int) -> ServerProcess:
    config = _config(tmp / "harness.json", dead_port)
    server = ServerProcess(
        "harness_examples.report_harness",
        args=["--config", str(config), "--db", str(tmp / "harness.db")],
    )
    return server.start(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, dead_port: int) -> Iterator[ServerProcess]:
    proc = _start(tmp_path_factory.mktemp("report-harness"), dead_port)
    try:
        yield proc
    finally:
        proc.stop()


def _client(server: ServerProcess, token: str | None = TOKEN) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(
        base_url=f"http://127.0.0.1:{server.port}", headers=headers, timeout=DEADLINE_S
    )


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with _client(server) as c:
        yield c


def _sse(response: httpx.Response, comments: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The ``data:`` events of an SSE response, in order (comments collected on the side)."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith(":") and comments is not None:
            comments.append(line)
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            yield json.loads("\n".join(data))
            data = []


def _stream_all(c: httpx.Client, method: str, url: str, **kw: Any) -> list[dict[str, Any]]:
    with c.stream(method, url, **kw) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(_sse(response))


def _poll(fn: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def _create(c: httpx.Client, text: str, **body: Any) -> dict[str, Any]:
    r = c.post("/v1/responses", json={"input": text, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


# --------------------------------------------------------------------------- tests
def test_the_harness_serves_on_uvloop_and_httptools(server: ServerProcess) -> None:
    """uvicorn's "auto" choices, seen in the running process: both are dependencies, and
    without them the harness spends about a tenth more CPU per response (bench section 10)."""
    assert server.pid is not None
    assert loads_native_code_of(server.pid, "uvloop", "httptools")


def test_discovery_without_credential_and_versions(server: ServerProcess) -> None:
    with _client(server, token=None) as anon:
        r = anon.get("/v1/uhp")
        assert r.status_code == 200
        assert r.headers["UHP-Version"] == "2026-08-11"
        doc = r.json()
        assert doc["object"] == "uhp.discovery" and doc["conformance_class"] == "core"
        assert all(doc["capabilities"][c] for c in ("streaming", "sessions", "cancellation"))
        bad = anon.get("/v1/uhp", headers={"UHP-Version": "1999-01-01"})
        assert bad.status_code == 400
        assert bad.headers["UHP-Version"] == "2026-08-11"
        assert bad.json()["error"]["code"] == "unsupported_protocol_version"
        assert bad.json()["error"]["detail"]["supported"] == [
            "2026-08-11",
            "2026-09-12",
            "2026-09-28",
            "2026-10-04",
        ]


def test_auth_errors_use_the_envelope(server: ServerProcess) -> None:
    with _client(server, token=None) as anon, _client(server, token="wrong") as wrong:
        for c, code in ((anon, "missing_credential"), (wrong, "invalid_credential")):
            r = c.get("/v1/harnesses")
            assert r.status_code == 401
            assert r.headers["UHP-Version"] == "2026-08-11"
            error = r.json()["error"]
            assert error["type"] == "authentication_error" and error["code"] == code
            assert set(error) == {"type", "code", "message", "param", "detail"}


def test_catalogue_never_shows_credentials(client: httpx.Client) -> None:
    r = client.get("/v1/harnesses")
    assert [h["id"] for h in r.json()["harnesses"]] == ["chrn_reports", "chrn_other"]
    assert MCP_SECRET not in r.text
    one = client.get("/v1/harnesses/chrn_reports").json()
    assert [s["enabled"] for s in one["mcpServers"]] == [True, False]
    assert client.get("/v1/harnesses/chrn_nope").json()["error"]["code"] == "harness_not_found"
    models = client.get("/v1/models").json()["backends"]["scripted"]
    assert models["default"] == "scripted-1" and models["models"][0]["available"] is True
    assert client.get("/v1/harnesses/chrn_reports/models").json()["default"] == "scripted-1"


def test_streamed_reply_with_banana(client: httpx.Client) -> None:
    body = {"input": "Please reply with the word banana", "stream": True}
    events = _stream_all(client, "POST", "/v1/responses", json=body)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "banana"
    final = events[-1]["response"]
    assert final["status"] == "completed" and _text(final) == "banana"
    assert final["usage"] is None and final["metadata"]["session_id"].startswith("hsess")
    assert "bridge_mcp_tasks" in final["metadata"]
    stored = client.get(f"/v1/responses/{final['id']}").json()
    assert stored == final
    items = client.get(f"/v1/responses/{final['id']}/input_items").json()["data"]
    assert items[0]["content"][0]["text"] == "Please reply with the word banana"


def test_cancel_count_slowly_keeps_partial_output(client: httpx.Client) -> None:
    started = _create(client, "count slowly to 50", background=True)
    assert started["status"] == "in_progress"
    rid = started["id"]
    _poll(lambda: _text(client.get(f"/v1/responses/{rid}").json()), "the first number")
    t0 = time.monotonic()
    cancelled = client.post(f"/v1/responses/{rid}/cancel")
    assert cancelled.status_code == 200
    # The cancel answers without waiting for the count (50 x 0.25 s = 12.5 s) to run out; the
    # margin is wide so that only such a wait fails it, not a loaded machine.
    assert time.monotonic() - t0 < COUNT_TO_50_S / 2
    final = _poll(
        lambda: (r := client.get(f"/v1/responses/{rid}").json())["status"] != "in_progress" and r,
        "a terminal state",
    )
    assert final["status"] == "cancelled" and final["error"] is None
    text = _text(final)
    assert text.startswith("1\n") and "50\n" not in text  # partial output is kept
    again = client.post(f"/v1/responses/{rid}/cancel")  # idempotent on a terminal task
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    events = _stream_all(client, "GET", f"/v1/responses/{rid}?stream=true")
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"


def test_session_continuation_busy_and_mismatch(client: httpx.Client) -> None:
    first = _create(client, "reply with the word apple")
    session = first["metadata"]["session_id"]
    second = _create(client, "repeat your last answer", previous_response_id=first["id"])
    assert second["metadata"]["session_id"] == session
    assert second["previous_response_id"] == first["id"] and _text(second) == "apple"

    mismatch = client.post(
        "/v1/responses",
        json={
            "input": "hello",
            "previous_response_id": second["id"],
            "metadata": {"harness_id": "chrn_other"},
        },
    )
    assert mismatch.status_code == 409 and mismatch.json()["error"]["code"] == "harness_mismatch"

    running = _create(
        client, "count slowly to 50", previous_response_id=second["id"], background=True
    )
    busy = client.post("/v1/responses", json={"input": "hi", "previous_response_id": running["id"]})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    cancel = client.post(f"/v1/sessions/{session}/cancel")
    assert cancel.status_code == 200 and cancel.json()["cancelled_response_ids"] == [running["id"]]
    _poll(
        lambda: client.get(f"/v1/responses/{running['id']}").json()["status"] == "cancelled",
        "the session's task to be cancelled",
    )
    # Cancelling never deletes the session: it can be continued.
    third = _create(client, "reply with the word pear", previous_response_id=running["id"])
    assert third["metadata"]["session_id"] == session and _text(third) == "pear"

    with _client_like(client, OTHER_TOKEN) as other:  # out of scope is 404, never 403
        assert other.get(f"/v1/responses/{first['id']}").status_code == 404


def _client_like(client: httpx.Client, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=client.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def test_idempotency_key_returns_the_first_response(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "k-123"}
    a = client.post("/v1/responses", json={"input": "reply with the word once"}, headers=headers)
    b = client.post("/v1/responses", json={"input": "reply with the word once"}, headers=headers)
    assert a.status_code == b.status_code == 200
    assert a.json()["id"] == b.json()["id"]


def test_unreachable_and_disabled_mcp_servers_do_not_fail_the_task(
    client: httpx.Client,
) -> None:
    text = 'call reports.generate_report {"quarter": "Q3"} policy=detach\ncall archive.fetch {}'
    events = _stream_all(client, "POST", "/v1/responses", json={"input": text, "stream": True})
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert "report_harness.mcp_server.unreachable" in {e["type"] for e in events}
    outputs = [
        json.loads(i["output"])["outcome"]
        for i in final["output"]
        if i["type"] == "function_call_output"
    ]
    assert outputs == ["server_unreachable", "skipped"]
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert calls[0]["name"] == "reports.generate_report"
    assert json.loads(calls[0]["arguments"]) == {"quarter": "Q3"}


def test_last_event_id_resumes_after_that_sequence(client: httpx.Client) -> None:
    rid = _create(client, "count slowly to 4", background=True)["id"]
    comments: list[str] = []
    with client.stream(
        "GET", f"/v1/responses/{rid}", headers={"Accept": "text/event-stream"}
    ) as response:
        seen = []
        for event in _sse(response, comments):
            seen.append(event)
            if event["type"] == "response.output_text.delta":
                break  # the connection drops mid-task
    last = seen[-1]["sequence_number"]
    rest = _stream_all(
        client, "GET", f"/v1/responses/{rid}?stream=true", headers={"Last-Event-ID": str(last)}
    )
    assert rest[0]["sequence_number"] == last + 1  # no replay, no gap
    assert [e["sequence_number"] for e in rest] == list(range(last + 1, last + 1 + len(rest)))
    assert rest[-1]["type"] == "response.completed"
    assert _text(rest[-1]["response"]) == "1\n2\n3\n4\n"
    # Count pauses (0.25 s) are longer than the keep-alive interval (0.1 s).
    with client.stream("GET", f"/v1/responses/{rid}?stream=true") as response:
        assert len(list(_sse(response))) == len(seen) + len(rest)
    assert comments and comments[0] == ": keep-alive"


def test_delete_does_not_cancel(client: httpx.Client) -> None:
    rid = _create(client, "count slowly to 3", background=True)["id"]
    gone = client.delete(f"/v1/responses/{rid}")
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    r = client.get(f"/v1/responses/{rid}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"


@pytest.mark.e2e
def test_persistence_and_resume_across_restart(tmp_path: Path, dead_port: int) -> None:
    server = _start(tmp_path, dead_port)
    try:
        with _client(server) as c:
            done = _create(c, "reply with the word kiwi")
            log = _stream_all(c, "GET", f"/v1/responses/{done['id']}?stream=true")
            running = _create(c, "count slowly to 8", background=True)["id"]
            _poll(lambda: _text(c.get(f"/v1/responses/{running}").json()), "the first number")
        server.restart(timeout=30)  # SIGKILL: nothing is cleaned up
        with _client(server) as c:
            assert c.get(f"/v1/responses/{done['id']}").json() == done
            after = _stream_all(
                c, "GET", f"/v1/responses/{done['id']}?stream=true", headers={"Last-Event-ID": "2"}
            )
            assert after == log[3:]  # resumed from the persisted event log
            final = _poll(
                lambda: (
                    (r := c.get(f"/v1/responses/{running}").json())["status"] == "completed" and r
                ),
                "the interrupted task to be resumed and completed",
            )
            assert _text(final).endswith("1\n2\n3\n4\n5\n6\n7\n8\n")
            events = _stream_all(c, "GET", f"/v1/responses/{running}?stream=true")
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            assert "report_harness.resumed" in {e["type"] for e in events}
    finally:
        server.stop()
