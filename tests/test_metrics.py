"""Metrics: the Prometheus scrape endpoint of a real console process (``--metrics``), read over
HTTP, its figures checked against a ledger whose contents are known; and the counters the
bridge records as it works (commit latency, webhook deliveries), read through the SDK."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import metrics

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode, WebhookEndpoint
from bridge._ledger.store import Ledger
from bridge.console._auth import token_digest
from tests.conftest import FakeClock
from tests.support.bridging import FAST
from tests.support.builders import new_run
from tests.support.processes import ServerProcess
from tests.support.webhooks import new_secret, one_of_each_kind, receiving

WAITED_MS = 600_000  # how long before the scrape the known input request was first seen


def _samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample of metric ``name`` in a Prometheus text page: labels (but the exporter's
    ``otel_scope_*``) -> value."""
    found = {}
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if match:
            pairs = re.findall(r'(\w+)="([^"]*)"', match.group(1))
            labels = frozenset((k, v) for k, v in pairs if not k.startswith("otel_scope_"))
            found[labels] = float(match.group(2))
    return found


def _known_ledger(db: Path) -> None:
    """acme: one item of each kind (its input request first seen WAITED_MS ago) and two more
    anomalies; globex: one anomaly."""
    clock = FakeClock()
    clock.now_ms = time.time_ns() // 1_000_000 - WAITED_MS
    ledger = Ledger.open(db, clock=clock)
    try:
        acme = ledger.for_principal("acme")
        one_of_each_kind(acme)
        run = new_run(acme)
        acme.runs.record_anomaly(run.ref, "malformed_reply", "a")
        acme.runs.record_anomaly(run.ref, "malformed_reply", "b")
        globex = ledger.for_principal("globex")
        globex.runs.record_anomaly(new_run(globex).ref, "malformed_reply", "c")
    finally:
        ledger.close()


@pytest.mark.e2e
def test_the_console_scrape_endpoint_reports_the_ledger(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    _known_ledger(db)
    tokens = tmp_path / "tokens.json"
    principals = {p: {"token_sha256": token_digest(f"{p}-token")} for p in ("acme", "globex")}
    tokens.write_text(json.dumps({"principals": principals}))
    port_file = tmp_path / "metrics-port"
    args = ["--db", str(db), "--tokens", str(tokens)]
    args += ["--metrics", "127.0.0.1:0", "--metrics-port-file", str(port_file)]
    with ServerProcess("bridge.console", args=args):
        port = int(port_file.read_text())
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    items = _samples(page, "bridge_attention_items")
    acme = {dict(k)["kind"]: v for k, v in items.items() if ("principal", "acme") in k}
    globex = {dict(k)["kind"]: v for k, v in items.items() if ("principal", "globex") in k}
    assert acme == {"input_waiting": 1, "unknown_outcome": 1, "lost_task": 1, "anomaly": 3}
    assert globex == {"input_waiting": 0, "unknown_outcome": 0, "lost_task": 0, "anomaly": 1}
    ages = _samples(page, "bridge_input_oldest_waiting_age_seconds")
    assert WAITED_MS / 1000 <= ages[frozenset({("principal", "acme")})] < WAITED_MS / 1000 + 120
    assert ages[frozenset({("principal", "globex")})] == 0
    outbox = _samples(page, "bridge_webhook_outbox")
    pending = {dict(k)["principal"]: v for k, v in outbox.items() if ("state", "pending") in k}
    assert pending == {"acme": 6, "globex": 1}  # the console delivers nothing


@pytest.fixture(scope="module")
def reader() -> Any:
    """The SDK's in-memory reader as this process's meter provider (set once per process)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        pytest.skip("another meter provider was installed in this process first")
    return memory


def _points(reader: Any, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


@pytest.mark.anyio
async def test_polls_commits_and_deliveries_are_counted(tmp_path: Path, reader: Any) -> None:
    secret = new_secret()
    mcp = ServerProcess("bridge.testing.server", env={"BRIDGE_MCP_TOKEN": ""})
    with mcp, receiving(secret) as receiver:
        settings = BridgeSettings(
            ledger_url=tmp_path / "ledger.db",
            principals=["acme"],
            mcp_servers=[McpServerConfig(name="reports", url=mcp.url)],
            scheduler=FAST,
            webhooks=[WebhookEndpoint(principal="acme", url=receiver.url, secret_ref="hook")],
            credentials=lambda ref: secret if ref == "hook" else None,
        )
        async with Bridge.open(settings) as bridge:
            run = await bridge.register_served_run(
                "acme", response_id="resp_m", session_id="hsess_m", harness_id="chrn_m"
            )
            outcome = await run.call_tool(
                "reports",
                "generate_report",
                {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.2},
                wait=WaitMode.WAIT,
            )
            assert outcome.kind.value == "task_ended"
            tenant = bridge._ledger.for_principal("acme")
            tenant.runs.record_anomaly(run.ref, "malformed_reply", "x")
            await receiver.until(lambda _r: tenant.outbox.webhook_outbox_figures().delivered == 1)
    polls = sum(p.value for p in _points(reader, "bridge.polls"))
    lateness = sum(p.count for p in _points(reader, "bridge.poll.lateness"))
    assert polls >= 1 and lateness == polls
    routes = {p.attributes["route"] for p in _points(reader, "bridge.ledger.commit.duration")}
    assert {"call_path", "core"} <= routes
    delivered = [
        p
        for p in _points(reader, "bridge.webhook.deliveries")
        if p.attributes == {"outcome": "delivered", "kind": "anomaly"}
    ]
    assert sum(p.value for p in delivered) >= 1
    assert sum(p.count for p in _points(reader, "bridge.webhook.delivery.latency")) >= 1


@pytest.mark.e2e
def test_the_gateway_pushes_and_reports_its_principals_items(tmp_path: Path) -> None:
    """A real gateway with ``--metrics`` and a ``webhook`` for alice in its config: alice's items
    reach a receiver on loopback, signed with the secret its reference names; the scrape shows
    them delivered."""
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    try:
        alice = ledger.for_principal("alice")
        run = new_run(alice)
        alice.runs.record_anomaly(run.ref, "malformed_reply", "a")
        op = alice.calls.begin_dispatch(
            run.ref, server_endpoint="http://127.0.0.1:9/mcp", tool_name="pay", arguments={}
        )
        alice.calls.mark_dispatch_sent(op.ref)
        alice.calls.mark_dispatch_unknown(op.ref, "connection dropped")
        expected = {item.id for item in alice.outbox.due_webhooks()}
    finally:
        ledger.close()
    secret = new_secret()
    config = tmp_path / "gateway.json"
    with receiving(secret) as receiver:
        hook = {"url": receiver.url, "secret_ref": "alice_hook"}
        principals = {
            "alice": {"token_sha256": token_digest("alice-token"), "webhook": hook},
            "bob": {"token_sha256": token_digest("bob-token")},
        }
        config.write_text(json.dumps({"mcpServers": [], "principals": principals}))
        port_file = tmp_path / "metrics-port"
        args = ["--config", str(config), "--db", str(db)]
        args += ["--metrics", "127.0.0.1:0", "--metrics-port-file", str(port_file)]
        env = {"BRIDGE_CREDENTIAL_ALICE_HOOK": secret}
        with ServerProcess("bridge.gateway", args=args, env=env):
            receiver.wait_for(lambda r: r.ids() == expected)
            url = f"http://127.0.0.1:{int(port_file.read_text())}/metrics"

            def delivered() -> float:
                page = httpx.get(url, timeout=30).text
                counted = _samples(page, "bridge_webhook_deliveries_total")
                return sum(v for k, v in counted.items() if ("outcome", "delivered") in k)

            deadline = time.monotonic() + 30
            while delivered() < len(expected):
                assert time.monotonic() < deadline, "the deliveries were not counted"
                time.sleep(0.1)
            page = httpx.get(url, timeout=30).text
    assert receiver.rejected == 0
    items = _samples(page, "bridge_attention_items")
    mine = {dict(k)["kind"]: v for k, v in items.items() if ("principal", "alice") in k}
    assert mine["anomaly"] == 1 and mine["unknown_outcome"] == 1
