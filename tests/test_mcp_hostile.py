"""Hostile MCP servers (the in-repo ADVERSARIAL FAKE, ``tests.servers.adversarial_server``):
huge, empty and reused handles, replies that are not JSON, 429 and 500, a dropped connection,
a refused ``tasks/update``, error texts quoting the raw task id.

Each case ends in a typed error or an explicit event within a deadline, nothing recorded
before is lost, and one hostile request does not hurt the honest calls sharing its connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from typer.testing import CliRunner

from bridge import events as ev
from bridge._config import McpServerConfig
from bridge._errors import AnswerRefused, MalformedTaskHandle
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.wire.negotiation import unanswered
from bridge._mcp.wire.task_ids import MAX_TASK_ID_BYTES, task_id_problem
from bridge._mcp.wire.transport import (
    MAX_RESUMES_WITHOUT_PROGRESS,
    RESUME_WINDOW_S,
    RETRY_AFTER_CAP_MS,
    SYNTHETIC_KEY,
    IsolatingTransport,
    retry_after_ms,
)
from bridge._outcomes import CallOutcome, InlineResult, TaskHandle, UnknownOutcome
from bridge._policies import UnknownOutcomePolicy
from bridge.cli._app import app
from tests.servers.adversarial_server import DUPLICATE_ID, RETRY_AFTER_S
from tests.support.bridging import (
    FAST,
    adversarial_stats,
    event_types,
    finished_spans_text,
    wait_closed,
    wait_until,
)
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"
DEADLINE_S = 30  # every case ends well within this, or the test fails instead of hanging
#: What the fake's misbehaving replies carry as their bodies (never to be quoted back).
RAW_BODIES = ("not JSON", "maintenance", "slow down", "internal error")
RESUME_DELAY_S = 1.0  # the SDK's delay between resumes when the server names none


@pytest.fixture
async def requester(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> AsyncIterator[TaskRequester]:
    config = McpServerConfig(name="fake", url=adversarial_server.url, request_timeout_s=5.0)
    async with TaskRequester(wall_ledger, [config], scheduler=FAST) as opened:
        yield opened


def _anomaly_kinds(ledger: Ledger, run_ref: str) -> list[str]:
    events = ledger.for_principal(PRINCIPAL).reads.events(run_ref)
    return [e.kind for e in events if isinstance(e, ev.Anomaly)]


def _input_events(ledger: Ledger, run_ref: str) -> list[ev.TaskInputRequired]:
    events = ledger.for_principal(PRINCIPAL).reads.events(run_ref)
    return [e for e in events if isinstance(e, ev.TaskInputRequired)]


async def _only_dispatch_state(ledger: Ledger, run_ref: str) -> CallState:
    (dispatch,) = ledger.for_principal(PRINCIPAL).reads.list_dispatches(run_ref=run_ref)
    return dispatch.state


# -- handles --------------------------------------------------------------------------------


def test_task_id_limits() -> None:
    assert task_id_problem("x" * MAX_TASK_ID_BYTES) is None
    assert task_id_problem("é" * (MAX_TASK_ID_BYTES // 2)) is None  # counted in UTF-8 bytes
    for bad in ("", "x" * (MAX_TASK_ID_BYTES + 1), "é" * MAX_TASK_ID_BYTES, "a\nb", "a\x00b"):
        assert task_id_problem(bad) is not None, repr(bad[:10])


async def test_a_1mb_task_id_is_refused_and_honest_concurrent_calls_all_succeed(
    requester: TaskRequester,
    wall_ledger: Ledger,
    adversarial_server: ServerProcess,
    tmp_path: Path,
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    earlier = new_run(tenant)
    kept = await requester.call_tool(PRINCIPAL, earlier.ref, "fake", "honest", {})
    assert isinstance(kept, TaskHandle)
    honest: dict[str, CallOutcome] = {}
    hostile: dict[str, BaseException | CallOutcome] = {}
    runs = {name: new_run(tenant) for name in ("huge_id", "drop_connection")}
    before = (await adversarial_stats(adversarial_server.url))["calls"].get("slow_echo", 0)

    async def honest_call(key: str, tool: str, args: dict[str, Any]) -> None:
        honest[key] = await requester.call_tool(PRINCIPAL, new_run(tenant).ref, "fake", tool, args)

    async def hostile_call(tool: str) -> None:
        try:
            hostile[tool] = await requester.call_tool(PRINCIPAL, runs[tool].ref, "fake", tool, {})
        except MalformedTaskHandle as exc:
            hostile[tool] = exc

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for i in range(4):  # kept in flight on the shared connection meanwhile
                tg.start_soon(
                    honest_call, f"slow{i}", "slow_echo", {"text": f"s{i}", "seconds": 1.5}
                )
            for i in range(2):
                tg.start_soon(honest_call, f"task{i}", "honest", {})
            await wait_until(
                lambda: _started(adversarial_server, "slow_echo", before + 4), timeout=10
            )
            tg.start_soon(hostile_call, "huge_id")
            tg.start_soon(hostile_call, "drop_connection")

    # The hostile ones: a typed error and an unknown outcome, each on its own run.
    assert isinstance(hostile["huge_id"], MalformedTaskHandle)
    assert await _only_dispatch_state(wall_ledger, runs["huge_id"].ref) is CallState.UNKNOWN
    assert _anomaly_kinds(wall_ledger, runs["huge_id"].ref) == ["malformed_task_handle"]
    assert "call.unknown_outcome" in event_types(tenant, runs["huge_id"].ref)
    assert isinstance(hostile["drop_connection"], UnknownOutcome)
    # The honest ones all succeeded, on the same connection.
    for i in range(4):
        outcome = honest[f"slow{i}"]
        assert isinstance(outcome, InlineResult) and outcome.text() == f"s{i}"
    for key in ("task0", "task1"):
        handle = honest[key]
        assert isinstance(handle, TaskHandle)
        await wait_closed(tenant, handle.task_ref)
        assert tenant.reads.get_task(handle.task_ref).status is TaskStatus.COMPLETED
    # Nothing stored before was lost, and the 1 MB id was never stored.
    await wait_closed(tenant, kept.task_ref)
    assert tenant.reads.get_task(kept.task_ref).status is TaskStatus.COMPLETED
    assert all(len(t.task_id) <= MAX_TASK_ID_BYTES for t in tenant.reads.list_tasks())
    assert b"h" * 1000 not in (tmp_path / "ledger.db").read_bytes()  # the wall_ledger file


async def _started(server: ServerProcess, tool: str, count: int) -> bool:
    return (await adversarial_stats(server.url))["calls"].get(tool, 0) >= count


async def test_an_empty_task_id_is_malformed_and_recorded(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with anyio.fail_after(DEADLINE_S), pytest.raises(MalformedTaskHandle) as raised:
        await requester.call_tool(PRINCIPAL, run.ref, "fake", "empty_id", {})
    assert "empty taskId" in str(raised.value)
    assert await _only_dispatch_state(wall_ledger, run.ref) is CallState.UNKNOWN
    assert _anomaly_kinds(wall_ledger, run.ref) == ["malformed_task_handle"]
    assert tenant.reads.list_tasks(run_ref=run.ref) == []


async def test_a_duplicate_task_id_is_malformed_on_its_own_run(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    first_run, second_run = new_run(tenant), new_run(tenant)
    with anyio.fail_after(DEADLINE_S):
        first = await requester.call_tool(PRINCIPAL, first_run.ref, "fake", "duplicate_id", {})
        assert isinstance(first, TaskHandle)
        with pytest.raises(MalformedTaskHandle) as raised:
            await requester.call_tool(PRINCIPAL, second_run.ref, "fake", "duplicate_id", {})
        assert DUPLICATE_ID not in str(raised.value)
        # The second dispatch is settled (unknown, with its event), not left "sent".
        assert await _only_dispatch_state(wall_ledger, second_run.ref) is CallState.UNKNOWN
        assert "call.unknown_outcome" in event_types(tenant, second_run.ref)
        # The anomaly is on the run that received the reused handle, not on the holder's.
        assert _anomaly_kinds(wall_ledger, second_run.ref) == ["duplicate_task_handle"]
        assert _anomaly_kinds(wall_ledger, first_run.ref) == []
        # The first handle is untouched and still ends normally.
        await wait_closed(tenant, first.task_ref)
    assert tenant.reads.get_task(first.task_ref).status is TaskStatus.COMPLETED


# -- replies that say nothing definite ---------------------------------------------------------


@pytest.mark.parametrize("tool", ["not_json", "html_200", "server_error", "rate_limited_call"])
async def test_a_reply_without_a_definite_answer_is_an_unknown_outcome(
    requester: TaskRequester, wall_ledger: Ledger, adversarial_server: ServerProcess, tool: str
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    before = (await adversarial_stats(adversarial_server.url))["calls"].get(tool, 0)
    with anyio.fail_after(DEADLINE_S):
        # Even with retries allowed for safe tools: this one is not known to be safe.
        outcome = await requester.call_tool(
            PRINCIPAL,
            run.ref,
            "fake",
            tool,
            {},
            unknown_outcomes=UnknownOutcomePolicy.RETRY_IF_SAFE,
        )
    assert isinstance(outcome, UnknownOutcome) and outcome.retries == ()
    assert await _only_dispatch_state(wall_ledger, run.ref) is CallState.UNKNOWN
    assert "call.unknown_outcome" in event_types(tenant, run.ref)
    # The reason names what happened in the bridge's own words, never the server's body.
    [unknown] = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.CallUnknownOutcome)]
    for quoted in RAW_BODIES:
        assert quoted not in unknown.reason and quoted not in outcome.reason, unknown.reason
    after = (await adversarial_stats(adversarial_server.url))["calls"].get(tool, 0)
    assert after == before + 1  # sent once, never repeated
    # The connection is still good for the next call.
    after_it = await requester.call_tool(PRINCIPAL, run.ref, "fake", "echo", {"text": "ok"})
    assert isinstance(after_it, InlineResult) and after_it.text() == "ok"


async def test_a_safe_retry_waits_as_long_as_retry_after_asks(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    """A tool declared safe to repeat may be retried after a 429, but not sooner than the
    server's Retry-After: the retry is sent at least RETRY_AFTER_S seconds after the first."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    config = McpServerConfig(
        name="fake",
        url=adversarial_server.url,
        request_timeout_s=5.0,
        retry_safe_tools=frozenset({"rate_limited_call"}),
    )
    before = (await adversarial_stats(adversarial_server.url))["calls"].get("rate_limited_call", 0)
    async with TaskRequester(wall_ledger, [config], scheduler=FAST) as requester:
        started = anyio.current_time()
        with anyio.fail_after(DEADLINE_S):
            outcome = await requester.call_tool(
                PRINCIPAL, run.ref, "fake", "rate_limited_call", {},
                unknown_outcomes=UnknownOutcomePolicy.RETRY_IF_SAFE,
            )  # fmt: skip
        elapsed = anyio.current_time() - started
    assert isinstance(outcome, UnknownOutcome)
    assert outcome.retry_after_ms == RETRY_AFTER_S * 1000
    assert len(outcome.retries) == 1 and isinstance(outcome.retries[0], UnknownOutcome)
    after = (await adversarial_stats(adversarial_server.url))["calls"].get("rate_limited_call", 0)
    assert after == before + 2  # the call and one retry, no more
    assert elapsed >= RETRY_AFTER_S * 0.95  # a lower bound: load can only make it longer


async def test_retry_after_on_a_poll_is_honoured(
    requester: TaskRequester, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with anyio.fail_after(DEADLINE_S):
        handle = await requester.call_tool(PRINCIPAL, run.ref, "fake", "rate_limited", {})
        assert isinstance(handle, TaskHandle)
        await wait_closed(tenant, handle.task_ref)
    assert tenant.reads.get_task(handle.task_ref).status is TaskStatus.COMPLETED
    gaps = (await adversarial_stats(adversarial_server.url))["retry_gaps_ms"]
    # FAST backs off 50 ms after a failure; the server asked for RETRY_AFTER_S seconds.
    assert gaps and min(gaps.values()) >= RETRY_AFTER_S * 1000 * 0.9
    # Waited out as asked, and named once: a server answering 429 is reachable (never
    # "unreachable"), the kind of trouble is said.
    assert _anomaly_kinds(wall_ledger, run.ref) == ["misbehaving_server.rate_limited"]


def test_retry_after_is_parsed_and_capped() -> None:
    assert retry_after_ms("2", now_s=0) == 2000
    assert retry_after_ms("Thu, 01 Jan 1970 00:00:10 GMT", now_s=4) == 6000
    assert retry_after_ms("99999999", now_s=0) == RETRY_AFTER_CAP_MS
    assert retry_after_ms("1e400", now_s=0) == RETRY_AFTER_CAP_MS
    assert retry_after_ms("-3", now_s=0) == 0
    for bad in (None, "", "nan", "soon"):
        assert retry_after_ms(bad, now_s=0) is None


def test_only_a_bare_gateway_error_is_taken_for_no_answer() -> None:
    """A 502/504 without a JSON body came from a gateway that reached no server; with a
    JSON-RPC error body it is the server's own answer, and a bare 500 is the server's too."""
    transport = IsolatingTransport(httpx2.AsyncHTTPTransport())
    html = {"content-type": "text/html", "retry-after": "2"}.get
    json_body = {"content-type": "application/json; charset=utf-8"}.get
    for status in (502, 504):
        refusal = transport.refused(status, html, had_session=False)
        assert refusal is not None
        assert refusal["error"]["data"] == {
            SYNTHETIC_KEY: {"httpStatus": status, "retryAfterMs": 2000}
        }
        assert transport.refused(status, json_body, had_session=False) is None
    assert transport.refused(500, {"content-type": "text/plain"}.get, had_session=False) is None
    assert transport.refused(502, {}.get, had_session=False) is not None  # no body type at all


def test_only_an_error_made_on_this_side_is_a_discovery_without_an_answer() -> None:
    """What may send the SDK's negotiation to the legacy handshake (an answer) and what may not
    (the transport's or the SDK's own errors: bridge._mcp.wire.negotiation)."""
    synthetic = MCPError(CONNECTION_CLOSED, "transport failure", {SYNTHETIC_KEY: {"error": "X"}})
    made_here = [
        synthetic,
        MCPError(REQUEST_TIMEOUT, "Request 'server/discover' timed out"),
        MCPError(CONNECTION_CLOSED, "Connection closed"),
    ]
    answers = [
        MCPError(CONNECTION_CLOSED, "Bad Request: Missing session ID"),  # handshake-era server
        MCPError(-32601, "Method not found"),
        MCPError(-32603, "Server returned an error response"),
    ]
    assert all(unanswered(error) for error in made_here)
    assert not any(unanswered(error) for error in answers)


# -- a refused tasks/update ---------------------------------------------------------------------


async def test_a_refused_update_on_a_live_task_is_a_typed_error_not_a_lost_task(
    requester: TaskRequester, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with anyio.fail_after(DEADLINE_S):
        handle = await requester.call_tool(PRINCIPAL, run.ref, "fake", "refuse_update", {})
        assert isinstance(handle, TaskHandle)
        (asked,) = await wait_until(lambda: _input_events(wall_ledger, run.ref))
        with pytest.raises(AnswerRefused) as raised:
            await requester.answer_input(PRINCIPAL, handle.task_ref, asked.input_ref, {"x": 1})
        polls = requester.scheduler.stats.polls
        await wait_until(lambda: requester.scheduler.stats.polls >= polls + 5)
    refused = raised.value
    raw_id = tenant.reads.get_task(handle.task_ref).task_id
    assert refused.code == -32602 and refused.input_ref == asked.input_ref
    assert raw_id not in str(refused) and f"[{handle.task_ref}]" in refused.reason
    task = tenant.reads.get_task(handle.task_ref)
    assert task.is_open and task.lost_reason is None and task.status is TaskStatus.INPUT_REQUIRED
    (request,) = tenant.reads.input_requests(handle.task_ref)
    # dropped and reopened: answerable again, never redelivered (not even by recovery)
    assert request.answered_at_ms is None and request.delivered_at_ms is None
    assert tenant.inputs.undelivered_answers() == []
    assert "task.input_answer_refused" in event_types(tenant, run.ref)
    assert _anomaly_kinds(wall_ledger, run.ref) == ["update_refused"]
    assert "task.lost" not in event_types(tenant, run.ref)
    stats = await adversarial_stats(adversarial_server.url)
    assert stats["updates"]["refused"] >= 1
    refused_before = stats["updates"]["refused"]
    await wait_until(lambda: requester.scheduler.stats.polls >= polls + 8)
    stats = await adversarial_stats(adversarial_server.url)
    assert stats["updates"]["refused"] == refused_before  # not resent blindly
    await requester.cancel_task(PRINCIPAL, handle.task_ref)


# -- no leaks -----------------------------------------------------------------------------------


async def test_raw_task_ids_quoted_by_the_server_reach_no_output_channel(
    tmp_path: Path,
    adversarial_server: ServerProcess,
    span_exporter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    span_exporter.clear()
    db = tmp_path / "ledger.db"
    ledger = Ledger.open(db)
    tenant = ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    config = McpServerConfig(name="fake", url=adversarial_server.url, request_timeout_s=5.0)
    refs: list[str] = []
    try:
        async with TaskRequester(ledger, [config], scheduler=FAST) as requester:
            with anyio.fail_after(DEADLINE_S):
                for tool in ("quote_id_error", "quote_id_result", "refuse_update"):
                    handle = await requester.call_tool(PRINCIPAL, run.ref, "fake", tool, {})
                    assert isinstance(handle, TaskHandle)
                    refs.append(handle.task_ref)
                await wait_closed(tenant, refs[0])
                await wait_closed(tenant, refs[1])
                (asked,) = await wait_until(
                    lambda: [
                        e
                        for e in tenant.reads.events(run.ref)
                        if isinstance(e, ev.TaskInputRequired)
                    ]
                )
                with pytest.raises(AnswerRefused):
                    await requester.answer_input(PRINCIPAL, refs[2], asked.input_ref, {"x": 1})
                await requester.cancel_task(PRINCIPAL, refs[2])
        tasks = [tenant.reads.get_task(ref) for ref in refs]
        raw_ids = [t.task_id for t in tasks]
        failed, completed = tasks[0], tasks[1]
        # Stored outcomes carry the task's reference where the server quoted its id.
        assert failed.status is TaskStatus.FAILED
        assert failed.error["message"] == f"job [{failed.ref}] exploded"
        assert failed.error["data"] == [f"[{failed.ref}]"]
        assert failed.status_message == f"[{failed.ref}] failed"
        assert completed.result["content"][0]["text"] == f"report for [{completed.ref}] ready"
        views = json.dumps(
            [{k: v for k, v in asdict(t).items() if k != "task_id"} for t in tasks], default=str
        )
        events = json.dumps([e.model_dump(mode="json") for e in tenant.reads.events(run.ref)])
    finally:
        ledger.close()
    spans = finished_spans_text(span_exporter)
    cli_output = ""
    for command in (["show", run.ref], ["timeline", run.ref], ["events", run.ref, "--json"]):
        result = CliRunner().invoke(app, ["--db", str(db), "--principal", PRINCIPAL, *command])
        assert result.exit_code == 0, result.output
        cli_output += result.output
    assert refs[0] in cli_output
    assert "tasks/update" in caplog.text  # the update's debug log was captured, and scrubbed
    for raw_id in raw_ids:
        for channel, text in {
            "views": views,
            "events": events,
            "spans": spans,
            "cli": cli_output,
            "logs": caplog.text,
        }.items():
            assert raw_id not in text, channel


# -- a server that takes tasks/get and answers it badly -------------------------------------------

REQUEST_TIMEOUT_S = 1.5
FAKE_POLL_S = 0.05  # the fake's pollIntervalMs
LOADED_MACHINE_SLACK_S = 5.0  # scheduling on a loaded CI machine, not the bridge's own wait


@pytest.mark.parametrize(
    ("tool", "kind"),
    [
        ("get_not_json", "not_json"),
        ("get_rate_limited", "rate_limited"),
        ("get_wrong_task", "wrong_task"),
        ("get_trickle", "slow_reply"),
        ("get_endless_sse", "slow_reply"),
    ],
)
async def test_a_server_answering_polls_badly_is_named_by_kind_never_unreachable(
    wall_ledger: Ledger, adversarial_server: ServerProcess, tool: str, kind: str
) -> None:
    """Named ``misbehaving_server.<kind>`` within one poll interval plus the request timeout,
    once; still answering badly past the unreachable grace, it is never ``unreachable``, and
    the handle stays open (the server may recover)."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    config = McpServerConfig(
        name="fake", url=adversarial_server.url, request_timeout_s=REQUEST_TIMEOUT_S
    )
    async with TaskRequester(wall_ledger, [config], scheduler=FAST) as requester:
        run = new_run(tenant)
        created = await requester.call_tool(PRINCIPAL, run.ref, "fake", tool, {})
        assert isinstance(created, TaskHandle)
        started = anyio.current_time()
        named = f"misbehaving_server.{kind}"
        await wait_until(
            lambda: named in _anomaly_kinds(wall_ledger, run.ref),
            timeout=FAKE_POLL_S + REQUEST_TIMEOUT_S + LOADED_MACHINE_SLACK_S,
            what=named,
        )
        assert anyio.current_time() - started < FAKE_POLL_S + REQUEST_TIMEOUT_S + 5.0
        before = (await adversarial_stats(adversarial_server.url))["gets"].get(tool, 0)

        async def two_more_gets() -> bool:
            gets = (await adversarial_stats(adversarial_server.url))["gets"].get(tool, 0)
            return bool(gets >= before + 2)

        await wait_until(two_more_gets, timeout=DEADLINE_S, what="two more polls")
    # Past FAST's unreachable grace by now, and still answering badly.
    types = event_types(tenant, run.ref)
    assert "server.unreachable" not in types and "task.lost" not in types
    assert _anomaly_kinds(wall_ledger, run.ref) == [named]
    assert tenant.reads.get_task(created.task_ref).status is TaskStatus.WORKING


async def test_an_abandoned_stream_is_not_resumed_for_ever(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    """A server ends a call's stream after one event and never replays it: the SDK resumes
    it (accepted, ended, again) once a second for as long as the request waits, a connection
    each time. Bounded here: a few resumes, then the stream is given up; the call ends
    unknown, and nothing is resumed after."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    config = McpServerConfig(name="fake", url=adversarial_server.url, request_timeout_s=5.0)

    async def resumes() -> int:
        calls = (await adversarial_stats(adversarial_server.url))["calls"]
        return int(calls.get("abandon_stream_resume", 0))

    before = await resumes()
    async with TaskRequester(wall_ledger, [config], scheduler=FAST) as requester:
        run = new_run(tenant)
        with anyio.fail_after(DEADLINE_S):
            outcome = await requester.call_tool(PRINCIPAL, run.ref, "fake", "abandon_stream", {})
        assert isinstance(outcome, UnknownOutcome)
        # The SDK waits a second between resumes: the request's 5 s would see four or five.
        await anyio.sleep(2 * RESUME_DELAY_S)
        settled = await resumes()
        await anyio.sleep(2 * RESUME_DELAY_S)
        assert await resumes() == settled, "still resuming the abandoned stream"
    assert settled - before <= MAX_RESUMES_WITHOUT_PROGRESS


async def test_resumes_are_refused_only_in_a_quick_loop() -> None:
    """Resumes from one event id close together are a loop (refused, never sent); the same
    resumes spread out are a quiet stream its server ends now and then (sent)."""
    sent: list[str] = []

    def server(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.headers.get("last-event-id", ""))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"})

    now = [0.0]
    transport = IsolatingTransport(httpx2.MockTransport(server), clock_s=lambda: now[0])
    resume = httpx2.Request("GET", "http://127.0.0.1:9/mcp", headers={"Last-Event-ID": "e-7"})
    answers = []
    for _ in range(MAX_RESUMES_WITHOUT_PROGRESS + 1):
        answers.append((await transport.handle_async_request(resume)).status_code)
        now[0] += 1.0
    assert answers == [200] * MAX_RESUMES_WITHOUT_PROGRESS + [410]
    assert len(sent) == MAX_RESUMES_WITHOUT_PROGRESS  # the refused one never left
    now[0] += RESUME_WINDOW_S + 1  # much later: a quiet stream resumed again
    assert (await transport.handle_async_request(resume)).status_code == 200
    other = httpx2.Request("GET", "http://127.0.0.1:9/mcp", headers={"Last-Event-ID": "e-8"})
    assert (await transport.handle_async_request(other)).status_code == 200
