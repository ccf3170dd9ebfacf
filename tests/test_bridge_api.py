"""The harness-facing API against the real example MCP servers (harness_examples/mcp_servers,
bearer-protected): list_tools with the bridge's own credentials, typed input requests on the
payments approval (accept / decline / cancel, schema checked before anything is recorded),
wait_for with a lost task, operation lookup, and reading step results."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from bridge import (
    AnswerDelivery,
    Bridge,
    BridgeSettings,
    InlineResult,
    InputRequest,
    LedgerReader,
    LostReason,
    McpServerConfig,
    OutcomeKind,
    TaskPending,
    TaskSettled,
    TaskStatus,
    TaskView,
    WaitMode,
    events as ev,
)
from bridge.errors import (
    BridgeError,
    InvalidAnswer,
    NotFound,
    NoToolResult,
    ServerConnectFailed,
    WaitTimedOut,
)
from tests.support.bridging import FAST, served_run, wait_until
from tests.support.example_servers import example_servers as running_example_servers
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "example-secret"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def example_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with running_example_servers(
        tmp_path_factory.mktemp("payments") / "payments.db", TOKEN
    ) as procs:
        yield procs


def _configs(servers: dict[str, ServerProcess], ref: str | None) -> list[McpServerConfig]:
    return [McpServerConfig(name=n, url=s.url, credential_ref=ref) for n, s in servers.items()]


@pytest.fixture
async def bridge(
    tmp_path: Path, example_servers: dict[str, ServerProcess]
) -> AsyncIterator[Bridge]:
    async with Bridge.open(
        BridgeSettings(
            ledger_url=tmp_path / "ledger.db",
            principals=[P],
            mcp_servers=_configs(example_servers, "examples"),
            credentials={"examples": TOKEN}.get,
            scheduler=FAST,
        )
    ) as opened:
        yield opened


async def _run(bridge: Bridge) -> str:
    return await served_run(bridge, P)


async def _approval(bridge: Bridge, run_ref: str, key: str) -> tuple[TaskPending, InputRequest]:
    args = {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": key}
    step = await bridge.run(P, run_ref).call_tool(
        "payments", "approve_payment", args, wait=WaitMode.DETACH
    )
    assert isinstance(step, TaskPending)
    [request] = await wait_until(
        lambda: bridge.run(P, run_ref).pending_inputs(), what="approval asked"
    )
    return step, request


async def test_list_tools_through_the_bridge_connection(bridge: Bridge) -> None:
    tools = {tool.name: tool for tool in await bridge.list_tools(P, "reports")}
    assert isinstance(tools["generate_report"], mcp_types.Tool)
    assert "quarter" in tools["generate_report"].input_schema["properties"]
    payments = {tool.name for tool in await bridge.list_tools(P, "payments")}
    assert {"approve_payment", "payment_count"} <= payments


async def test_list_tools_without_credentials_fails_typed(
    tmp_path: Path, example_servers: dict[str, ServerProcess]
) -> None:
    servers = _configs(example_servers, None)
    async with Bridge.open(
        BridgeSettings(ledger_url=tmp_path / "l.db", principals=[P], mcp_servers=servers)
    ) as bridge:
        with pytest.raises(ServerConnectFailed):
            await bridge.list_tools(P, "reports")


async def test_accept_validates_then_answers(bridge: Bridge) -> None:
    run_ref = await _run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    step, request = await _approval(bridge, run_ref, key)
    assert request.method == "elicitation/create"
    assert request.message == f"Approve payment of 120 EUR to ACME Corp (key {key})?"
    assert request.requested_schema is not None
    assert request.requested_schema["required"] == ["approve"]

    types_before = [e.type for e in await _events(bridge, run_ref)]
    for bad in ({"approve": "yes"}, {}, None, {"approve": True, "colour": "red"}):
        with pytest.raises(InvalidAnswer):
            await request.accept(bad)
    with pytest.raises(InvalidAnswer) as raw:  # an elicitation has one checked path
        await request.respond({"action": "accept", "content": {"approve": "yes"}})
    assert "accept(), decline() or dismiss()" in raw.value.detail
    # Nothing recorded or sent: still pending, no answer event, the task still waits.
    assert [e.type for e in await _events(bridge, run_ref)] == types_before
    [still] = await bridge.run(P, run_ref).pending_inputs()
    assert still.input_ref == request.input_ref
    task = await (await bridge.run_of(P, step.task.ref)).task(step.task.ref)
    assert task.status is TaskStatus.INPUT_REQUIRED

    receipt = await request.accept({"approve": True})
    assert receipt.delivery is AnswerDelivery.DELIVERED and receipt.delivered
    [done] = await bridge.run(P, run_ref).wait_for([step.task.ref], timeout=15)
    settled = TaskSettled(step.op_ref, done)
    assert settled.text() == f"approved {key}"
    result = settled.to_call_tool_result()
    assert isinstance(result, mcp_types.CallToolResult) and not result.is_error
    assert await bridge.run(P, run_ref).pending_inputs() == []


@pytest.mark.parametrize("action", ["decline", "dismiss"])
async def test_decline_and_dismiss_answer_without_content(bridge: Bridge, action: str) -> None:
    run_ref = await _run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    step, request = await _approval(bridge, run_ref, key)
    receipt = await (request.decline() if action == "decline" else request.dismiss())
    assert receipt.delivered
    [done] = await bridge.run(P, run_ref).wait_for([step.task.ref], timeout=15)
    assert done.status is TaskStatus.COMPLETED
    assert TaskSettled(step.op_ref, done).text() == f"declined {key}"
    count = await bridge.run(P, run_ref).call_tool(
        "payments", "payment_count", {"payment_key": key}
    )
    assert count.text() == "0"
    with pytest.raises(InvalidAnswer):  # answered once: the helpers refuse nothing new,
        await request.accept({"approve": "no"})  # a bad answer is still refused first


async def test_input_request_from_the_event(bridge: Bridge) -> None:
    run_ref = await _run(bridge)
    _, pending = await _approval(bridge, run_ref, f"pay-{uuid.uuid4().hex[:8]}")
    [event] = [e for e in await _events(bridge, run_ref) if isinstance(e, ev.TaskInputRequired)]
    request = bridge.run(P, event.run_ref).input_request(event)
    assert (request.input_ref, request.method) == (pending.input_ref, pending.method)
    assert request.requested_schema == pending.requested_schema


async def test_wait_for_counts_a_lost_task_as_final(
    bridge: Bridge, example_servers: dict[str, ServerProcess]
) -> None:
    run_ref = await _run(bridge)
    step, _ = await _approval(bridge, run_ref, f"pay-{uuid.uuid4().hex[:8]}")
    with pytest.raises(WaitTimedOut) as timed_out:
        await bridge.run(P, run_ref).wait_for([step.task.ref], timeout=0.2)
    assert timed_out.value.pending == [step.task.ref]
    await anyio.to_thread.run_sync(example_servers["payments"].restart)  # tasks are in memory
    [lost] = await bridge.run(P, run_ref).wait_for([step.task.ref], timeout=20)
    assert lost.lost_reason is LostReason.NOT_FOUND
    finals = [e for e in await _events(bridge, run_ref) if e.is_final]
    assert [type(e) for e in finals] == [ev.TaskLost]
    settled = TaskSettled(step.op_ref, lost)
    with pytest.raises(NoToolResult):
        settled.text()
    result = settled.to_call_tool_result()
    assert result.is_error
    assert "task lost (not_found)" in result.content[0].text  # type: ignore[union-attr]


async def test_text_operation_and_lists(bridge: Bridge) -> None:
    run_ref = await _run(bridge)
    args = {"quarter": "2026-Q3", "sections": 1, "seconds_per_section": 0.1}
    step = await bridge.run(P, run_ref).call_tool(
        "reports", "generate_report", args, operation_id="op-report-1"
    )
    assert isinstance(step, TaskSettled) and step.status is TaskStatus.COMPLETED
    assert step.text().startswith("Quarterly report 2026-Q3\n")
    assert step.kind is OutcomeKind.TASK_ENDED
    assert step.to_call_tool_result().content[0].type == "text"

    record = await bridge.run(P, run_ref).operation("op-report-1")
    assert record is not None and record.op_ref == step.op_ref
    assert record.task is not None and record.task.ref == step.task.ref
    assert await bridge.run(P, run_ref).operation("op-never-used") is None

    assert (await bridge.run(P, run_ref).view()).ref == run_ref
    assert [t.ref for t in await bridge.run(P, run_ref).tasks()] == [step.task.ref]
    assert await bridge.run(P, run_ref).tasks(open_only=True) == []
    pending = await bridge.run(P, run_ref).call_tool(
        "reports", "generate_report", args, wait=WaitMode.DETACH
    )
    assert isinstance(pending, TaskPending) and pending.kind is OutcomeKind.TASK_OPEN
    with pytest.raises(NoToolResult):
        pending.text()


async def _events(bridge: Bridge, run_ref: str) -> list[Any]:
    return bridge._ledger.for_principal(P).reads.events(run_ref)


async def test_errors_inside_async_with_are_not_wrapped(tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom) as caught:
        async with Bridge.open(BridgeSettings(ledger_url=tmp_path / "l.db", principals=[P])):
            raise Boom("from the body")
    assert type(caught.value) is Boom and str(caught.value) == "from the body"


@pytest.mark.parametrize(("mode", "pragma"), [("NORMAL", 1), ("FULL", 2)])
async def test_sqlite_synchronous_reaches_the_ledger(
    tmp_path: Path, mode: Any, pragma: int
) -> None:
    async with Bridge.open(
        BridgeSettings(ledger_url=tmp_path / "s.db", principals=[P], sqlite_synchronous=mode)
    ) as b:
        with b._ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == pragma
    with closing(sqlite3.connect(tmp_path / "s.db")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_on_task_gives_the_task_while_the_call_waits_and_replays_say_so(
    bridge: Bridge,
) -> None:
    run = bridge.run(P, await _run(bridge))
    seen: list[TaskView] = []

    async def note(task: TaskView) -> None:
        seen.append(await run.task(task.ref))  # recorded and watched before the wait

    args = {"quarter": "2026-Q4", "sections": 2, "seconds_per_section": 0.2}
    step = await run.call_tool(
        "reports", "generate_report", args, operation_id="op-on-task", on_task=note
    )
    assert isinstance(step, TaskSettled) and not step.replayed
    [known] = seen
    assert known.ref == step.task.ref and known.is_open  # known while the call still waited
    again = await run.call_tool("reports", "generate_report", args, operation_id="op-on-task")
    assert isinstance(again, TaskSettled) and again.replayed and again.task.ref == step.task.ref
    detached = await run.call_tool(
        "reports", "generate_report", args, operation_id="op-on-task", wait=WaitMode.DETACH
    )
    assert detached.replayed and detached.kind is OutcomeKind.TASK_ENDED  # settled: no task left


async def test_a_loop_over_a_run_ends_when_the_run_waits_on_nothing(bridge: Bridge) -> None:
    run = bridge.run(P, await _run(bridge))
    args = {"quarter": "2026-Q1", "sections": 2, "seconds_per_section": 0.2}
    pending = await run.call_tool("reports", "generate_report", args, wait=WaitMode.DETACH)
    assert isinstance(pending, TaskPending)
    counted = await run.call_tool("payments", "payment_count", {"payment_key": "none"})
    assert isinstance(counted, InlineResult)
    assert not await run.is_idle()  # the task is still watched
    with anyio.fail_after(60):
        types = [event.type async for event in run.subscribe(until_idle=True)]
    assert "call.result" in types and types[-1] == "task.terminal"
    assert await run.is_idle()
    # Only an inline result: no task event ever comes, and the loop still ends.
    inline_only = bridge.run(P, await _run(bridge))
    await inline_only.call_tool("payments", "payment_count", {"payment_key": "none"})
    with anyio.fail_after(30):
        types = [event.type async for event in inline_only.subscribe(until_idle=True)]
    assert types[-1] == "call.result"


async def test_a_running_bridge_reads_its_records_through_one_reader(bridge: Bridge) -> None:
    """``Bridge.read``: a ``LedgerReader`` over the bridge's own ledger, scoped to one of its
    principals, run on the bridge's runner; several reads in one function."""
    run_ref = await _run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    step, asked = await _approval(bridge, run_ref, key)
    task_ref = step.task.ref

    def what_is_recorded(reader: LedgerReader) -> tuple[Any, ...]:
        view = reader.run(run_ref)
        return (
            reader.runs(response_id=view.response_id),
            reader.calls(run_ref),
            reader.operation(step.op_ref),  # no operation id given: the call's reference
            reader.admission(step.op_ref),
            reader.inputs(task_ref, pending_only=True),
            reader.inputs(task_ref),
        )

    runs, calls, found, verdict, pending, every = await bridge.read(P, what_is_recorded)
    assert [r.ref for r in runs] == [run_ref]
    [call] = calls
    assert call.task is not None and call.task.ref == task_ref and call.task.is_open
    assert found is not None and found.ref == step.op_ref and found.run_ref == run_ref
    assert verdict is None  # never checked
    assert [i.ref for i in pending] == [i.ref for i in every] == [asked.input_ref]
    assert await bridge.read(P, lambda r: r.runs(response_id="resp_none")) == []
    with pytest.raises(BridgeError, match="not in this bridge's scope"):
        await bridge.read("globex", lambda r: r.runs())


async def test_a_ledger_reader_reads_a_gone_bridges_records_and_changes_nothing(
    tmp_path: Path, example_servers: dict[str, ServerProcess]
) -> None:
    db = tmp_path / "gone.db"
    settings = BridgeSettings(
        ledger_url=db,
        principals=[P, "globex"],
        mcp_servers=_configs(example_servers, "examples"),
        credentials={"examples": TOKEN}.get,
        scheduler=FAST,
    )
    async with Bridge.open(settings) as bridge:
        run_ref = await _run(bridge)
        step, asked = await _approval(bridge, run_ref, f"pay-{uuid.uuid4().hex[:8]}")
    # The bridge is gone with its task open and its question unanswered.
    with LedgerReader.open(db, P) as reader:
        assert run_ref in [r.ref for r in reader.runs(open_only=True)]
        assert reader.run(run_ref).ref == run_ref
        [call] = reader.calls(run_ref)
        assert (call.op_ref, call.task_ref) == (step.op_ref, step.task.ref)
        [task] = reader.tasks(run_ref, open_only=True)
        assert task.ref == step.task.ref
        assert [i.ref for i in reader.pending_inputs()] == [asked.input_ref]
        events = reader.events(run_ref)
        assert "task.input_required" in [e.type for e in events]
    with LedgerReader.open(db, "globex") as other:  # scoped to its principal
        assert other.runs() == [] and other.pending_inputs() == []
        with pytest.raises(NotFound):
            other.run(run_ref)
    with LedgerReader.open(db, P) as again:  # reading recovered, polled and wrote nothing
        assert again.events(run_ref) == events
        assert again.tasks(run_ref) == [task]
