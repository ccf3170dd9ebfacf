"""``bridge gateway`` driven by clients we do not control, and by what a request says about
itself: fastmcp's client, a client process SIGKILLed mid-call and started again with its
``Idempotency-Key``, outer identity headers (``UHP-Response-Id`` / ``UHP-Session-Id``), and
the stdio transport (``--stdio``) under the official SDK client.

Upstream is the real fastmcp-tasks example servers; effects are counted with the payments
server's own ``payment_count`` and the gateway ledger's recorded calls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client as FastMcpClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from bridge import BridgeSettings
from bridge._facade import Bridge
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge.gateway.__main__ import main as gateway_main
from bridge.gateway._calls import GatewayCalls
from bridge.gateway._config import GatewayConfig
from bridge.gateway._identity import (
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_META_KEY,
    OPERATION_ID_META_KEY,
    RESPONSE_ID_HEADER,
    RESPONSE_ID_META_KEY,
    SESSION_ID_HEADER,
    SESSION_ID_META_KEY,
    OuterIdentity,
)
from bridge.gateway._runs import GatewayRuns
from tests.support.gateway import (
    ALICE,
    BOB,
    DEADLINE_S,
    Gateway,
    answer_with_cli,
    dispatches,
    payment,
    payment_count,
    pending_input,
    text_of,
    upstream_task_ids,
)
from tests.support.processes import REPO_ROOT

REPORT = {"quarter": "2026-Q4", "sections": 3, "seconds_per_section": 0.3}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sdk_client(url: str, headers: dict[str, str]) -> tuple[Any, Client]:
    """The official SDK client (no Tasks extension) sending ``headers`` on every request."""
    http = create_mcp_http_client(headers=headers)
    return http, Client(streamable_http_client(url, http_client=http))


async def call_with_headers(
    gw: Gateway, token: str, extra: dict[str, str], tool: str, arguments: dict[str, Any]
) -> mcp_types.CallToolResult:
    http, client = sdk_client(gw.proc.url, {"Authorization": f"Bearer {token}", **extra})
    async with http, client:
        with anyio.fail_after(DEADLINE_S):
            return await client.session.call_tool(tool, arguments)


async def refusal(
    gw: Gateway, token: str, extra: dict[str, str], tool: str, arguments: dict[str, Any]
) -> MCPError:
    """The JSON-RPC error a call is refused with (caught inside the client's own scope)."""
    http, client = sdk_client(gw.proc.url, {"Authorization": f"Bearer {token}", **extra})
    async with http, client:
        with pytest.raises(MCPError) as refused, anyio.fail_after(DEADLINE_S):
            await client.session.call_tool(tool, arguments)
    assert refused.value.error.code == mcp_types.INVALID_PARAMS, refused.value
    return refused.value


# -- fastmcp's client ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_fastmcp_client_runs_a_long_task_to_its_result(gateway: Gateway) -> None:
    key = {IDEMPOTENCY_KEY_HEADER: "fastmcp-report-1"}
    texts = []
    for _ in range(2):  # two client sessions, one after the other, with the same key
        transport = StreamableHttpTransport(gateway.proc.url, headers=key, auth=ALICE)
        async with FastMcpClient(transport) as client:
            names = {t.name for t in await client.list_tools()}
            assert "reports__generate_report" in names
            with anyio.fail_after(DEADLINE_S):
                result = await client.call_tool("reports__generate_report", REPORT)
        assert not result.is_error
        texts.append(
            "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
        )
    assert "2026-Q4" in texts[0] and texts[1] == texts[0]
    (recorded,) = dispatches(gateway.db, "alice")  # one call upstream (the second replayed)
    assert recorded.tool_name == "generate_report" and recorded.task_ref is not None


# -- the client's own idempotency key ----------------------------------------------------------
def start_driver(gw: Gateway, arguments: dict[str, Any], key: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.support.gateway_client_driver"),
            *("--url", gw.proc.url, "--token", ALICE, "--tool", "payments__approve_payment"),
            *("--args", json.dumps(arguments), "--idempotency-key", key),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.anyio
async def test_sigkilled_client_process_gets_its_result_by_idempotency_key(
    gateway: Gateway,
) -> None:
    arguments, key = payment("pay-kill"), "client-key-7f3a"
    first = start_driver(gateway, arguments, key)
    try:
        task_ref, input_ref = await pending_input(gateway.db)  # the upstream task is waiting
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(DEADLINE_S)
    assert first.returncode == -signal.SIGKILL
    answer_with_cli(gateway, task_ref, input_ref)

    second = start_driver(gateway, arguments, key)
    out, err = second.communicate(timeout=DEADLINE_S)
    assert second.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"text": "approved pay-kill", "is_error": False}
    assert await payment_count(gateway, "pay-kill") == 1
    assert len(upstream_task_ids(gateway.db, "alice")) == 1  # one upstream execution
    (recorded,) = dispatches(gateway.db, "alice")
    assert recorded.operation_id == f"gateway:{key}"


@pytest.mark.anyio
async def test_idempotency_key_is_the_meta_operation_id(gateway: Gateway) -> None:
    header = {IDEMPOTENCY_KEY_HEADER: "report-key-1"}
    by_header = await call_with_headers(gateway, ALICE, header, "reports__generate_report", REPORT)
    assert by_header.meta is not None and by_header.meta[OPERATION_ID_META_KEY] == "report-key-1"
    http, client = sdk_client(gateway.proc.url, {"Authorization": f"Bearer {ALICE}"})
    async with http, client:
        meta: Any = {OPERATION_ID_META_KEY: "report-key-1"}
        by_meta = await client.session.call_tool("reports__generate_report", REPORT, meta=meta)
    assert text_of(by_meta) == text_of(by_header)
    assert len(dispatches(gateway.db, "alice")) == 1  # the second call was a replay


@pytest.mark.anyio
async def test_same_key_with_other_arguments_is_refused_without_calling_upstream(
    gateway: Gateway,
) -> None:
    header = {IDEMPOTENCY_KEY_HEADER: "report-key-2"}
    await call_with_headers(gateway, ALICE, header, "reports__generate_report", REPORT)
    other = {**REPORT, "quarter": "2027-Q1"}
    refused = await refusal(gateway, ALICE, header, "reports__generate_report", other)
    assert "already used" in refused.error.message
    assert len(dispatches(gateway.db, "alice")) == 1
    # The same key for bob is bob's own: ids are per principal.
    await call_with_headers(gateway, BOB, header, "reports__generate_report", other)
    assert len(dispatches(gateway.db, "bob")) == 1


@pytest.mark.anyio
async def test_meta_id_and_header_key_that_differ_are_refused(gateway: Gateway) -> None:
    http, client = sdk_client(
        gateway.proc.url,
        {"Authorization": f"Bearer {ALICE}", IDEMPOTENCY_KEY_HEADER: "one-key"},
    )
    async with http, client:
        with pytest.raises(MCPError) as refused:
            meta: Any = {OPERATION_ID_META_KEY: "another-key"}
            await client.session.call_tool("reports__generate_report", REPORT, meta=meta)
    assert refused.value.error.code == mcp_types.INVALID_PARAMS
    assert "differ" in refused.value.error.message
    assert dispatches(gateway.db, "alice") == []


# -- outer identity --------------------------------------------------------------------------
def runs_of(db: Path, principal: str) -> dict[str, Any]:
    ledger = Ledger.open(db)
    try:
        return {r.ref: r for r in ledger.for_principal(principal).reads.list_runs()}
    finally:
        ledger.close()


def register_host_run(db: Path, principal: str, response_id: str, session_id: str) -> str:
    """The host harness's own served run of ``response_id``, recorded before the call."""
    ledger = Ledger.open(db)
    try:
        tenant = ledger.for_principal(principal)
        run = tenant.runs.open_run(
            "local:report_harness", response_id=response_id, session_id=session_id
        )
        return run.ref
    finally:
        ledger.close()


@pytest.mark.anyio
async def test_call_joins_the_outer_run_its_headers_name(gateway: Gateway) -> None:
    host_run = register_host_run(gateway.db, "alice", "resp_host0001", "hsess_host0001")
    outer = {RESPONSE_ID_HEADER: "resp_host0001", SESSION_ID_HEADER: "hsess_host0001"}
    await call_with_headers(gateway, ALICE, outer, "reports__generate_report", REPORT)
    (recorded,) = dispatches(gateway.db, "alice")
    assert recorded.run_ref == host_run

    # Bob naming alice's response gets a run of his own, never alice's.
    await call_with_headers(gateway, BOB, outer, "reports__generate_report", REPORT)
    (bobs,) = dispatches(gateway.db, "bob")
    assert bobs.run_ref != host_run
    bob_run = runs_of(gateway.db, "bob")[bobs.run_ref]
    assert (bob_run.uhp_server, bob_run.response_id) == ("local:gateway", "resp_host0001")
    assert [d.ref for d in dispatches(gateway.db, "alice")] == [recorded.ref]

    # A response the ledger does not know yet becomes a run the gateway records.
    fresh = {RESPONSE_ID_HEADER: "resp_new0002", SESSION_ID_HEADER: "hsess_new0002"}
    await call_with_headers(gateway, ALICE, fresh, "reports__generate_report", REPORT)
    newest = [d for d in dispatches(gateway.db, "alice") if d.ref != recorded.ref]
    run = runs_of(gateway.db, "alice")[newest[0].run_ref]
    assert (run.response_id, run.session_id) == ("resp_new0002", "hsess_new0002")

    # Without headers the call stays in the client session's own run.
    await call_with_headers(gateway, ALICE, {}, "reports__generate_report", REPORT)
    plain = [d for d in dispatches(gateway.db, "alice") if d.run_ref not in (host_run, run.ref)]
    assert runs_of(gateway.db, "alice")[plain[0].run_ref].response_id.startswith("gateway:")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "headers",
    [
        {RESPONSE_ID_HEADER: "not-a-response"},
        {RESPONSE_ID_HEADER: "resp_" + "x" * 300},
        {RESPONSE_ID_HEADER: "resp_ok01", SESSION_ID_HEADER: "sess_wrong"},
        {SESSION_ID_HEADER: "hsess_alone"},
    ],
)
async def test_malformed_outer_identity_is_refused(
    gateway: Gateway, headers: dict[str, str]
) -> None:
    await refusal(gateway, ALICE, headers, "reports__generate_report", REPORT)
    assert dispatches(gateway.db, "alice") == []


@pytest.mark.anyio
async def test_session_header_must_match_the_recorded_run(gateway: Gateway) -> None:
    register_host_run(gateway.db, "alice", "resp_host0003", "hsess_host0003")
    other = {RESPONSE_ID_HEADER: "resp_host0003", SESSION_ID_HEADER: "hsess_other"}
    refused = await refusal(gateway, ALICE, other, "reports__generate_report", REPORT)
    assert "another session" in refused.error.message
    assert dispatches(gateway.db, "alice") == []


@pytest.mark.anyio
async def test_a_recorded_operation_keeps_its_run_across_client_sessions(tmp_path: Path) -> None:
    """Session-ful clients (``Mcp-Session-Id``): a repeated operation id joins the run that
    recorded it, not the new session's — for its own principal only."""
    async with Bridge.open(
        BridgeSettings(ledger_url=tmp_path / "ledger.db", principals=("alice", "bob"))
    ) as bridge:
        runs = GatewayRuns(bridge)
        first = await runs.run_for("alice", "session-1", None, None)
        bridge._ledger.for_principal("alice").calls.begin_dispatch(
            first, server_endpoint="http://x/mcp", tool_name="t", arguments={}, operation_id="k"
        )
        assert await runs.run_for("alice", "session-2", None, "k") == first
        assert await runs.run_for("alice", "session-2", None, "other") != first
        bobs = await runs.run_for("bob", "session-1", None, "k")
        assert (
            bobs != first and bridge._ledger.for_principal("bob").reads.find_dispatch("k") is None
        )
        outer = OuterIdentity("resp_known01", None)  # an outer identity wins over the record
        assert await runs.run_for("alice", "session-2", outer, "k") != first


@pytest.mark.anyio
async def test_the_gateway_runs_the_ledger_through_the_bridges_own_runner(
    tmp_path: Path,
) -> None:
    """One runner per ledger: the gateway's calls and runs use the runner the bridge built
    (inline on SQLite, awaiting a held write lock), not runners of their own."""
    async with Bridge.open(
        BridgeSettings(ledger_url=tmp_path / "ledger.db", principals=("alice",))
    ) as bridge:
        calls = GatewayCalls(bridge, GatewayConfig(servers=(), token_principals={}))
        parts = (calls, calls._runs, calls._runs.ends)  # reads: through ``bridge.read``
        assert not [v for part in parts for v in vars(part).values() if isinstance(v, LedgerRunner)]
        assert calls._runs.records._db is bridge._db  # its own records: the bridge's runner too
        assert bridge._db.inline  # SQLite: on the event loop


# -- stdio -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_stdio_gateway_serves_the_configured_principal(gateway: Gateway) -> None:
    db = gateway.db.with_name("stdio-ledger.db")  # its own ledger: one gateway per ledger
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "bridge.gateway", "--stdio", "--principal", "alice"),
            *("--config", str(gateway.config), "--db", str(db)),
        ],
        env={**gateway.upstream_env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    # No headers over stdio: the outer identity and the idempotency key travel in _meta.
    meta: Any = {
        RESPONSE_ID_META_KEY: "resp_stdio0001",
        SESSION_ID_META_KEY: "hsess_stdio0001",
        IDEMPOTENCY_KEY_META_KEY: "stdio-report-1",
    }
    async with Client(params) as client:
        with anyio.fail_after(DEADLINE_S):
            result = await client.session.call_tool("reports__generate_report", REPORT, meta=meta)
            again = await client.session.call_tool("reports__generate_report", REPORT, meta=meta)
    assert "2026-Q4" in text_of(result) and text_of(again) == text_of(result)
    (recorded,) = dispatches(db, "alice")  # the second call replayed the first
    assert recorded.task_ref is not None and recorded.operation_id == "gateway:stdio-report-1"
    run = runs_of(db, "alice")[recorded.run_ref]
    assert (run.response_id, run.session_id) == ("resp_stdio0001", "hsess_stdio0001")
    assert dispatches(db, "bob") == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--stdio"], "--stdio needs --principal"),
        (["--stdio", "--principal", "mallory"], "'mallory' is not in the config"),
        (["--principal", "alice"], "--principal is for --stdio"),
    ],
)
def test_stdio_principal_must_be_given_and_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    config = tmp_path / "gateway.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": [{"name": "reports", "url": "http://127.0.0.1:9/mcp"}],
                "principals": {"alice": {"token_sha256": "0" * 64}},
            }
        )
    )
    with pytest.raises(SystemExit) as refused:
        gateway_main([*argv, "--config", str(config), "--db", str(tmp_path / "l.db")])
    assert refused.value.code == 2
    assert says in capsys.readouterr().err
