"""The operator's loop from the console alone (a real `bridge console` process, on SQLite and
PostgreSQL): a card per attention kind with its action, each item leaving once acted upon; the
response shown; the runs list's attention column; a lost task shown as lost, not waiting; the
timeline's legend and each lane's end state; a confirmation naming the request, run and answer;
the URL printed at start."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from tests.conftest import FakeClock
from tests.support.console import console_process
from tests.support.processes import ServerProcess
from tests.test_cli import PRINCIPAL, Scenario, add_orphan, populate
from tests.test_console_http import TOKENS, client, csrf_of, no_secrets


@pytest.fixture
def served(
    ledger: Ledger, db_url: str, clock: FakeClock, tmp_path: Path
) -> Iterator[tuple[Scenario, ServerProcess]]:
    """The CLI's scenario on SQLite and on the suite's PostgreSQL, served by a console."""
    scenario = populate(ledger, clock, db_url)  # type: ignore[arg-type]
    with console_process(tmp_path, db_url, TOKENS) as proc:
        yield scenario, proc


KINDS = ("input_overdue", "unknown_outcome", "lost_task", "anomaly", "orphaned_run")


def test_every_kind_has_a_card_and_leaves_once_acted_upon(
    served: tuple[Scenario, ServerProcess], ledger: Ledger, clock: FakeClock
) -> None:
    scenario, proc = served
    run, anomaly = scenario.run_ref, f"{scenario.run_ref}:{scenario.last_seq}"
    orphan, orphan_task = add_orphan(ledger, clock)  # the scenario's run waits on a person
    assert re.search(r"bridge console: http://127\.0\.0\.1:\d+/", proc.log_path.read_text())
    with client(proc, PRINCIPAL) as http:
        inbox = http.get("/inbox").text
        for kind in KINDS:  # the scenario's clock is months behind: overdue and orphaned
            assert f'data-kind="{kind}"' in inbox, kind
        assert "Approve 120 EUR?" in inbox and "response -" not in inbox
        assert 'id="attention-count">5<' in inbox
        runs = http.get("/runs").text
        assert '<a href="/inbox">4 waiting</a>' in runs  # the attention column is true
        assert '<a href="/inbox">1 waiting</a>' in runs  # the orphan
        page = http.get(f"/runs/{run}").text
        lost_row = page[page.index(f'data-task="{scenario.lost_ref}"') :].split("</tr>")[0]
        assert 'data-status="lost"' in lost_row and "waiting" not in lost_row
        assert 'class="legend"' in page and 'class="end-state" data-end="completed"' in page
        token = csrf_of(inbox)

        acked = http.post(f"/runs/{run}/acknowledge", data={"csrf": token, "ref": anomaly})
        assert acked.status_code == 303
        shown = http.get(acked.headers["location"]).text
        assert f"Acknowledged (recorded). Anomaly {anomaly} of run {run}." in shown
        again = http.post(f"/runs/{run}/acknowledge", data={"csrf": token, "ref": anomaly})
        assert again.status_code == 409 and "already acknowledged by console:acme" in again.text
        form = {"csrf": token, "ref": scenario.lost_ref, "note": "never charged"}
        assert http.post(f"/runs/{run}/acknowledge", data=form).status_code == 303
        resolve = f"/runs/{run}/calls/{scenario.unknown_op}/resolve"
        verdict = {"csrf": token, "admission": "admitted", "back": "inbox"}
        resolved = http.post(resolve, data=verdict)  # from the inbox: back to it, saying what
        assert resolved.status_code == 303 and resolved.headers["location"].startswith("/inbox?")
        said = http.get(resolved.headers["location"]).text
        assert f"Verdict recorded. Call {scenario.unknown_op} of run {run}: it ran." in said

        answer = f"/runs/{run}/inputs/{scenario.waiting_ref}/{scenario.input_ref}/answer"
        answered = http.post(answer, data={"csrf": token, "action": "decline"})
        assert answered.status_code == 303
        confirmation = http.get(answered.headers["location"]).text
        assert f"Request {scenario.input_ref} of run {run}: decline." in confirmation

        refused = http.post(f"/runs/{orphan}/close", data={"csrf": token, "status": "failed"})
        assert refused.status_code == 422  # a reason is required
        closing = {"csrf": token, "status": "failed", "reason": "harness host gone"}
        closed = http.post(f"/runs/{orphan}/close", data=closing)
        assert closed.status_code == 303
        closed_page = http.get(closed.headers["location"]).text
        assert f"Run closed (recorded); its tasks are left as they are. Run {orphan}: failed." in (
            closed_page
        )
        assert 'id="inbox-empty"' in http.get("/inbox").text  # every item left
        no_secrets(scenario, inbox + runs + page)
    tenant = ledger.for_principal(PRINCIPAL)
    assert tenant.reads.get_run(orphan).status is OuterStatus.FAILED
    working = tenant.reads.get_task(orphan_task)
    assert working.is_open and working.cancel_requested_at_ms is None  # left alone
    by = {
        e.type: e.model_dump().get("by")
        for e in [*tenant.reads.events(run), *tenant.reads.events(orphan)]
    }
    assert by["call.admission_checked"] == "console:acme"
    assert by["outer.closed_by_operator"] == "console:acme"
