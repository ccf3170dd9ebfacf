"""The UHP client against a real UHP server over HTTP on 127.0.0.1 (a Starlette test server
with fault injection): stream cuts, sequence faults, stalls, resume, idempotent retries."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from bridge import events as ev
from bridge._config import FollowConfig, RetryPolicy
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge.uhp._client import UhpClient
from bridge.uhp._errors import (
    UhpAuthError,
    UhpInvalidRequest,
    UhpNotFound,
    UhpQuotaExhausted,
)
from bridge.uhp._models import StreamEvent
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
TOKEN = "test-token"
HARNESS = "chrn_test"


def _base(server: ServerProcess) -> str:
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def uhp_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.uhp_server") as server:
        yield server


@pytest.fixture(scope="module")
def uhp_server_no_resume() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.uhp_server", args=["--no-last-event-id"]) as server:
        yield server


FAST = FollowConfig(inactivity_timeout_s=5.0, reread_interval_s=0.05, checkpoint_interval_ms=0)


async def _nosleep(_seconds: float) -> None:
    return None


@pytest.fixture
async def client(wall_ledger: Ledger, uhp_server: ServerProcess) -> AsyncIterator[UhpClient]:
    async with UhpClient(
        _base(uhp_server), token=TOKEN, ledger=wall_ledger, principal="acme", follow=FAST
    ) as opened:
        await opened.discover()
        yield opened


def _text(events: list[StreamEvent]) -> str:
    return "".join(str((e.model_extra or {}).get("delta", "")) for e in events)


def _seqs(events: list[StreamEvent]) -> list[int]:
    return [e.sequence_number for e in events if e.sequence_number is not None]


def _types(ledger: Ledger, run_ref: str) -> list[str]:
    return [e.type for e in ledger.for_principal("acme").reads.events(run_ref)]


def _anomaly_kinds(ledger: Ledger, run_ref: str) -> list[str]:
    return [
        e.kind
        for e in ledger.for_principal("acme").reads.events(run_ref)
        if isinstance(e, ev.Anomaly)
    ]


async def _collect(follower: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in follower]


async def test_discovery_and_typed_request_errors(
    wall_ledger: Ledger, uhp_server: ServerProcess
) -> None:
    async with UhpClient(
        _base(uhp_server), token="wrong", ledger=wall_ledger, principal="acme"
    ) as bad:
        discovery = await bad.discover()  # no credential needed
        assert discovery.protocol == "uhp" and bad.version in discovery.versions
        with pytest.raises(UhpAuthError) as raised:
            await bad.harnesses()
        assert raised.value.status == 401 and raised.value.code == "invalid_credential"
    async with UhpClient(_base(uhp_server), token=TOKEN, ledger=wall_ledger, principal="a") as ok:
        with pytest.raises(UhpNotFound) as missing:
            await ok.get_response("resp_does_not_exist")
        assert missing.value.code == "response_not_found"


async def test_streamed_run_is_recorded_in_order(client: UhpClient, wall_ledger: Ledger) -> None:
    follower = await client.stream_response("words=4 delay_ms=5", harness_id=HARNESS)
    events = await _collect(follower)
    assert _seqs(events) == list(range(len(events)))
    assert events[-1].type == "response.completed" and _text(events) == "w0 w1 w2 w3 "
    run = wall_ledger.for_principal("acme").reads.get_run(follower.run_ref)
    assert run.status is OuterStatus.COMPLETED and run.response_id == follower.response_id
    assert run.session_id and run.session_id.startswith("hsess")
    assert run.last_sequence == events[-1].sequence_number and run.idempotency_key


async def test_stream_cut_by_the_server_resumes_with_last_event_id(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=8 delay_ms=5 cut_after=5", harness_id=HARNESS)
    events = await _collect(follower)
    assert _seqs(events) == list(range(len(events)))  # nothing twice, nothing missing
    assert _text(events) == "w0 w1 w2 w3 w4 w5 w6 w7 "
    types = _types(wall_ledger, follower.run_ref)
    assert "outer.stream_lost" in types
    resumed = [
        e
        for e in wall_ledger.for_principal("acme").reads.events(follower.run_ref)
        if isinstance(e, ev.OuterResumed)
    ]
    assert [r.mode for r in resumed] == ["last_event_id"] and resumed[0].after_sequence == 4


async def test_stream_cut_by_the_client_resumes_exactly_after_the_last_event(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=10 delay_ms=5", harness_id=HARNESS)
    first: list[StreamEvent] = []
    async with follower:
        async for event in follower:
            first.append(event)
            if len(first) == 6:
                break  # the consumer hangs up mid-stream
    again = await client.follow(follower.run_ref)
    rest = await _collect(again)
    assert _seqs(first + rest) == list(range(len(first) + len(rest)))
    assert rest[-1].type == "response.completed"


async def test_missing_sequence_number_is_reported_and_never_rendered(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response(
        "words=6 delay_ms=5 missing_seq_at=5", harness_id=HARNESS
    )
    events = await _collect(follower)
    assert all(e.sequence_number is not None for e in events if not e.synthetic)
    assert events[-1].is_terminal and events[-1].response is not None
    assert events[-1].response.output_text() == "w0 w1 w2 w3 w4 w5 "  # from the stored response
    assert "missing_sequence" in _anomaly_kinds(wall_ledger, follower.run_ref)
    run = wall_ledger.for_principal("acme").reads.get_run(follower.run_ref)
    assert run.status is OuterStatus.COMPLETED


async def test_sequence_gap_is_detected_not_rendered(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=6 delay_ms=5 skip_seq=5", harness_id=HARNESS)
    events = await _collect(follower)
    received = _seqs(events)
    assert received == list(range(len(received))) and 5 not in received  # stops before the gap
    assert events[-1].synthetic and events[-1].response is not None
    assert events[-1].response.status == "completed"
    assert "sequence_gap" in _anomaly_kinds(wall_ledger, follower.run_ref)


async def test_malformed_frame_is_an_explicit_anomaly(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=4 delay_ms=5 malformed_at=3", harness_id=HARNESS)
    events = await _collect(follower)
    assert events[-1].is_terminal
    assert "malformed_frame" in _anomaly_kinds(wall_ledger, follower.run_ref)
    assert wall_ledger.for_principal("acme").reads.get_run(follower.run_ref).status is (
        OuterStatus.COMPLETED
    )


async def test_duplicated_terminal_event_is_delivered_once(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=3 delay_ms=5 dup_terminal", harness_id=HARNESS)
    events = await _collect(follower)
    assert [e.is_terminal for e in events].count(True) == 1 and events[-1].is_terminal
    assert _types(wall_ledger, follower.run_ref).count("outer.terminal") == 1


async def test_keep_alive_comments_feed_the_inactivity_timeout(
    wall_ledger: Ledger, uhp_server: ServerProcess
) -> None:
    short = FollowConfig(inactivity_timeout_s=1.0, reread_interval_s=0.05)
    async with UhpClient(
        _base(uhp_server), token=TOKEN, ledger=wall_ledger, principal="acme", follow=short
    ) as quick:
        follower = await quick.stream_response("words=2 silence_ms=2500", harness_id=HARNESS)
        events = await _collect(follower)
    assert events[-1].type == "response.completed" and not events[-1].synthetic
    assert "outer.stream_lost" not in _types(wall_ledger, follower.run_ref)


async def test_resume_without_last_event_id_rereads_the_response(
    wall_ledger: Ledger, uhp_server_no_resume: ServerProcess
) -> None:
    async with UhpClient(
        _base(uhp_server_no_resume),
        token=TOKEN,
        ledger=wall_ledger,
        principal="acme",
        follow=FAST,
    ) as plain:
        follower = await plain.stream_response(
            "words=6 delay_ms=20 cut_after=4", harness_id=HARNESS
        )
        events = await _collect(follower)
    assert events[-1].synthetic and events[-1].response is not None
    assert events[-1].response.output_text() == "w0 w1 w2 w3 w4 w5 "
    resumed = [
        e
        for e in wall_ledger.for_principal("acme").reads.events(follower.run_ref)
        if isinstance(e, ev.OuterResumed)
    ]
    assert [r.mode for r in resumed] == ["reread"]
    run = wall_ledger.for_principal("acme").reads.get_run(follower.run_ref)
    assert run.status is OuterStatus.COMPLETED


async def test_retry_after_a_timeout_reuses_the_idempotency_key(
    wall_ledger: Ledger, uhp_server: ServerProcess
) -> None:
    impatient = FollowConfig(inactivity_timeout_s=0.3, blocking_timeout_s=0.3)
    async with UhpClient(
        _base(uhp_server),
        token=TOKEN,
        ledger=wall_ledger,
        principal="acme",
        follow=impatient,
        retry=RetryPolicy(base_delay_s=0.05),
        sleep=_nosleep,
    ) as hasty:
        created = await hasty.create_response(
            "words=1 delay_ms=1 slow_post_ms=800", harness_id=HARNESS, background=True
        )
    key = wall_ledger.for_principal("acme").reads.get_run(created.run_ref).idempotency_key
    async with httpx.AsyncClient() as plain:
        stats = (await plain.get(f"{_base(uhp_server)}/_test/stats")).json()
    assert stats["executions"][key] == 1  # the retry did not start a second task
    assert len(wall_ledger.for_principal("acme").reads.list_runs()) == 1
    assert created.response.id.startswith("resp_")


async def test_cancel_is_observed_as_cancelled_not_failed(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    follower = await client.stream_response("words=200 delay_ms=20", harness_id=HARNESS)
    events: list[StreamEvent] = []
    async for event in follower:
        events.append(event)
        if len(events) == 5:
            assert follower.response_id is not None
            await client.cancel_response(follower.response_id)
    terminal = events[-1]
    assert terminal.type == "response.failed" and terminal.response is not None
    assert terminal.response.status == "cancelled"
    run = wall_ledger.for_principal("acme").reads.get_run(follower.run_ref)
    assert run.status is OuterStatus.CANCELLED


async def test_session_continuation_and_busy_session(
    client: UhpClient, wall_ledger: Ledger
) -> None:
    first = await client.create_response("words=1 delay_ms=1", harness_id=HARNESS)
    second = await client.create_response(
        "words=1 delay_ms=1", harness_id=HARNESS, previous_response_id=first.response.id
    )
    assert second.response.session_id == first.response.session_id
    tenant = wall_ledger.for_principal("acme")
    assert tenant.reads.get_run(second.run_ref).session_id == first.response.session_id
    running = await client.create_response(
        "words=50 delay_ms=20",
        harness_id=HARNESS,
        background=True,
        previous_response_id=second.response.id,
    )
    # session_busy is retried until the in-flight task ends, then succeeds.
    third = await client.create_response(
        "words=1 delay_ms=1", harness_id=HARNESS, previous_response_id=running.response.id
    )
    assert third.response.status == "completed"
    with pytest.raises(UhpInvalidRequest):
        await client.create_response(
            "words=1", harness_id=HARNESS, previous_response_id="resp_unknown"
        )


async def test_standard_client_reads_a_stream_with_bridge_events(
    uhp_server: ServerProcess,
) -> None:
    import harnessrouter

    def collect() -> tuple[str, list[str]]:
        router = harnessrouter.connect(_base(uhp_server), TOKEN)
        task = router.collect("words=3 delay_ms=5 vendor_events", harness_id=HARNESS)
        return task.text, [e["type"] for e in task.events]

    text, types = await anyio.to_thread.run_sync(collect)
    assert text == "w0 w1 w2 "
    assert "bridge.mcp_task.created" in types and "bridge.mcp_task.completed" in types
    assert types[-1] == "response.completed"


async def test_vendor_events_pass_through_the_bridge_client(
    client: UhpClient,
) -> None:
    follower = await client.stream_response("words=2 delay_ms=5 vendor_events", harness_id=HARNESS)
    events = await _collect(follower)
    vendor = [e for e in events if e.type.startswith("bridge.")]
    assert [e.type for e in vendor] == ["bridge.mcp_task.created", "bridge.mcp_task.completed"]
    extra = vendor[0].model_extra or {}
    assert extra["task_ref"] == "tk_scripted" and "task_id" not in json.dumps(extra)


@pytest.mark.e2e
async def test_sigkilled_follower_is_resumed_by_a_new_process(
    tmp_path: Path, uhp_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    Ledger.open(db).close()
    died = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.uhp_driver",
            "--db",
            str(db),
            "--base-url",
            _base(uhp_server),
            "--input",
            "words=12 delay_ms=30",
            "--kill-after",
            "7",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    lines = died.stdout.split()
    run_ref, delivered = lines[0], [int(n) for n in lines[1:]]
    assert delivered == list(range(7))

    ledger = Ledger.open(db)
    async with UhpClient(
        _base(uhp_server), token=TOKEN, ledger=ledger, principal="acme", follow=FAST
    ) as client:
        follower = await client.follow(run_ref)
        rest = await _collect(follower)
    assert _seqs(rest)[0] == 7  # resumed exactly after what the dead process delivered
    assert rest[-1].type == "response.completed" and rest[-1].response is not None
    assert rest[-1].response.output_text() == "".join(f"w{n} " for n in range(12))
    run = ledger.for_principal("acme").reads.get_run(run_ref)
    assert run.status is OuterStatus.COMPLETED and run.last_sequence == rest[-1].sequence_number
    ledger.close()


async def _attempts(server: ServerProcess, key: str | None) -> int:
    async with httpx.AsyncClient() as plain:
        stats = (await plain.get(f"{_base(server)}/_test/stats")).json()
    return int(stats["post_attempts"][key])


@pytest.mark.parametrize(
    ("directives", "attempts"),
    [
        ("reject_status=429 reject_times=2 retry_after_ms=150", 3),  # after Retry-After
        ("reject_status=503 reject_times=2", 3),  # server error: backoff and jitter
    ],
)
async def test_retryable_rejections_are_retried_with_the_same_key(
    wall_ledger: Ledger, uhp_server: ServerProcess, directives: str, attempts: int
) -> None:
    async with UhpClient(
        _base(uhp_server),
        token=TOKEN,
        ledger=wall_ledger,
        principal="acme",
        retry=RetryPolicy(base_delay_s=0.05),
    ) as retrying:
        started = anyio.current_time()
        created = await retrying.create_response(f"words=1 {directives}", harness_id=HARNESS)
        elapsed = anyio.current_time() - started
    assert created.response.status == "completed"
    key = wall_ledger.for_principal("acme").reads.get_run(created.run_ref).idempotency_key
    assert await _attempts(uhp_server, key) == attempts
    if "retry_after_ms=150" in directives:
        assert elapsed >= 0.3  # two waits of Retry-After


@pytest.mark.parametrize(
    ("directives", "error"),
    [
        ("reject_status=429 quota reject_times=5", UhpQuotaExhausted),
        ("reject_status=400 reject_times=5", UhpInvalidRequest),
    ],
)
async def test_final_rejections_are_not_retried(
    wall_ledger: Ledger, uhp_server: ServerProcess, directives: str, error: type[Exception]
) -> None:
    async with UhpClient(
        _base(uhp_server),
        token=TOKEN,
        ledger=wall_ledger,
        principal="acme",
        retry=RetryPolicy(base_delay_s=0.05),
    ) as retrying:
        with pytest.raises(error):
            await retrying.create_response(f"words=1 {directives}", harness_id=HARNESS)
    (run,) = wall_ledger.for_principal("acme").reads.list_runs()
    assert run.response_id is None  # registered before the POST; no response was created
    assert await _attempts(uhp_server, run.idempotency_key) == 1
