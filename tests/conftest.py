"""Shared fixtures: ledgers on both backends (SQLite file, throwaway PostgreSQL 15)."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge._ledger.store import Ledger
from tests.support.compat import record_outcome
from tests.support.example_servers import example_servers
from tests.support.gateway import UPSTREAM_TOKEN, Gateway, running_gateway
from tests.support.postgres import ThrowawayPostgres, fresh_database
from tests.support.processes import ServerProcess, server_logs_under
from tests.support.scheduling import rank

BACKENDS = ["sqlite", "postgresql"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A ``@compat`` test's outcome is kept for ``docs/compatibility.md``'s table."""
    report = yield
    record_outcome(item, report)
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest units of work first (a stable sort: the rest keep their order)."""
    items.sort(key=lambda item: rank(item.path.name, getattr(item, "originalname", item.name)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the long tests of some files run side by side
    (tests/support/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.support.scheduling import SplitFileScheduling

    return SplitFileScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def server_logs_in_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test server's log folder under pytest's temporary folder: kept for the last few
    sessions (a failure's logs stay readable), pruned after, never left in /tmp."""
    with server_logs_under(tmp_path_factory.getbasetemp() / "server-logs") as folder:
        yield folder


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """URL of a PostgreSQL server: ``BRIDGE_TEST_PG_URL`` or one started for this session."""
    given = os.environ.get("BRIDGE_TEST_PG_URL")
    if given:
        yield given
        return
    try:
        server = ThrowawayPostgres()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))
    server.start()
    try:
        yield server.url()
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database URL, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    with fresh_database(admin) as url:
        yield url


class FakeClock:
    """Injected clock in epoch milliseconds: tests move time explicitly, never sleep."""

    def __init__(self, start_ms: int = 1_790_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(db_url: str, clock: FakeClock) -> Iterator[Ledger]:
    opened = Ledger.open(db_url, clock=clock, max_outcome_bytes=4096)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def sqlite_ledger(tmp_path: Path, clock: FakeClock) -> Iterator[Ledger]:
    opened = Ledger.open(tmp_path / "ledger.db", clock=clock)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def pg_ledger(postgres_admin_url: str, clock: FakeClock) -> Iterator[Ledger]:
    with fresh_database(postgres_admin_url) as url:
        opened = Ledger.open(url, clock=clock)
        try:
            yield opened
        finally:
            opened.close()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def server_with_effects(
    module: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A test server started with an effects file of its own (``server.effects_path``)."""
    effects = tmp_path_factory.mktemp("effects") / "effects.log"
    server = ServerProcess(module, args=["--effects-file", str(effects)])
    server.effects_path = effects  # type: ignore[attr-defined]
    with server:
        yield server


@pytest.fixture(scope="module")
def tasks_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The real Tasks server (FastMCP + fastmcp-tasks) as a subprocess on 127.0.0.1."""
    yield from server_with_effects("tests.servers.tasks_server", tmp_path_factory)


@pytest.fixture(scope="module")
def adversarial_server() -> Iterator[ServerProcess]:
    """The in-repo adversarial fake (malformed and contradictory wire behaviour)."""
    with ServerProcess("tests.servers.adversarial_server") as server:
        yield server


@pytest.fixture
def wall_ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A SQLite ledger on the wall clock, for tests where real servers set the pace."""
    opened = Ledger.open(tmp_path / "ledger.db")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def wall_pg_ledger(postgres_admin_url: str) -> Iterator[Ledger]:
    """A PostgreSQL ledger on the wall clock (writes from async code go to worker threads)."""
    with fresh_database(postgres_admin_url) as url:
        opened = Ledger.open(url)
        try:
            yield opened
        finally:
            opened.close()


@pytest.fixture(scope="session")
def span_exporter() -> Iterator[Any]:
    """One in-memory span exporter behind the global tracer provider (set once per process)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    exporter.clear()


@pytest.fixture(scope="module")
def gateway_upstreams(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    """The example servers behind the gateway tests: one pair per test file (starting them
    took about half of each gateway test's set-up)."""
    payments_db = tmp_path_factory.mktemp("upstreams") / "payments.db"
    with example_servers(payments_db, UPSTREAM_TOKEN) as upstreams:
        yield upstreams


@pytest.fixture
def gateway(tmp_path: Path, gateway_upstreams: dict[str, ServerProcess]) -> Iterator[Gateway]:
    """``bridge gateway`` as a subprocess with a new ledger, in front of the file's upstreams."""
    with running_gateway(tmp_path, gateway_upstreams) as gw:
        yield gw
