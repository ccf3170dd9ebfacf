"""The web console end to end in a real headless browser (Debian's ``/usr/bin/chromium``,
driven by Playwright; no browser download), against a real MCP server.

A harness-side bridge (this test process) calls the example payments server, whose task asks
for approval (``input_required``) while the call waits; a real ``bridge console`` process
serves the same SQLite ledger. The browser signs in, finds the request in the inbox, is refused
for bad form input (nothing sent), answers from the generated form, and the server records the
payment exactly once (counted in the server's own ledger); the run's timeline page, open all
along, moves to completed over SSE without a reload; a POST without the CSRF token gets 403
and another principal's token sees nothing of it. A second payment is cancelled from the run
page. With ``BRIDGE_CONSOLE_SCREENSHOTS=DIR`` the inbox and timeline screenshots are written
to DIR too (the ones in ``docs/`` were made so).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge._config import McpServerConfig
from bridge._facade import Bridge
from bridge._policies import WaitMode
from bridge._settings import BridgeSettings
from tests.support.bridging import FAST, served_run, wait_until
from tests.support.console import base_url, console_process
from tests.support.example_servers import PAYMENTS_MODULE
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_TOKEN = "payments-server-token-for-console-test"
TOKENS = {"acme": "acme-console-token-5f2c9e", "globex": "globex-console-token-77aa01"}
ARGS = {"amount": 120, "currency": "EUR", "payee": "ACME Corp"}


def chromium_or_skip() -> None:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is required in CI (.ci/run installs it)")
        pytest.skip(f"{CHROMIUM} not installed")


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    ledger = tmp_path / "payments.db"
    proc = ServerProcess(
        PAYMENTS_MODULE, args=["--ledger", str(ledger)], env={"PAYMENTS_SERVER_TOKEN": SERVER_TOKEN}
    )
    with proc:
        yield proc, ledger


def payments_recorded(ledger: Path, key: str) -> int:
    """What the payments server itself recorded: one row per approved execution."""
    with closing(sqlite3.connect(ledger)) as db:
        row = db.execute("SELECT COUNT(*) FROM payments WHERE payment_key = ?", (key,)).fetchone()
    return int(row[0])


@pytest.fixture
async def harness(tmp_path: Path, payments: tuple[ServerProcess, Path]) -> AsyncIterator[Bridge]:
    server, _ = payments
    settings = BridgeSettings(
        ledger_url=tmp_path / "ledger.db",
        principals=list(TOKENS),
        mcp_servers=[McpServerConfig(name="payments", url=server.url, credential_ref="p")],
        credentials={"p": SERVER_TOKEN}.get,
        scheduler=FAST,
    )
    async with Bridge.open(settings) as bridge:
        yield bridge


def saved(shot: Path, name: str) -> None:
    assert shot.stat().st_size > 10 * 1024, f"{name} screenshot is nearly empty"
    folder = os.environ.get("BRIDGE_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(folder) / name)


async def test_an_approval_answered_from_the_page_reaches_the_server_once(
    tmp_path: Path, payments: tuple[ServerProcess, Path], harness: Bridge
) -> None:
    chromium_or_skip()
    from playwright.async_api import async_playwright, expect

    server, payments_db = payments
    bridge = harness
    run_ref = await served_run(bridge, "acme")
    run = bridge.run("acme", run_ref)
    outcome: dict[str, Any] = {}

    async def pay() -> None:  # the harness's step: waits for the approval, then the result
        outcome["step"] = await run.call_tool(
            "payments",
            "approve_payment",
            {**ARGS, "payment_key": "pay-1"},
            wait=WaitMode.ASK,
            wait_deadline_s=300,
        )

    with console_process(
        tmp_path,
        tmp_path / "ledger.db",
        TOKENS,
        mcp_servers={"payments": server.url},
        server_token=SERVER_TOKEN,
    ) as console:
        site = base_url(console)
        async with anyio.create_task_group() as tg, async_playwright() as playwright:
            tg.start_soon(pay)
            [request] = await wait_until(
                lambda: bridge.run("acme", run_ref).pending_inputs(),
                timeout=60,
                what="approval asked",
            )
            task_ref = request.task_ref
            assert task_ref is not None
            raw_ids = [t.task_id for t in await run.tasks()]
            browser = await playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1360, "height": 900},
            )
            pages_seen: list[str] = []
            try:
                # The run's timeline, open before anything is answered.
                timeline = await browser.new_page()
                await timeline.goto(f"{site}/login")
                await timeline.fill("#token", TOKENS["acme"])
                await timeline.click("form[action='/login'] button")
                await timeline.wait_for_url("**/inbox")
                await timeline.goto(f"{site}/runs/{run_ref}")
                await timeline.evaluate("window.__sameDocument = true")
                await timeline.wait_for_selector("#live-state:has-text('following')")
                badge = f"tr[data-task='{task_ref}'] .badge"
                assert await timeline.get_attribute(badge, "data-status") == "input_required"

                inbox = await browser.new_page()
                await inbox.goto(f"{site}/inbox")
                card = inbox.locator("section.attention[data-kind='input_waiting']")
                assert await card.count() == 1
                assert "Approve payment of 120 EUR to ACME Corp" in await card.inner_text()
                await inbox.screenshot(path=str(tmp_path / "inbox.png"), full_page=True)
                saved(tmp_path / "inbox.png", "console-inbox.png")
                pages_seen.append(await inbox.content())

                # Bad input: nothing chosen for the required field, then a value no boolean is.
                async with inbox.expect_navigation() as nothing_chosen:
                    await inbox.click("button[value='accept']")
                assert (await nothing_chosen.value).status == 422  # type: ignore[union-attr]
                assert await inbox.inner_text("[data-field-error='approve']")
                await inbox.evaluate(
                    "document.querySelector(\"input[name='f.approve'][value='true']\").value"
                    " = 'maybe'"
                )
                await inbox.check("input[name='f.approve'][value='maybe']")
                async with inbox.expect_navigation() as not_a_boolean:
                    await inbox.click("button[value='accept']")
                assert (await not_a_boolean.value).status == 422  # type: ignore[union-attr]
                assert await inbox.inner_text("[data-field-error='approve']")
                pages_seen.append(await inbox.content())
                assert len(await bridge.run("acme", run_ref).pending_inputs()) == 1  # nothing sent
                assert payments_recorded(payments_db, "pay-1") == 0

                # A POST without the CSRF token (the session cookie alone) is refused.
                action = await inbox.get_attribute("form.answer", "action")
                assert action is not None
                forged = await browser.request.post(
                    site + action, form={"action": "accept", "f.approve": "true"}
                )
                assert forged.status == 403
                # Another principal's token sees nothing of it.
                other = {"Authorization": f"Bearer {TOKENS['globex']}"}
                their_inbox = await browser.request.get(f"{site}/inbox", headers=other)
                assert request.input_ref not in await their_inbox.text()
                assert (
                    await browser.request.get(f"{site}/runs/{run_ref}", headers=other)
                ).status == 404
                their_runs = await (await browser.request.get(f"{site}/runs", headers=other)).text()
                assert run_ref not in their_runs

                # The answer, from the generated form.
                await inbox.check("input[name='f.approve'][value='true']")
                await inbox.click("button[value='accept']")
                await inbox.wait_for_url("**/inbox?done=answered*")
                confirmation = await inbox.inner_text(".flash")
                assert "delivered" in confirmation
                # The confirmation names the request, its run and the answer given.
                assert request.input_ref in confirmation and run_ref in confirmation
                assert '"approve": "true"' in confirmation
                # The card left the inbox once answered.
                assert (
                    await inbox.locator("section.attention[data-kind='input_waiting']").count() == 0
                )

                settled = await wait_until(lambda: outcome.get("step"), timeout=60, what="paid")
                assert settled.text() == "approved pay-1"
                assert payments_recorded(payments_db, "pay-1") == 1

                # The timeline page moved by itself (SSE), in the same document.
                await expect(timeline.locator(badge)).to_have_attribute(
                    "data-status", "completed", timeout=30_000
                )
                await expect(timeline.locator("#attention-count")).to_be_hidden()
                # The legend says what each colour means, the lane's end state among them.
                legend = await timeline.inner_text(".legend")
                assert "completed" in legend and "lost" in legend and "input_required" in legend
                assert await timeline.evaluate("window.__sameDocument === true")
                assert int(await timeline.get_attribute("#live", "data-updates") or 0) >= 1
                await timeline.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)
                saved(tmp_path / "timeline.png", "console-timeline.png")
                pages_seen.append(await timeline.content())

                # Posting the same answer again sends nothing.
                csrf = await inbox.get_attribute("meta[name='csrf-token']", "content")
                again = await browser.request.post(
                    site + action,
                    form={"csrf": csrf or "", "action": "accept", "f.approve": "true"},
                )
                assert again.status == 409
                assert payments_recorded(payments_db, "pay-1") == 1

                # A second payment, cancelled from the run page.
                second = await run.call_tool(
                    "payments",
                    "approve_payment",
                    {**ARGS, "payment_key": "pay-2"},
                    wait=WaitMode.DETACH,
                )
                cancel_ref = second.task.ref  # type: ignore[attr-defined]
                raw_ids += [t.task_id for t in await run.tasks()]
                await timeline.wait_for_selector(
                    f"tr[data-task='{cancel_ref}'] button[data-action='cancel']"
                )
                await timeline.click(f"tr[data-task='{cancel_ref}'] button[data-action='cancel']")
                await timeline.wait_for_url(f"**/runs/{run_ref}?done=cancel")
                [cancelled] = await run.wait_for([cancel_ref], timeout=60)
                assert cancelled.status.value == "cancelled"
                assert payments_recorded(payments_db, "pay-2") == 0
                pages_seen.append(await timeline.content())
            finally:
                await browser.close()
        for text in [*pages_seen, console.log_tail(400)]:
            for raw in raw_ids:
                assert raw not in text, "a raw MCP task id reached a page or the console's log"
            for token in [*TOKENS.values(), SERVER_TOKEN]:
                assert token not in text


async def test_lost_and_unknown_cards_are_acted_on_from_the_page(tmp_path: Path) -> None:
    """A lost task and a call of unknown outcome each get a card of their own kind (lost is not
    shown as waiting); acknowledging one and giving the other a verdict from the page removes
    each card and says what was done to which item."""
    chromium_or_skip()
    from playwright.async_api import async_playwright

    from bridge._ledger.store import Ledger
    from bridge._lifecycle import LostReason
    from tests.support.builders import new_run, new_task

    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    try:
        tenant = ledger.for_principal("acme")
        lost_run = new_run(tenant)
        lost = new_task(tenant, lost_run.ref)
        tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "the server no longer knows it")
        unknown_run = new_run(tenant)
        call = tenant.calls.begin_dispatch(
            unknown_run.ref,
            server_endpoint="http://127.0.0.1:9/mcp",
            server_name="payments",
            tool_name="pay",
            arguments={"amount": 120},
        )
        tenant.calls.mark_dispatch_sent(call.ref)
        tenant.calls.mark_dispatch_unknown(call.ref, "connection dropped after the send")
    finally:
        ledger.close()

    with console_process(tmp_path, db, TOKENS) as console:
        site = base_url(console)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1360, "height": 900},
            )
            try:
                page = await browser.new_page()
                await page.goto(f"{site}/login")
                await page.fill("#token", TOKENS["acme"])
                await page.click("form[action='/login'] button")
                await page.wait_for_url("**/inbox")
                lost_card = page.locator("section.attention[data-kind='lost_task']")
                unknown_card = page.locator("section.attention[data-kind='unknown_outcome']")
                assert await lost_card.count() == 1 and await unknown_card.count() == 1
                assert (
                    await page.locator("section.attention[data-kind='input_waiting']").count() == 0
                )
                assert "payments" in await unknown_card.inner_text()
                await page.screenshot(path=str(tmp_path / "kinds.png"), full_page=True)
                saved(tmp_path / "kinds.png", "console-attention-kinds.png")

                await lost_card.locator("button[data-action='acknowledge']").click()
                await page.wait_for_load_state()
                confirmation = await page.inner_text(".flash")
                assert "Acknowledged" in confirmation
                assert await page.locator("section.attention[data-kind='lost_task']").count() == 0

                await page.locator(
                    "section.attention[data-kind='unknown_outcome'] button[value='not_admitted']"
                ).click()
                await page.wait_for_load_state()
                assert "Verdict recorded" in await page.inner_text(".flash")
                assert (
                    await page.locator("section.attention[data-kind='unknown_outcome']").count()
                    == 0
                )
            finally:
                await browser.close()

    ledger = Ledger.open(db)
    try:
        kinds = {e.type for e in ledger.for_principal("acme").reads.events(lost_run.ref)} | {
            e.type for e in ledger.for_principal("acme").reads.events(unknown_run.ref)
        }
    finally:
        ledger.close()
    assert {"operator.acknowledged", "call.admission_checked"} <= kinds
