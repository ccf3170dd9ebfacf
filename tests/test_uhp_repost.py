"""Recovering a run whose POST was answered but whose response id was never recorded, against
the example report harness over real HTTP: the creating process is SIGKILLed at that point,
``Bridge.recover`` reports the run, and ``repost()`` sends the recorded body again with the
recorded ``Idempotency-Key`` -> the first response, one execution."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bridge import Bridge, BridgeSettings, UhpServerConfig
from bridge._ledger.store import Ledger
from bridge.uhp import RequestNotRepostable
from bridge.uhp._client import UhpClient
from bridge.uhp._request_record import REDACTED, RecordedRequest
from tests.support.processes import REPO_ROOT, ServerProcess
from tests.test_report_harness import TOKEN, _start

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("repost-harness")
    proc = _start(tmp, dead_port=9)  # no tool calls here: the MCP servers are never contacted
    try:
        yield proc, tmp / "harness.db"
    finally:
        proc.stop()


def _base(server: ServerProcess) -> str:
    return f"http://127.0.0.1:{server.port}"


def _executions(harness_db: Path) -> int:
    """Responses the harness created (each one is one execution of the scripted agent)."""
    engine = create_engine(f"sqlite:///{harness_db}")
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM harness_responses")).scalar_one())
    finally:
        engine.dispose()


def _crash_after_post(db: Path, base_url: str) -> str:
    died = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.uhp_post_driver",
            *("--db", str(db), "--base-url", base_url, "--token", TOKEN),
            *("--input", "reply with the word quince"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    return died.stdout.split()[0]


async def test_recover_reports_the_unanswered_post_and_repost_gets_the_first_response(
    harness: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, harness_db = harness
    db = tmp_path / "client.db"
    before = _executions(harness_db)
    run_ref = _crash_after_post(db, _base(server))
    assert _executions(harness_db) == before + 1  # the server ran it; the client never knew
    with closing(Ledger.open(db)) as ledger:
        run = ledger.for_principal("acme").reads.get_run(run_ref)
        assert run.response_id is None and run.idempotency_key is not None
    assert TOKEN.encode() not in db.read_bytes()  # the bearer token never reaches the ledger

    config = UhpServerConfig(name="reports", base_url=_base(server), credential_ref="reports")
    async with Bridge.open(
        BridgeSettings(
            ledger_url=db,
            principals=["acme"],
            uhp_servers=[config],
            credentials={"reports": TOKEN}.get,
        )
    ) as bridge:
        report = bridge.last_recovery
        assert report is not None
        [post] = report.unanswered_posts
        assert (post.run_ref, post.idempotency_key) == (run_ref, run.idempotency_key)
        assert post.repostable and post.request is not None
        assert post.request.body["metadata"] == {"ticket": "T-1"}
        first = await post.repost()
        again = await post.repost(background=True)
        recovered = await bridge.run("acme", run_ref).view()
    assert first.run_ref == again.run_ref == run_ref
    assert first.response.id == again.response.id == recovered.response_id
    assert first.response.status == "completed" and first.response.output_text() == "quince"
    assert _executions(harness_db) == before + 1  # one execution, however often it is sent
    with closing(Ledger.open(db)) as ledger:
        assert ledger.for_principal("acme").reads.unacknowledged_runs() == []


async def test_a_body_with_a_credential_is_scrubbed_and_not_reposted(
    harness: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, _ = harness
    with closing(Ledger.open(tmp_path / "client.db")) as ledger:
        async with UhpClient(_base(server), token=TOKEN, ledger=ledger, principal="acme") as uhp:
            await uhp.discover()
            created = await uhp.create_response(
                f"reply with the word lime {TOKEN}",
                metadata={"api_key": "sk-live-never-stored", "note": "kept"},
            )
            stored = ledger.for_principal("acme").reads.run_request(created.run_ref)
            assert stored is not None
            recorded = RecordedRequest.from_json(stored)
            assert recorded.body["metadata"] == {"api_key": REDACTED, "note": "kept"}
            assert TOKEN not in stored and "sk-live-never-stored" not in stored
            assert sorted(recorded.redacted) == ["$.input", "$.metadata.api_key"]
            assert json.loads(stored)["body"]["input"] == f"reply with the word lime {REDACTED}"
            with pytest.raises(RequestNotRepostable, match=r"\$\.metadata\.api_key"):
                await uhp.repost(created.run_ref)
