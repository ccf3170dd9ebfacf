"""The example report harness at UHP 2026-08-11, 2026-09-12, 2026-09-28 and 2026-10-04, as a
real server process: every version negotiated, discovery stating exactly the capabilities of
the version served, the endpoints of an absent capability answering 404, ignored request
fields named, a session deleted (what runs in it is cancelled first, then everything of it
answers 404)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bridge.uhp.serving import digest_principal
from harness_examples.report_harness.store import HarnessStore
from tests.support.processes import ServerProcess
from tests.test_report_harness import TOKEN, _client, _create, _poll, _start, _text

VERSIONS = ("2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04")
CORE = {
    "streaming",
    "sessions",
    "cancellation",
    "files_input",
    "files_output",
    "session_listing",
    "harness_management",
    "session_sharing",
    "idempotency",
}
#: The capabilities each version states: its own optional ones (all off here) on top of Core.
STATED = {
    "2026-08-11": CORE,
    "2026-09-12": CORE | {"plugins"},
    "2026-09-28": CORE | {"plugins", "environments"},
    "2026-10-04": CORE | {"plugins", "environments", "memories"},
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("report-harness-versions")
    proc = _start(tmp, dead_port=9)  # port 9 (discard) is never contacted: no tool calls here
    try:
        yield proc, tmp / "harness.db"
    finally:
        proc.stop()


@pytest.fixture
def client(harness: tuple[ServerProcess, Path]) -> Iterator[httpx.Client]:
    with _client(harness[0]) as c:
        yield c


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_is_served_from_one_code_path(client: httpx.Client, version: str) -> None:
    asked = {"UHP-Version": version}
    doc = client.get("/v1/uhp", headers=asked)
    assert doc.status_code == 200 and doc.headers["UHP-Version"] == version
    assert doc.json()["versions"] == list(VERSIONS)
    assert doc.json()["default_version"] == "2026-08-11"
    capabilities = doc.json()["capabilities"]
    # Exactly what this version defines (a later version's keys never), the optional ones off;
    # ``stream_resumption`` is this harness's own key, kept at every version.
    assert set(capabilities) == STATED[version] | {"stream_resumption"}
    assert all(capabilities[name] is False for name in STATED[version] - STATED["2026-08-11"])
    ran = client.post("/v1/responses", json={"input": "reply with the word kiwi"}, headers=asked)
    assert ran.status_code == 200 and ran.headers["UHP-Version"] == version
    assert _text(ran.json()) == "kiwi"
    read = client.get(f"/v1/responses/{ran.json()['id']}", headers=asked)
    assert read.headers["UHP-Version"] == version


@pytest.mark.parametrize(
    ("path", "capability"),
    [
        ("/v1/harnesses/chrn_reports/plugin", "plugins"),
        ("/v1/environments", "environments"),
        ("/v1/environments/henv_x/files", "environments"),
        ("/v1/memories", "memories"),
        ("/v1/memories/hmem_x/recall", "memories"),
        ("/v1/harnesses/chrn_reports/memories", "memories"),
    ],
)
def test_an_absent_capability_answers_404_naming_it(
    client: httpx.Client, path: str, capability: str
) -> None:
    for method in ("GET", "POST", "PUT", "DELETE"):
        answer = client.request(method, path, headers={"UHP-Version": "2026-10-04"})
        assert answer.status_code == 404, (method, path)
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "not_found"
        assert error["detail"] == {"capability": capability}
        assert answer.headers["UHP-Version"] == "2026-10-04"


@pytest.mark.parametrize(
    ("key", "since", "code"),
    [
        ("environment", "2026-09-28", "environment_not_found"),
        ("memory", "2026-10-04", "memory_not_found"),
    ],
)
def test_a_task_naming_an_absent_capabilitys_object_is_refused_from_its_version(
    client: httpx.Client, key: str, since: str, code: str
) -> None:
    body = {"input": "reply with the word lime", "metadata": {key: "x_nope"}}
    for version in VERSIONS:
        answer = client.post("/v1/responses", json=body, headers={"UHP-Version": version})
        if version < since:  # the key is plain metadata there: kept, echoed
            assert answer.status_code == 200 and answer.json()["metadata"][key] == "x_nope"
            continue
        assert answer.status_code == 404, version
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == (code, f"metadata.{key}")


def test_an_unknown_version_is_refused_listing_every_one(client: httpx.Client) -> None:
    for method, path in (("GET", "/v1/uhp"), ("POST", "/v1/responses")):
        refused = client.request(
            method, path, json={"input": "x"}, headers={"UHP-Version": "2026-11-01"}
        )
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "unsupported_protocol_version"
        assert error["detail"]["supported"] == list(VERSIONS)
        assert refused.headers["UHP-Version"] == "2026-08-11"  # the default, never the asked


@pytest.mark.parametrize("version", VERSIONS)
def test_ignored_fields_are_named_reserved_ones_always(client: httpx.Client, version: str) -> None:
    body = {
        "input": "reply with the word fig",
        "tools": [{"type": "function", "name": "probe"}],
        "include": ["x"],
        "instructions": "be brief",  # the scripted agent never reads it
        "store": False,  # accepted, not honoured: every response is kept
        "max_output_tokens": 5,
        "environment": "env_nope",  # no environments capability
    }
    ran = client.post("/v1/responses", json=body, headers={"UHP-Version": version})
    assert ran.status_code == 200 and ran.json()["status"] == "completed"
    assert ran.json()["metadata"]["ignored_fields"] == sorted(
        ["tools", "include", "instructions", "store", "max_output_tokens", "environment"]
    )
    plain = _create(client, "reply with the word fig", store=True, max_step=3)
    assert "ignored_fields" not in plain["metadata"]  # nothing sent that was dropped


def test_delete_session_cancels_what_runs_then_everything_is_404(
    harness: tuple[ServerProcess, Path], client: httpx.Client
) -> None:
    first = _create(client, "reply with the word plum")
    running = _create(
        client, "count slowly to 50", previous_response_id=first["id"], background=True
    )
    session_id = running["metadata"]["session_id"]
    _poll(lambda: _text(client.get(f"/v1/responses/{running['id']}").json()), "the first number")
    assert client.get(f"/v1/sessions/{session_id}").json()["responses"][1]["status"] == (
        "in_progress"
    )
    gone = client.delete(f"/v1/sessions/{session_id}")
    assert gone.status_code == 200
    assert gone.json() == {"id": session_id, "object": "session.deleted", "deleted": True}
    for path in (f"/v1/sessions/{session_id}", f"/v1/responses/{running['id']}"):
        missing = client.get(path)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] in ("session_not_found", "response_not_found")
    again = client.delete(f"/v1/sessions/{session_id}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "session_not_found"
    # Cancelled, not left counting into a deleted session (the rows stay, unreadable).
    store = HarnessStore.open(str(harness[1]))
    try:
        statuses = _poll(
            lambda: (
                (s := [r.status for r in store.session(digest_principal(TOKEN), session_id)])[1]
                != "in_progress"
                and s
            ),
            "the running response to settle",
        )
    finally:
        store.close()
    assert statuses == ["completed", "cancelled"]


def test_another_principal_cannot_see_or_delete_a_session(
    harness: tuple[ServerProcess, Path], client: httpx.Client
) -> None:
    from tests.test_report_harness import OTHER_TOKEN

    session_id = _create(client, "reply with the word pear")["metadata"]["session_id"]
    with _client(harness[0], token=OTHER_TOKEN) as other:
        assert other.delete(f"/v1/sessions/{session_id}").status_code == 404
        assert other.get(f"/v1/sessions/{session_id}").status_code == 404
    assert client.get(f"/v1/sessions/{session_id}").status_code == 200
