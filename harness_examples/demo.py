"""The end-to-end demo (`make demo`): a product drives a UHP harness whose agent calls MCP task
tools through the bridge; the product's SSE stream is dropped on purpose and resumed; the
payment approval is answered; the run ends with the outer response and its nested tasks, each
with its own lifecycle.

    python -m harness_examples.demo [--keep]

Everything runs on 127.0.0.1 with SQLite files in a temporary folder: the report server, the
payments server (bearer-protected), the report harness (UHP, Core), and a product-side client
(`bridge.uhp._client.UhpClient`). Every process it starts is stopped at the end. The exit code
is non-zero if any step misbehaves (no resume, no approval asked, a duplicate payment, a
wrong final state).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bridge import Ledger
from bridge.uhp import ResponseFollower, StreamEvent, UhpClient
from harness_examples.launch import ServerProcess

PRODUCT_TOKEN = "demo-product-token"
REPORTS_TOKEN = "demo-reports-token"
PAYMENTS_TOKEN = "demo-payments-token"
HARNESS_ID = "chrn_reports"
PAYMENT_KEY = "demo-pay-1"
TASK_INPUT = "\n".join(
    [
        'call reports.generate_report {"quarter": "Q3", "sections": 3} policy=wait',
        "call payments.approve_payment "
        + json.dumps(
            {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": PAYMENT_KEY}
        )
        + " policy=ask",
        "reply with the word done",
    ]
)


class DemoFailure(Exception):
    """A step of the demo did not behave as the bridge promises."""


@dataclass
class Seen:
    """What the product saw, for the tree and the two-lane timeline."""

    started: float = field(default_factory=time.monotonic)
    outer: list[tuple[float, str]] = field(default_factory=list)
    inner: list[tuple[float, str, str]] = field(default_factory=list)  # (t, task_ref, label)
    asked: bool = False
    resumed: bool = False

    def at(self) -> float:
        return time.monotonic() - self.started


def _config(folder: Path, reports: ServerProcess, payments: ServerProcess) -> Path:
    config = {
        "harnesses": [
            {
                "id": HARNESS_ID,
                "base": "scripted",
                "model": "scripted-1",
                "mcpServers": [
                    {
                        "name": "reports",
                        "url": reports.url,
                        "enabled": True,
                        "auth": {"credential_ref": "reports-token"},
                    },
                    {
                        "name": "payments",
                        "url": payments.url,
                        "enabled": True,
                        "auth": {"credential_ref": "payments-token"},
                    },
                ],
            }
        ],
        "tokens": [PRODUCT_TOKEN],
        "credentials": {"reports-token": REPORTS_TOKEN, "payments-token": PAYMENTS_TOKEN},
    }
    path = folder / "harness.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _say(text: str) -> None:
    print(text, flush=True)


async def _answer_approval(base_url: str, response_id: str, event: StreamEvent) -> None:
    extra = event.model_extra or {}
    _say(f"  [product] approval asked: {extra.get('params', {}).get('message')!r} -> approve")
    body = {
        "task_ref": extra["task_ref"],
        "input_ref": extra["input_ref"],
        "response": {"action": "accept", "content": {"approve": True}},
    }
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{base_url}/v1/responses/{response_id}/mcp_inputs",
            json=body,
            headers={"Authorization": f"Bearer {PRODUCT_TOKEN}"},
        )
    if answer.status_code >= 300:
        raise DemoFailure(f"answering the approval failed: {answer.status_code} {answer.text}")


def _record(seen: Seen, event: StreamEvent) -> None:
    extra = event.model_extra or {}
    if event.type.startswith("bridge.mcp_task."):
        label = event.type.removeprefix("bridge.mcp_task.")
        if label == "status_changed":
            label = f"{extra.get('previous_status')} -> {extra.get('status')}"
        if extra.get("status_message"):
            label += f" ({extra['status_message']})"
        seen.inner.append((seen.at(), str(extra.get("task_ref") or extra.get("op_ref")), label))
    elif event.type in ("response.output_item.added", "response.output_item.done"):
        item = extra.get("item") or {}
        what = " ".join(str(part) for part in (item.get("type", "item"), item.get("name")) if part)
        step = "starts" if event.type.endswith("added") else "done"
        seen.outer.append((seen.at(), f"{what} {step}"))
    elif event.type.startswith("response.") and not event.type.startswith(
        ("response.output_text", "response.content_part", "response.function_call_arguments")
    ):
        seen.outer.append((seen.at(), event.type.removeprefix("response.")))


async def _follow(
    uhp: UhpClient, follower: ResponseFollower, seen: Seen, base_url: str, drop_after: str | None
) -> ResponseFollower | None:
    """Consume events; return a new follower if the stream was dropped on purpose."""
    async with follower:
        async for event in follower:
            _record(seen, event)
            if event.type == "bridge.mcp_task.input_required" and follower.response_id:
                seen.asked = True
                await _answer_approval(base_url, follower.response_id, event)
            if drop_after is not None and event.type == drop_after:
                _say(
                    f"  [product] dropping the SSE stream on purpose after seq "
                    f"{event.sequence_number}"
                )
                seen.outer.append((seen.at(), "stream dropped by the product"))
                break
        else:
            return None
    resumed = await uhp.follow(follower.run_ref)
    seen.resumed = True
    seen.outer.append((seen.at(), f"stream resumed after seq {resumed.last_sequence}"))
    _say(f"  [product] resumed from the ledger after seq {resumed.last_sequence}")
    return resumed


async def _payment_count(url: str) -> int:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {PAYMENTS_TOKEN}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        result = await client.call_tool("payment_count", {"payment_key": PAYMENT_KEY})
    structured = result.structured_content or {}
    value = structured.get("result")
    if isinstance(value, int):
        return value
    text = getattr(result.content[0], "text", "0")
    return int(text)


def _print_tree(response: Any) -> None:
    summary = (response.metadata or {}).get("bridge_mcp_tasks", {})
    _say("")
    _say(f"outer response {response.id}  status={response.status}  session={response.session_id}")
    for task in summary.get("tasks", []):
        verdict = f"  verdict={task['verdict']}" if task.get("verdict") else ""
        _say(
            f"  └─ {task['server']}.{task['tool']}  {task['task_ref']}  "
            f"status={task['status']}{verdict}"
        )
    _say(
        f"  nested: {summary.get('count', 0)} task(s), by status {summary.get('by_status')}, "
        f"lost {summary.get('lost')}, unknown outcomes {summary.get('unknown_outcomes')}"
    )


def _print_timeline(seen: Seen) -> None:
    _say("")
    _say("two lifecycles, side by side (seconds since the request):")
    _say(f"  {'t':>6}  {'outer UHP response':<40} inner MCP tasks")
    rows: list[tuple[float, str, str]] = [(t, label, "") for t, label in seen.outer]
    rows += [(t, "", f"{ref[:12]}… {label}") for t, ref, label in seen.inner]
    for t, outer, inner in sorted(rows, key=lambda row: row[0]):
        _say(f"  {t:6.2f}  {outer:<40} {inner}")


async def run_demo(folder: Path) -> None:
    reports = ServerProcess(
        "harness_examples.mcp_servers.report_server", args=["--token", REPORTS_TOKEN]
    )
    payments = ServerProcess(
        "harness_examples.mcp_servers.payments_server",
        args=["--token", PAYMENTS_TOKEN, "--ledger", str(folder / "payments.db")],
    )
    _say("starting the report and payments MCP servers …")
    with reports, payments:
        config = _config(folder, reports, payments)
        harness = ServerProcess(
            "harness_examples.report_harness",
            args=["--config", str(config), "--db", str(folder / "harness.db")],
        )
        _say("starting the report harness (UHP) …")
        with harness:
            base_url = f"http://127.0.0.1:{harness.port}"
            await _drive(base_url, folder, payments)


async def _drive(base_url: str, folder: Path, payments: ServerProcess) -> None:
    ledger = Ledger.open(folder / "product.db")
    seen = Seen()
    try:
        async with UhpClient(
            base_url, token=PRODUCT_TOKEN, ledger=ledger, principal="product"
        ) as uhp:
            await uhp.discover()
            _say(f"[product] POST /v1/responses (stream) to {base_url}")
            follower: ResponseFollower | None = await uhp.stream_response(
                TASK_INPUT, harness_id=HARNESS_ID
            )
            drop_after: str | None = "bridge.mcp_task.created"
            final = None
            while follower is not None:
                current = follower
                follower = await _follow(uhp, current, seen, base_url, drop_after)
                drop_after = None
                final = current.final
            if final is None:
                raise DemoFailure("the run ended without a final response")
    finally:
        ledger.close()
    _print_tree(final)
    _print_timeline(seen)
    count = await _payment_count(payments.url)
    _say("")
    _say(f"payments recorded under {PAYMENT_KEY!r}: {count}")
    problems = []
    if final.status != "completed":
        problems.append(f"outer response ended {final.status}")
    if not seen.resumed:
        problems.append("the stream was never resumed")
    if not seen.asked:
        problems.append("the approval was never asked")
    if count != 1:
        problems.append(f"{count} payments recorded (expected exactly 1)")
    statuses = {t["tool"]: t["status"] for t in final.metadata["bridge_mcp_tasks"]["tasks"]}
    if statuses != {"generate_report": "completed", "approve_payment": "completed"}:
        problems.append(f"nested tasks ended {statuses}")
    if problems:
        raise DemoFailure("; ".join(problems))
    _say("demo OK: both lifecycles recorded separately, stream resumed, no duplicate payment")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bridge-demo-"))
    started = time.monotonic()
    try:
        anyio.run(run_demo, folder)
    except DemoFailure as failure:
        _say(f"DEMO FAILED: {failure}")
        return 1
    finally:
        if args.keep:
            _say(f"files kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    _say(f"finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
