"""The UHP client's 2026-09-28 surface over real HTTP on 127.0.0.1: version negotiation (the
test UHP server and the example report harness), ``metadata.ignored_fields`` surfaced as a
typed field, an ``outer.fields_ignored`` event and a warning (never an error), and deleting
responses and sessions with typed 404s."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge import events as ev
from bridge._ledger.store import Ledger
from bridge.uhp._client import UhpClient
from bridge.uhp._errors import UhpNotFound, UhpUnsupportedVersion
from tests.support.processes import ServerProcess
from tests.test_report_harness import TOKEN as HARNESS_TOKEN, _start
from tests.test_uhp_client import (
    HARNESS,
    TOKEN,
    _base,
    client as client,  # the fixtures, shared, not copied
    uhp_server as uhp_server,
)

pytestmark = pytest.mark.anyio


async def test_discovery_negotiates_the_newest_version_both_servers_offer(
    wall_ledger: Ledger, uhp_server: ServerProcess, tmp_path: Path
) -> None:
    async with UhpClient(_base(uhp_server), token=TOKEN, ledger=wall_ledger, principal="a") as c:
        await c.discover()
        assert c.version == "2026-10-04"
        reply = await c.http.get(f"{c.base_url}/v1/harnesses", headers=c._headers())
        assert reply.headers["UHP-Version"] == "2026-10-04"
    # The report harness defaults to 2026-08-11 for a client that sends no header, and
    # serves 2026-09-28 to one that asks for it.
    harness = _start(tmp_path, dead_port=9)
    try:
        base = f"http://127.0.0.1:{harness.port}"
        async with UhpClient(base, token=HARNESS_TOKEN, ledger=wall_ledger, principal="b") as c:
            discovery = await c.discover()
            assert discovery.default_version == "2026-08-11" and c.version == "2026-10-04"
            run = await c.create_response("reply with the word date")
            assert run.response.output_text() == "date"
            raw = await c.http.get(f"{base}/v1/responses/{run.response.id}", headers=c._headers())
            assert raw.headers["UHP-Version"] == "2026-10-04"
        async with UhpClient(
            base, token=HARNESS_TOKEN, ledger=wall_ledger, principal="b", version="1999-01-01"
        ) as old:
            with pytest.raises(UhpUnsupportedVersion) as refused:
                await old.harnesses()
            assert refused.value.supported == [
                "2026-08-11",
                "2026-09-12",
                "2026-09-28",
                "2026-10-04",
            ]
    finally:
        harness.stop()


@pytest.mark.parametrize("version", ["2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04"])
async def test_the_client_negotiates_with_a_server_of_any_one_version(
    wall_ledger: Ledger, version: str
) -> None:
    with ServerProcess("tests.servers.uhp_server", args=["--version", version]) as server:
        async with UhpClient(_base(server), token=TOKEN, ledger=wall_ledger, principal="a") as c:
            discovery = await c.discover()
            assert discovery.versions == [version] and c.version == version
            run = await c.create_response("words=2 delay_ms=0", harness_id=HARNESS)
            assert run.response.status == "completed"
            raw = await c.http.get(
                f"{c.base_url}/v1/responses/{run.response.id}", headers=c._headers()
            )
            assert raw.headers["UHP-Version"] == version


async def test_a_server_serving_no_version_the_client_speaks_is_refused_before_any_request(
    wall_ledger: Ledger,
) -> None:
    with ServerProcess(
        "tests.servers.uhp_server", args=["--version", "2025-01-01", "--version", "2027-03-01"]
    ) as server:
        async with UhpClient(_base(server), token=TOKEN, ledger=wall_ledger, principal="a") as c:
            with pytest.raises(UhpUnsupportedVersion) as refused:
                await c.discover()
            assert refused.value.code == "unsupported_protocol_version"
            assert refused.value.supported == ["2025-01-01", "2027-03-01"]
            assert "2026-10-04" in str(refused.value) and "2027-03-01" in str(refused.value)
            stats = (await c.http.get(f"{c.base_url}/_test/stats")).json()
    assert stats["responses"] == 0  # nothing was sent beyond discovery


@pytest.mark.parametrize("version", ["2026-08-11", "2026-09-28"])
async def test_ignored_fields_are_surfaced_never_raised(
    client: UhpClient, wall_ledger: Ledger, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.version = version  # a 2026-08-11 clarification: named at both versions
    with caplog.at_level(logging.WARNING, logger="bridge.uhp"):
        run = await client.create_response(
            "words=2 delay_ms=0",
            harness_id=HARNESS,
            tools=[{"type": "function", "name": "probe"}],
            include=["x"],
            instructions="ignored by the scripted harness",
        )
    assert run.response.status == "completed"
    assert run.response.ignored_fields == ["include", "instructions", "tools"]
    events = wall_ledger.for_principal("acme").reads.events(run.run_ref)
    noted = [e for e in events if isinstance(e, ev.OuterFieldsIgnored)]
    assert [e.fields for e in noted] == [["include", "instructions", "tools"]]
    assert any(run.run_ref in r.getMessage() and "tools" in r.getMessage() for r in caplog.records)
    plain = await client.create_response("words=1 delay_ms=0", harness_id=HARNESS)
    assert plain.response.ignored_fields == []
    types = [e.type for e in wall_ledger.for_principal("acme").reads.events(plain.run_ref)]
    assert "outer.fields_ignored" not in types


async def test_a_streamed_run_notes_ignored_fields_once(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=3 delay_ms=0", harness_id=HARNESS, include=[])
    final = await follower.until_terminal()
    assert final.ignored_fields == ["include"]
    events = wall_ledger.for_principal("acme").reads.events(follower.run_ref)
    assert sum(isinstance(e, ev.OuterFieldsIgnored) for e in events) == 1


async def test_delete_response_leaves_the_task_running_and_answers_404_after(
    client: UhpClient,
) -> None:
    run = await client.create_response("words=40 delay_ms=25", harness_id=HARNESS, background=True)
    deleted = await client.delete_response(run.response.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (
        run.response.id,
        "response.deleted",
        True,
    )
    with pytest.raises(UhpNotFound) as gone:
        await client.get_response(run.response.id)
    assert gone.value.code == "response_not_found"
    with pytest.raises(UhpNotFound) as twice:
        await client.delete_response(run.response.id)
    assert twice.value.status == 404 and twice.value.code == "response_not_found"


async def test_delete_session_cancels_then_deletes(client: UhpClient) -> None:
    run = await client.create_response("words=400 delay_ms=25", harness_id=HARNESS, background=True)
    session_id = run.response.session_id
    assert session_id is not None and run.response.status == "in_progress"
    deleted = await client.delete_session(session_id)
    assert (deleted.id, deleted.object, deleted.deleted) == (session_id, "session.deleted", True)
    with pytest.raises(UhpNotFound):
        await client.get_response(run.response.id)
    with pytest.raises(UhpNotFound) as twice:
        await client.delete_session(session_id)
    assert twice.value.code == "session_not_found"
    with pytest.raises(UhpNotFound) as cancel:
        await client.cancel_session(session_id)
    assert cancel.value.code == "session_not_found"
