"""The seam on the SDK's private parts (bridge._mcp.wire.sdk_compat), against real servers.

Each private part the seam relies on is removed in turn, as a release that renamed it would
remove it: the name is gone from the SDK's class, module or instances, while the SDK's own
code keeps working under the new name (its functions are recompiled to use it). A bridged
call must still reach its result, its polls taking the public SDK path, the fallback counted
and one warning logged. With every part present, the fast paths are taken and nothing falls
back.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

import pytest

from bridge._config import McpServerConfig
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.wire import sdk_compat
from bridge._mcp.wire.lean_get import LeanGetStats
from bridge._outcomes import TaskHandle
from tests.support.bridging import FAST, wait_closed
from tests.support.builders import new_run
from tests.support.legacy_venv import LegacyServerProcess, ensure_legacy_venv
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"
LEGACY_MODULE = "tests.servers.legacy_tasks_server_2025_11_25"
NEW_NAME = "_renamed_by_the_next_release"
SEAM_LOGGER = "bridge._mcp.wire.sdk_compat"


# -- removing a part as a rename would -----------------------------------------------------------
def _sdk_modules() -> list[ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        if isinstance(module, ModuleType) and (name == "mcp" or name.startswith("mcp."))
    ]


def _functions(value: Any) -> Iterator[FunctionType]:
    """The plain functions behind ``value`` (a function, method wrapper, property or wrapper)."""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        for accessor in (value.fget, value.fset, value.fdel):
            if accessor is not None:
                yield from _functions(accessor)
        return
    wrapped = getattr(value, "__wrapped__", None)
    if wrapped is not None and wrapped is not value:
        yield from _functions(wrapped)
    if isinstance(value, FunctionType):
        yield value


def _sdk_functions() -> Iterator[FunctionType]:
    seen: set[int] = set()
    for module in _sdk_modules():
        for value in list(vars(module).values()):
            members = [value]
            if isinstance(value, type) and value.__module__ == module.__name__:
                members = list(vars(value).values())
            for member in members:
                for function in _functions(member):
                    if id(function) in seen or not function.__module__.startswith("mcp"):
                        continue
                    seen.add(id(function))
                    yield function


def _renamed_code(code: CodeType, old: str) -> CodeType:
    consts = tuple(
        _renamed_code(const, old) if isinstance(const, CodeType) else const
        for const in code.co_consts
    )
    names = tuple(NEW_NAME if name == old else name for name in code.co_names)
    if names == code.co_names and all(a is b for a, b in zip(consts, code.co_consts, strict=True)):
        return code
    return code.replace(co_names=names, co_consts=consts)


def rename(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Rename ``name`` throughout the SDK: its code uses the new name, every SDK module and
    class holding it holds it under the new name only (an instance attribute is set under the
    new name by the recompiled ``__init__``, so rename before connecting)."""
    for function in _sdk_functions():
        code = _renamed_code(function.__code__, name)
        if code is not function.__code__:
            monkeypatch.setattr(function, "__code__", code)
    for module in _sdk_modules():
        owners: list[Any] = [module]
        owners += [
            v
            for v in vars(module).values()
            if isinstance(v, type) and v.__module__.startswith("mcp")  # not anyio's, say
        ]
        for owner in owners:
            if name in vars(owner):
                value = vars(owner)[name]
                monkeypatch.delattr(owner, name)
                monkeypatch.setattr(owner, NEW_NAME, value, raising=False)


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture
def sdk() -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch for the SDK, undone before the seam checks again (so the next test, and
    the next test file, see the SDK whole)."""
    with pytest.MonkeyPatch.context() as patch:
        sdk_compat.recheck()
        yield patch
    sdk_compat.recheck()


@pytest.fixture(scope="module")
def legacy_python() -> Path:
    return ensure_legacy_venv()


@pytest.fixture
def legacy_server(legacy_python: Path, tmp_path: Path) -> Iterator[LegacyServerProcess]:
    effects = ["--effects-file", str(tmp_path / "effects.log")]
    with LegacyServerProcess(LEGACY_MODULE, python=legacy_python, args=effects) as server:
        yield server


@asynccontextmanager
async def requester_for(ledger: Ledger, url: str) -> AsyncIterator[TaskRequester]:
    # No pushed states: the task's end must come from polls.
    servers = [McpServerConfig(name="tasks", url=url, push_updates=False)]
    async with TaskRequester(ledger, servers, scheduler=FAST) as opened:
        yield opened


def _text(result: dict[str, object] | None) -> str:
    assert result is not None
    content = result["content"]
    assert isinstance(content, list)
    return str(content[0]["text"])


async def bridged_report(requester: TaskRequester, tenant: TenantLedger, quarter: str) -> str:
    """A task-augmented call of ``slow_report`` polled to its end; its text."""
    run = new_run(tenant)
    outcome = await requester.call_tool(
        PRINCIPAL, run.ref, "tasks", "slow_report", {"quarter": quarter, "seconds": 0.2}
    )
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED
    return _text(done.result)


def warnings_naming(caplog: pytest.LogCaptureFixture, part: str) -> int:
    return sum(
        1
        for record in caplog.records
        if record.name == SEAM_LOGGER
        and record.levelno == logging.WARNING
        and part in record.getMessage()
    )


def lean_stats(requester: TaskRequester) -> LeanGetStats:
    return requester.pool.connection("tasks").lean_get_stats


# -- everything present ---------------------------------------------------------------------------
async def test_with_every_part_present_the_fast_paths_are_taken(
    sdk: pytest.MonkeyPatch,
    wall_ledger: Ledger,
    tasks_server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=SEAM_LOGGER)
    paths = sdk_compat.fast_paths()
    assert paths == sdk_compat.FastPaths(
        lean_get=True, unchecked_send=True, session_hook=True, capability_hook=True
    )
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, tasks_server.url) as requester:
        assert await bridged_report(requester, tenant, "Q1") == "report Q1"
        stats = lean_stats(requester)
        assert stats.answered >= 1  # the polls went the lean way
        assert stats.sdk_path == 0 and stats.sdk_path_reason is None
        assert not stats.fallbacks
    assert sdk_compat.FALLBACKS.total() == 0 and not sdk_compat.FALLBACKS.reasons
    assert not [r for r in caplog.records if r.name == SEAM_LOGGER]


# -- the lean tasks/get's parts -------------------------------------------------------------------
LEAN_PARTS = [
    # (the name renamed, the part the seam reports missing, checked once per process?)
    ("_stamp", "ClientSession._stamp", False),
    ("_dispatcher", "ClientSession._dispatcher", False),
    ("_pending", "JSONRPCDispatcher._pending", False),
    ("_closed", "JSONRPCDispatcher._closed", False),
    ("_allocate_id", "JSONRPCDispatcher._allocate_id", True),
    ("_clamp_inbound_ttl", "mcp.client.session._clamp_inbound_ttl", True),
    ("otel_span", "mcp.shared._otel.otel_span", True),
    ("inject_trace_context", "mcp.shared._otel.inject_trace_context", True),
]


@pytest.mark.parametrize(
    ("name", "part", "per_process"), LEAN_PARTS, ids=[p[0] for p in LEAN_PARTS]
)
async def test_without_a_lean_get_part_polls_take_the_public_path(
    sdk: pytest.MonkeyPatch,
    wall_ledger: Ledger,
    tasks_server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
    name: str,
    part: str,
    per_process: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger=SEAM_LOGGER)
    rename(sdk, name)
    paths = sdk_compat.recheck()
    assert paths.lean_get is not per_process
    if per_process:
        assert paths.reason(sdk_compat.LEAN_GET) == part
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, tasks_server.url) as requester:
        # Two calls, each polled to its end: the warning stays one.
        assert await bridged_report(requester, tenant, "Q2") == "report Q2"
        assert await bridged_report(requester, tenant, "Q3") == "report Q3"
        stats = lean_stats(requester)
        assert stats.answered == 0
        assert stats.sdk_path >= 2 and stats.sdk_path_reason == part
    assert sdk_compat.FALLBACKS.lean_get == stats.sdk_path
    assert sdk_compat.FALLBACKS.reasons == {sdk_compat.LEAN_GET: part}
    assert warnings_naming(caplog, part) == 1


async def test_without_the_sdks_otel_module_polls_take_the_public_path(
    sdk: pytest.MonkeyPatch,
    wall_ledger: Ledger,
    tasks_server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=SEAM_LOGGER)
    sdk.setitem(sys.modules, "mcp.shared._otel", None)  # the module is gone: imports fail
    assert sdk_compat.recheck().reason(sdk_compat.LEAN_GET) == "mcp.shared._otel"
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, tasks_server.url) as requester:
        assert await bridged_report(requester, tenant, "Q4") == "report Q4"
        stats = lean_stats(requester)
        assert stats.answered == 0 and stats.sdk_path >= 1
    assert sdk_compat.FALLBACKS.lean_get == stats.sdk_path
    assert warnings_naming(caplog, "mcp.shared._otel") == 1


# -- the session hooks ----------------------------------------------------------------------------
HOOK_PARTS = [
    ("_build_session", "Client._build_session", sdk_compat.SESSION_HOOK),
    ("_build_capabilities", "ClientSession._build_capabilities", sdk_compat.CAPABILITY_HOOK),
]


@pytest.mark.parametrize(("name", "part", "path"), HOOK_PARTS, ids=[p[0] for p in HOOK_PARTS])
async def test_without_a_session_hook_part_the_client_connects_with_the_sdk_defaults(
    sdk: pytest.MonkeyPatch,
    wall_ledger: Ledger,
    tasks_server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
    name: str,
    part: str,
    path: str,
) -> None:
    caplog.set_level(logging.WARNING, logger=SEAM_LOGGER)
    rename(sdk, name)
    paths = sdk_compat.recheck()
    assert getattr(paths, path) is False and paths.reason(path) == part
    assert paths.lean_get  # the polls' own fast path is untouched
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, tasks_server.url) as requester:
        assert await bridged_report(requester, tenant, "Q1") == "report Q1"
        assert await bridged_report(requester, tenant, "Q2") == "report Q2"
        stats = lean_stats(requester)
        assert stats.answered >= 2 and stats.sdk_path == 0
    assert getattr(sdk_compat.FALLBACKS, path) >= 1  # one per session built
    assert sdk_compat.FALLBACKS.reasons == {path: part}
    assert warnings_naming(caplog, part) == 1


# -- the 2025-11-25 unchecked send ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "part"),
    [("_stamp", "ClientSession._stamp"), ("_dispatcher", "ClientSession._dispatcher")],
    ids=["_stamp", "_dispatcher"],
)
async def test_without_the_unchecked_send_a_legacy_task_call_still_becomes_a_task(
    sdk: pytest.MonkeyPatch,
    wall_ledger: Ledger,
    legacy_server: LegacyServerProcess,
    caplog: pytest.LogCaptureFixture,
    name: str,
    part: str,
) -> None:
    caplog.set_level(logging.WARNING, logger=SEAM_LOGGER)
    rename(sdk, name)
    sdk_compat.recheck()
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, legacy_server.url) as requester:
        assert await bridged_report(requester, tenant, "Q3") == "report Q3"
        assert await bridged_report(requester, tenant, "Q4") == "report Q4"
    assert sdk_compat.FALLBACKS.unchecked_send == 2
    assert sdk_compat.FALLBACKS.reasons == {sdk_compat.UNCHECKED_SEND: part}
    assert warnings_naming(caplog, part) == 1


async def test_with_every_part_present_a_legacy_task_call_takes_the_unchecked_send(
    sdk: pytest.MonkeyPatch, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    async with requester_for(wall_ledger, legacy_server.url) as requester:
        assert await bridged_report(requester, tenant, "Q1") == "report Q1"
    assert sdk_compat.FALLBACKS.total() == 0
