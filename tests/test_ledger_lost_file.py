"""The ledger file deleted under a running harness or bridge: work is refused (503) from the
first request after it, never acknowledged and lost, and the bridge stays up saying why."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest

from bridge import Bridge, BridgeSettings
from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import CALL_PATH_CHECK_EVERY
from tests.test_ledger_faults import _served_harness

DEADLINE_S = 15.0


@pytest.mark.e2e
def test_every_post_after_the_file_is_deleted_is_refused(tmp_path: Path) -> None:
    """Only POSTs, no read between them: before, the call path's check (one transaction in
    CALL_PATH_CHECK_EVERY) let the first ones through, answered 200 and lost on restart."""
    db = tmp_path / "harness.db"
    with _served_harness(tmp_path, str(db)) as (server, client):
        first = client.post("/v1/responses", json={"input": "reply banana", "background": True})
        assert first.status_code == 200, first.text
        db.unlink()
        for _ in range(CALL_PATH_CHECK_EVERY + 4):
            reply = client.post("/v1/responses", json={"input": "reply kiwi", "background": True})
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "ledger_unavailable"
        assert not db.exists(), "no empty database may be created in its place"
        assert "was deleted under the running process" in server.log_tail(200)


@pytest.mark.anyio
async def test_a_deleted_file_wakes_waiters_and_leaves_the_bridge_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "ledger.db"
    settings = BridgeSettings(ledger_url=db, principals=["acme"])
    errors: list[BaseException] = []
    with caplog.at_level(logging.ERROR, logger="bridge._ledger"):
        async with Bridge.open(settings) as bridge:
            run = await bridge.register_served_run(
                "acme", response_id="resp_1", session_id="hsess_1", harness_id="chrn_x"
            )

            async def subscriber() -> None:
                try:
                    async for _event in run.subscribe(after_seq=10**6):
                        pass
                except LedgerUnavailable as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(subscriber)
                await anyio.sleep(0.3)  # the subscriber waits on its watch
                db.unlink()
                started = time.monotonic()
                with anyio.fail_after(DEADLINE_S):
                    while not errors:
                        await anyio.sleep(0.05)
            assert time.monotonic() - started < 10.0
            with pytest.raises(LedgerUnavailable, match="deleted"):
                await bridge.register_served_run(
                    "acme", response_id="resp_2", session_id="hsess_2", harness_id="chrn_x"
                )
    assert "deleted" in str(errors[0])
    assert not db.exists()
    lost_lines = [r for r in caplog.records if "was deleted under the running process" in r.message]
    assert len(lost_lines) == 1
