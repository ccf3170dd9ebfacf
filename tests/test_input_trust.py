"""Input trust against a real fastmcp-tasks server (tests/servers/inputs_server.py): the input
kinds declared per request follow the handlers the host registered (as the server received
them), typed handlers answer form / URL elicitation and sampling, an undeclared kind gets the
conservative default (decline), a bad handler answer is refused with an event and nothing
recorded, and a stuck input request is reported and then cancelled by policy."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from bridge import (
    HOST,
    Accept,
    Bridge,
    BridgeSettings,
    Decline,
    FormElicitation,
    InlineResult,
    InputHandlers,
    InputPolicy,
    McpServerConfig,
    OnStuckInput,
    Policies,
    TaskPending,
    TaskStatus,
    UnansweredInput,
    UrlElicitation,
    WaitMode,
    events as ev,
)
from bridge.errors import InputAlreadyAnswered
from tests.support.bridging import FAST, wait_until
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"


@pytest.fixture(scope="module")
def inputs_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.inputs_server") as server:
        yield server


def _open(
    tmp_path: Path,
    server: ServerProcess,
    handlers: InputHandlers | None = None,
    policy: InputPolicy | None = None,
    *,
    names: tuple[str, ...] = ("inputs",),
) -> Bridge:
    return Bridge.open(
        BridgeSettings(
            ledger_url=tmp_path / f"{uuid.uuid4().hex[:6]}.db",
            principals=[P],
            mcp_servers=[McpServerConfig(name=n, url=server.url) for n in names],
            scheduler=FAST,
            policies=Policies(inputs=policy or InputPolicy()),
            input_handlers=handlers,
        )
    )


async def _run(bridge: Bridge) -> str:
    name = uuid.uuid4().hex[:8]
    run = await bridge.register_served_run(
        P, response_id=f"resp_{name}", session_id=f"hsess{name}", harness_id="chrn_test"
    )
    return run.ref


async def _declared(bridge: Bridge, run_ref: str, server: str = "inputs") -> dict[str, Any]:
    step = await bridge.run(P, run_ref).call_tool(server, "declared_capabilities")
    assert isinstance(step, InlineResult)
    declared: dict[str, Any] = json.loads(step.text())
    assert declared["extensions"] == {"io.modelcontextprotocol/tasks": {}}  # untouched
    return declared


async def _start(bridge: Bridge, run_ref: str, tool: str, args: dict[str, Any]) -> str:
    step = await bridge.run(P, run_ref).call_tool("inputs", tool, args, wait=WaitMode.DETACH)
    assert isinstance(step, TaskPending)
    return step.task.ref


async def _settled_text(bridge: Bridge, task_ref: str) -> str:
    [task] = await (await bridge.run_of(P, task_ref)).wait_for([task_ref], timeout=15)
    assert task.status is TaskStatus.COMPLETED
    return str(task.result["content"][0]["text"])


async def _events(bridge: Bridge, run_ref: str) -> list[ev.BridgeEvent]:
    return list(await bridge._db(bridge._ledger.for_principal(P).reads.events, run_ref))


async def _event(bridge: Bridge, run_ref: str, kind: type[Any], task_ref: str | None = None) -> Any:
    """The run's first ``kind`` event (of ``task_ref``'s task, when given), once written."""

    async def found() -> Any:
        events = await _events(bridge, run_ref)
        return next(
            (
                e
                for e in events
                if isinstance(e, kind) and task_ref in (None, getattr(e, "task_ref", None))
            ),
            None,
        )

    return await wait_until(found, what=kind.__name__)


async def _no_sampling(params: mcp_types.CreateMessageRequestParams) -> Any:
    raise AssertionError("not called")


async def test_declared_capabilities_follow_the_registered_handlers(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    # Default: the host answers form elicitations itself (pending_inputs); nothing else.
    async with _open(tmp_path, inputs_server) as bridge:
        declared = await _declared(bridge, await _run(bridge))
        assert declared.get("elicitation") == {"form": {}}
        assert "sampling" not in declared
    # Nothing registered: nothing declared.
    async with _open(tmp_path, inputs_server, InputHandlers(form=None)) as bridge:
        declared = await _declared(bridge, await _run(bridge))
        assert "elicitation" not in declared and "sampling" not in declared

    # Per server: URL elicitation and sampling for one, form only (by HOST) for the other.
    async def consent(asked: UrlElicitation) -> Decline:
        return Decline()

    rich = InputHandlers(form=None, url=consent, sampling=_no_sampling)
    handlers = InputHandlers(form=HOST, per_server={"rich": rich})
    async with _open(tmp_path, inputs_server, handlers, names=("inputs", "rich")) as bridge:
        run_ref = await _run(bridge)
        declared = await _declared(bridge, run_ref, "rich")
        assert declared.get("elicitation") == {"url": {}}
        assert declared.get("sampling") == {}
        declared = await _declared(bridge, run_ref, "inputs")
        assert declared.get("elicitation") == {"form": {}}
        assert "sampling" not in declared


async def test_typed_handlers_answer_and_the_tasks_complete(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    seen: list[Any] = []

    async def form(asked: FormElicitation) -> Accept:
        seen.append(asked)
        return Accept({"name": "Ada"})

    async def url(asked: UrlElicitation) -> Accept:
        seen.append(asked)
        return Accept()  # the user consented; the bridge opened nothing

    async def sample(params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        seen.append(params)
        text = params.messages[0].content
        assert isinstance(text, mcp_types.TextContent)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=text.text.upper()),
            model="test-model",
        )

    handlers = InputHandlers(form=form, url=url, sampling=sample)
    async with _open(tmp_path, inputs_server, handlers) as bridge:
        run_ref = await _run(bridge)
        name_ref = await _start(bridge, run_ref, "ask_name", {})
        consent_ref = await _start(
            bridge, run_ref, "ask_consent", {"url": "https://auth.example.test/login"}
        )
        model_ref = await _start(bridge, run_ref, "ask_model", {"prompt": "hello"})
        assert await _settled_text(bridge, name_ref) == 'accepted {"name": "Ada"}'
        assert await _settled_text(bridge, consent_ref) == "accepted {}"
        assert await _settled_text(bridge, model_ref) == "sampled by test-model: HELLO"
        assert await bridge.run(P, run_ref).pending_inputs() == []
        types = [e.type for e in await _events(bridge, run_ref)]
        assert types.count("task.input_answered") == 3
        assert "task.input_declined" not in types
    [form_asked] = [s for s in seen if isinstance(s, FormElicitation)]
    assert form_asked.message == "What is your name?"
    assert form_asked.requested_schema["required"] == ["name"]
    assert form_asked.server == "inputs" and form_asked.task_ref == name_ref
    [url_asked] = [s for s in seen if isinstance(s, UrlElicitation)]
    assert url_asked.url == "https://auth.example.test/login"
    assert url_asked.message == "Sign in to continue"
    [sampled] = [s for s in seen if isinstance(s, mcp_types.CreateMessageRequestParams)]
    assert sampled.max_tokens == 64


async def test_an_undeclared_kind_is_declined_once(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    async with _open(tmp_path, inputs_server) as bridge:  # declares form elicitation only
        run_ref = await _run(bridge)
        consent_ref = await _start(bridge, run_ref, "ask_consent", {"url": "https://x.test/"})
        model_ref = await _start(bridge, run_ref, "ask_model", {"prompt": "hello"})
        # An elicitation has a decline: recorded, delivered, and the tool sees it.
        assert await _settled_text(bridge, consent_ref) == "decline"
        declined = [
            e
            for e in await _events(bridge, run_ref)
            if isinstance(e, ev.TaskInputDeclined) and e.task_ref == consent_ref
        ]
        assert [(e.reason, e.answered, e.method) for e in declined] == [
            ("undeclared", True, "elicitation/create")
        ]
        # Sampling has none: recorded as declined, nothing sent, no longer the host's.
        # (waited for by its task: under load the consent's decline may be the only one yet)
        declined_model = await _event(bridge, run_ref, ev.TaskInputDeclined, model_ref)
        events = await _events(bridge, run_ref)
        [model_declined] = [
            e for e in events if isinstance(e, ev.TaskInputDeclined) and e.task_ref == model_ref
        ]
        assert declined_model is not None
        assert (model_declined.reason, model_declined.answered) == ("undeclared", False)
        assert not any(
            isinstance(e, ev.TaskInputAnswered) and e.task_ref == model_ref for e in events
        )
        assert await bridge.run(P, run_ref).pending_inputs() == []
        with pytest.raises(InputAlreadyAnswered):
            await bridge._requester.answer_input(P, model_ref, model_declined.input_ref, {"x": 1})
        task = await (await bridge.run_of(P, model_ref)).task(model_ref)
        assert task.status is TaskStatus.INPUT_REQUIRED


async def test_an_invalid_handler_answer_is_refused_and_nothing_is_recorded(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    async def empty_name(asked: FormElicitation) -> Accept:
        return Accept({"name": ""})  # fails the schema's minLength

    keep = InputPolicy(handler_failed=UnansweredInput.LEAVE_PENDING)
    async with _open(tmp_path, inputs_server, InputHandlers(form=empty_name), keep) as bridge:
        run_ref = await _run(bridge)
        task_ref = await _start(bridge, run_ref, "ask_name", {})
        failed = await _event(bridge, run_ref, ev.TaskInputHandlerFailed)
        assert (failed.failure, failed.action) == ("invalid_answer", "left_pending")
        assert "name" in failed.detail
        types = [e.type for e in await _events(bridge, run_ref)]
        assert "task.input_answered" not in types and "task.input_declined" not in types
        # Left for the host, untouched: it answers, and the task completes.
        [request] = await bridge.run(P, run_ref).pending_inputs()
        assert request.input_ref == failed.input_ref
        view = (await bridge._db(bridge._ledger.for_principal(P).reads.input_requests, task_ref))[0]
        assert view.answered_at_ms is None and view.answer is None
        await request.accept({"name": "Grace"})
        assert await _settled_text(bridge, task_ref) == 'accepted {"name": "Grace"}'


async def test_a_raising_handler_gets_the_default_decline(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    async def broken(asked: FormElicitation) -> Accept:
        raise RuntimeError("the form UI is down")

    async with _open(tmp_path, inputs_server, InputHandlers(form=broken)) as bridge:
        run_ref = await _run(bridge)
        task_ref = await _start(bridge, run_ref, "ask_name", {})
        assert await _settled_text(bridge, task_ref) == "decline"
        events = await _events(bridge, run_ref)
        [failed] = [e for e in events if isinstance(e, ev.TaskInputHandlerFailed)]
        assert (failed.failure, failed.action) == ("raised", "declined")
        assert "the form UI is down" in failed.detail
        [declined] = [e for e in events if isinstance(e, ev.TaskInputDeclined)]
        assert (declined.reason, declined.answered) == ("handler_failed", True)
        assert events.index(failed) < events.index(declined)


async def test_a_stuck_input_is_reported_then_cancelled_by_policy(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    # Sampling is not declared: declined without an answer, so the task stays input_required.
    policy = InputPolicy(stuck_after_polls=3, on_stuck=OnStuckInput.CANCEL)
    async with _open(tmp_path, inputs_server, policy=policy) as bridge:
        run_ref = await _run(bridge)
        task_ref = await _start(bridge, run_ref, "ask_model", {"prompt": "hello"})
        stuck = await _event(bridge, run_ref, ev.TaskInputStuck)
        assert stuck.task_ref == task_ref and stuck.polls == 3 and stuck.cancel
        cancel = await _event(bridge, run_ref, ev.TaskCancelRequested)
        assert cancel.requested_by == "policy:input_stuck"
        [task] = await bridge.run(P, run_ref).wait_for([task_ref], timeout=15)
        assert task.status is TaskStatus.CANCELLED
        events = await _events(bridge, run_ref)
        order = [e.type for e in events if getattr(e, "task_ref", None) == task_ref]
        assert order.index("task.input_declined") < order.index("task.input_stuck")
        assert order.index("task.input_stuck") < order.index("task.cancel_requested")
        assert order.count("task.input_stuck") == 1


async def test_a_stuck_input_is_only_reported_by_default(
    tmp_path: Path, inputs_server: ServerProcess
) -> None:
    keep = InputPolicy(stuck_after_polls=2, undeclared=UnansweredInput.LEAVE_PENDING)
    async with _open(tmp_path, inputs_server, policy=keep) as bridge:
        run_ref = await _run(bridge)
        task_ref = await _start(bridge, run_ref, "ask_consent", {"url": "https://x.test/"})
        stuck = await _event(bridge, run_ref, ev.TaskInputStuck)
        assert (stuck.task_ref, stuck.polls, stuck.cancel) == (task_ref, 2, False)
        # Still the host's to answer (leave_pending), and nothing was cancelled.
        [request] = await bridge.run(P, run_ref).pending_inputs()
        await request.accept()
        assert await _settled_text(bridge, task_ref) == "accepted {}"
        types = [e.type for e in await _events(bridge, run_ref)]
        assert "task.cancel_requested" not in types and types.count("task.input_stuck") == 1
