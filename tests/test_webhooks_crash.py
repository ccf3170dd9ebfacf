"""SIGKILL between the commit of attention items and their delivery, then a restart: every item
is delivered, and an item delivered again carries the same id and the same body."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bridge._ledger.store import Ledger
from tests.support.processes import REPO_ROOT
from tests.support.webhook_driver import SECRET_ENV
from tests.support.webhooks import new_secret, receiving

pytestmark = pytest.mark.e2e

ITEMS = 40
DEADLINE_S = 60


def _driver(db: Path, url: str, secret: str, items: int = 0) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.support.webhook_driver", "--db", str(db)]
    command += ["--url", url, "--items", str(items)]
    return subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, SECRET_ENV: secret},
        stdout=subprocess.PIPE,
        text=True,
    )


def _outbox(db: Path) -> tuple[set[str], int]:
    """Every item id in the outbox, and how many are delivered (read by another process)."""
    ledger = Ledger.open(db)
    try:
        tenant = ledger.for_principal("acme")
        ids = {f"msg_{run.ref}_2" for run in tenant.reads.list_runs(limit=1000)}
        return ids, tenant.outbox.webhook_outbox_figures().delivered
    finally:
        ledger.close()


def test_sigkill_between_commit_and_delivery_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    secret = new_secret()
    with receiving(secret) as receiver:
        receiver.set_mode("hold")  # requests reach the receiver and wait there, unanswered
        first = _driver(db, receiver.url, secret, ITEMS)
        try:
            assert first.stdout is not None
            assert first.stdout.readline().strip() == "written"
            receiver.wait_for(lambda r: r.requests >= 1, timeout=DEADLINE_S)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=DEADLINE_S)
        committed, delivered = _outbox(db)
        assert len(committed) == ITEMS and delivered == 0  # all committed, none settled
        in_flight = receiver.requests
        receiver.set_mode("ok")  # the held requests are taken now: their sender is dead
        second = _driver(db, receiver.url, secret)
        try:
            receiver.wait_for(lambda _r: _outbox(db)[1] == ITEMS, timeout=DEADLINE_S)
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait(timeout=DEADLINE_S)
    assert receiver.rejected == 0, receiver.rejections
    assert receiver.ids() == committed  # every item, and nothing else
    repeats = Counter(r.id for r in receiver.received)
    repeated = {item for item, n in repeats.items() if n > 1}
    # The requests in flight at the kill were taken by the receiver but never settled: each
    # came again after the restart, with the same id and the same body.
    assert 1 <= len(repeated) <= in_flight
    for item in repeated:
        bodies = {r.body for r in receiver.received if r.id == item}
        assert len(bodies) == 1
