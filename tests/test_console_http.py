"""The web console over HTTP (a real `bridge console` process on a real SQLite ledger): sign-in,
the session cookie, CSRF and cross-site refusals, principal scoping, runs search and filter,
the run page and its SSE stream, the verdict on an unknown outcome, and no raw task id or
token in anything it answers or logs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bridge._ledger.store import Ledger
from tests.conftest import FakeClock
from tests.support.console import base_url, console_process
from tests.support.processes import REPO_ROOT, ServerProcess
from tests.test_cli import PRINCIPAL, Scenario, add_orphan, populate

TOKENS = {PRINCIPAL: "acme-console-token-0123456789", "globex": "globex-console-token-987654"}


@pytest.fixture
def served(
    sqlite_ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> Iterator[tuple[Scenario, ServerProcess]]:
    scenario = populate(sqlite_ledger, clock, tmp_path / "ledger.db")
    with console_process(tmp_path, scenario.db, TOKENS) as proc:
        yield scenario, proc


@pytest.fixture
def served_on_each_backend(
    ledger: Ledger, db_url: str, clock: FakeClock, tmp_path: Path
) -> Iterator[tuple[Scenario, ServerProcess]]:
    """The same scenario on SQLite and on the suite's PostgreSQL."""
    scenario = populate(ledger, clock, db_url)  # type: ignore[arg-type]
    with console_process(tmp_path, db_url, TOKENS) as proc:
        yield scenario, proc


def client(proc: ServerProcess, principal: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {TOKENS[principal]}"} if principal else {}
    return httpx.Client(base_url=base_url(proc), headers=headers, timeout=20)


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def no_secrets(scenario: Scenario, text: str) -> None:
    for raw in scenario.raw_ids:
        assert raw not in text
    for token in TOKENS.values():
        assert token not in text


def test_pages_need_a_principal(served: tuple[Scenario, ServerProcess]) -> None:
    scenario, proc = served
    with client(proc) as http:
        for path in ("/inbox", "/runs", f"/runs/{scenario.run_ref}"):
            answer = http.get(path)
            assert answer.status_code == 303 and answer.headers["location"] == "/login"
        assert (
            http.get(
                f"/runs/{scenario.run_ref}/stream", headers={"accept": "text/event-stream"}
            ).status_code
            == 401
        )
        assert (
            http.post(f"/runs/{scenario.run_ref}/tasks/{scenario.waiting_ref}/cancel").status_code
            == 401
        )
        bad = client(proc)
        bad.headers["Authorization"] = "Bearer not-a-token"
        assert bad.get("/inbox").status_code == 303
        login = http.get("/login")
        assert login.status_code == 200
        assert "script-src 'self'" in login.headers["content-security-policy"]
        assert login.headers["x-frame-options"] == "DENY"


def test_login_sets_a_strict_httponly_session_cookie(
    served: tuple[Scenario, ServerProcess],
) -> None:
    scenario, proc = served
    with client(proc) as http:
        refused = http.post("/login", data={"token": "wrong"})
        assert refused.status_code == 401 and "not known" in refused.text
        signed_in = http.post("/login", data={"token": TOKENS[PRINCIPAL]})
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/inbox"
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert TOKENS[PRINCIPAL] not in cookie
        inbox = http.get("/inbox")
        assert inbox.status_code == 200 and "signed in as <b>acme</b>" in inbox.text
        assert scenario.input_ref in inbox.text and "Approve 120 EUR?" in inbox.text
        no_secrets(scenario, inbox.text)
        out = http.post("/logout", data={"csrf": csrf_of(inbox.text)})
        assert out.status_code == 303
        http.cookies.clear()
        assert http.get("/inbox").status_code == 303


def test_posts_without_the_csrf_token_or_from_another_site_are_refused(
    served: tuple[Scenario, ServerProcess],
) -> None:
    scenario, proc = served
    cancel = f"/runs/{scenario.run_ref}/tasks/{scenario.waiting_ref}/cancel"
    with client(proc) as http:
        http.post("/login", data={"token": TOKENS[PRINCIPAL]})
        token = csrf_of(http.get("/inbox").text)
        assert http.post(cancel, data={}).status_code == 403
        assert http.post(cancel, data={"csrf": "forged"}).status_code == 403
        evil = http.post(cancel, data={"csrf": token}, headers={"origin": "http://evil.example"})
        assert evil.status_code == 403
        sneaky = http.post(cancel, data={"csrf": token}, headers={"sec-fetch-site": "cross-site"})
        assert sneaky.status_code == 403
        assert (
            http.post(
                "/login", data={"token": "x"}, headers={"origin": "http://evil.example"}
            ).status_code
            == 403
        )
    with client(proc, PRINCIPAL) as bearer:  # a bearer client's forms carry a token too
        assert bearer.post(cancel, data={}).status_code == 403
    ledger = Ledger.open(scenario.db)
    try:
        task = ledger.for_principal(PRINCIPAL).reads.get_task(scenario.waiting_ref)
        assert task.cancel_requested_at_ms is None  # nothing was done
    finally:
        ledger.close()


def test_another_principal_sees_nothing(served: tuple[Scenario, ServerProcess]) -> None:
    scenario, proc = served
    with client(proc, "globex") as http:
        assert scenario.run_ref not in http.get("/runs").text
        inbox = http.get("/inbox")
        assert scenario.input_ref not in inbox.text and "Nothing waits" in inbox.text
        assert http.get(f"/runs/{scenario.run_ref}").status_code == 404
        assert http.get(f"/runs/{scenario.run_ref}/stream").status_code == 404
        token = csrf_of(inbox.text)
        cancel = f"/runs/{scenario.run_ref}/tasks/{scenario.waiting_ref}/cancel"
        assert http.post(cancel, data={"csrf": token}).status_code == 404
        resolve = f"/runs/{scenario.run_ref}/calls/{scenario.unknown_op}/resolve"
        assert http.post(resolve, data={"csrf": token, "admission": "admitted"}).status_code == 404
        answer = (
            f"/runs/{scenario.run_ref}/inputs/{scenario.waiting_ref}/{scenario.input_ref}/answer"
        )
        form = {"csrf": token, "action": "decline"}
        assert http.post(answer, data=form).status_code == 404
    with client(proc, PRINCIPAL) as http:  # still waiting for its own principal
        assert scenario.input_ref in http.get("/inbox").text


def test_runs_search_and_filter(served: tuple[Scenario, ServerProcess]) -> None:
    scenario, proc = served
    with client(proc, PRINCIPAL) as http:
        assert scenario.run_ref in http.get("/runs").text
        assert scenario.run_ref in http.get("/runs", params={"q": "resp_cli0001"}).text
        assert scenario.run_ref in http.get("/runs", params={"q": "approve_payment"}).text
        assert scenario.run_ref in http.get("/runs", params={"status": "open"}).text
        assert scenario.run_ref not in http.get("/runs", params={"status": "completed"}).text
        assert scenario.run_ref not in http.get("/runs", params={"q": "no-such-thing"}).text
        # A raw task id is no search key: it matches nothing.
        assert scenario.run_ref not in http.get("/runs", params={"q": scenario.raw_ids[0]}).text
        escaped = http.get("/runs", params={"q": "<script>x</script>"}).text
        assert "<script>x" not in escaped and "&lt;script&gt;x" in escaped


def test_run_page_shows_both_lanes_without_raw_ids(
    served_on_each_backend: tuple[Scenario, ServerProcess],
) -> None:
    scenario, proc = served_on_each_backend
    with client(proc, PRINCIPAL) as http:
        page = http.get(f"/runs/{scenario.run_ref}").text
        assert 'data-lane="outer"' in page
        for ref in (scenario.done_ref, scenario.waiting_ref, scenario.lost_ref):
            assert f'data-lane="{ref}"' in page
        assert f'data-call="{scenario.unknown_op}"' in page  # the verdict form
        assert 'data-action="cancel"' in page
        no_secrets(scenario, page)
        with http.stream(
            "GET", f"/runs/{scenario.run_ref}/stream", params={"after": scenario.last_seq - 2}
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            seen = ""
            for line in stream.iter_lines():
                seen += line + "\n"
                if line.startswith("data:"):
                    break
        assert f"id: {scenario.last_seq}" in seen and "event: timeline" in seen
        no_secrets(scenario, seen)


def test_the_verdict_on_an_unknown_outcome_is_recorded_once(
    served_on_each_backend: tuple[Scenario, ServerProcess], ledger: Ledger
) -> None:
    scenario, proc = served_on_each_backend
    resolve = f"/runs/{scenario.run_ref}/calls/{scenario.unknown_op}/resolve"
    with client(proc, PRINCIPAL) as http:
        inbox = http.get("/inbox").text
        assert f'data-kind="unknown_outcome" data-subject="{scenario.unknown_op}"' in inbox
        token = csrf_of(inbox)
        assert http.post(resolve, data={"csrf": token, "admission": "maybe"}).status_code == 422
        done = http.post(resolve, data={"csrf": token, "admission": "admitted"})
        assert done.status_code == 303
        page = http.get(done.headers["location"]).text
        assert "Verdict recorded" in page
        assert f'data-call="{scenario.unknown_op}" data-verdict="admitted"' in page
        assert scenario.unknown_op not in http.get("/inbox").text
        again = http.post(resolve, data={"csrf": token, "admission": "not_admitted"})
        assert again.status_code == 409 and "already resolved as admitted" in again.text
    events = ledger.for_principal(PRINCIPAL).reads.events(scenario.run_ref)
    checked = [e for e in events if e.type == "call.admission_checked"]
    assert [e.admission for e in checked] == ["admitted"]  # type: ignore[attr-defined]
    no_secrets(scenario, proc.log_path.read_text())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--db", "missing.db", "--tokens", "t.json"], "no ledger at missing.db"),
        (["--db", "ledger.db"], "no console tokens"),
        (["--db", "ledger.db", "--tokens", "bad.json"], "token_sha256 must be 64"),
        (["--db", "ledger.db", "--tokens", "t.json", "--listen", "host:port"], "HOST:PORT"),
        (["--db", "ledger.db", "--tokens", "t.json", "--port", "0"], "--port-file"),
    ],
)
def test_the_command_refuses_a_bad_start_in_one_line(
    tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "ledger.db").touch()
    (tmp_path / "t.json").write_text(
        '{"principals": {"acme": {"token_sha256": "' + "a" * 64 + '"}}}'
    )
    (tmp_path / "bad.json").write_text('{"principals": {"acme": {"token_sha256": "short"}}}')
    env = {k: v for k, v in os.environ.items() if k != "BRIDGE_CONSOLE_TOKENS"}
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "console", *args],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_a_delivered_answer_is_said_not_a_bare_input_required(
    served: tuple[Scenario, ServerProcess], sqlite_ledger: Ledger
) -> None:
    """Answered and delivered, a task still reads ``input_required`` until a poll sees the
    server move on: its row says the answer was delivered, and no input is waiting."""
    scenario, proc = served
    tenant = sqlite_ledger.for_principal(PRINCIPAL)
    tenant.inputs.record_input_answer(
        scenario.waiting_ref, scenario.input_ref, {"action": "accept", "content": {}}
    )
    tenant.inputs.mark_answer_delivered(scenario.waiting_ref, scenario.input_ref)
    with client(proc, PRINCIPAL) as http:
        page = http.get(f"/runs/{scenario.run_ref}").text
    row = page[page.index(f'<tr data-task="{scenario.waiting_ref}"') :].split("</tr>")[0]
    assert "answer delivered; waiting for the server to move on" in row
    assert "input(s) waiting" not in row


def test_the_inbox_thresholds_are_the_consoles_options(
    sqlite_ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    """``--orphan-after`` and ``--overdue-after`` move the inbox's thresholds, as they move
    ``bridge attention``'s: with both far away, the input is waiting (not overdue) and the
    silent run is not orphaned yet."""
    scenario = populate(sqlite_ledger, clock, tmp_path / "ledger.db")
    orphan, _ = add_orphan(sqlite_ledger, clock)
    far = str(10 * 365 * 24 * 3600)  # the scenario's clock is months behind the wall clock
    args = ["--orphan-after", far, "--overdue-after", far]
    with (
        console_process(tmp_path, scenario.db, TOKENS, extra_args=args) as proc,
        client(proc, PRINCIPAL) as http,
    ):
        inbox = http.get("/inbox").text
    assert 'data-kind="input_waiting"' in inbox and 'data-kind="input_overdue"' not in inbox
    assert 'data-kind="orphaned_run"' not in inbox and orphan not in inbox
