"""The report harness under hostile input and store faults (issue 14, UHP-serving side).

Real server processes over loopback, a real SQLite file, and for the fault cases a real full
disk (a small tmpfs, mounted here when the test runs as root). Every case asserts an answer
within a deadline, an outcome in the UHP envelope or a terminal state that reads back the same
after a restart, and that what was stored before is still there, unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bridge._ledger.commit.driver_sessions import Cursor
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge.uhp.serving import new_message_item, new_response, new_text_part
from harness_examples.port_report import listening_socket, uvicorn_server
from harness_examples.report_harness.config import parse_config
from harness_examples.report_harness.server import create_app
from harness_examples.report_harness.store import TERMINAL, HarnessStore
from harness_examples.report_harness.writes import StoreWrite
from tests.support.processes import ServerProcess

TOKEN = "hardening-token"
SECRET = "query-secret-token-4242"
DEADLINE_S = 15.0
BODY_LIMIT = 64 * 1024


def _config(**extra: Any) -> dict[str, Any]:
    return {
        "harnesses": [{"id": "chrn_plain", "base": "scripted", "model": "scripted-1"}],
        "tokens": [TOKEN],
        "think_seconds": 0,
        "pace_seconds": 0,
        "count_interval_seconds": 0.05,
        "keepalive_seconds": 0.1,
        "max_body_bytes": BODY_LIMIT,
        **extra,
    }


def _start(folder: Path, db: Path, **extra: Any) -> ServerProcess:
    config = folder / "harness.json"
    config.write_text(json.dumps(_config(**extra)))
    server = ServerProcess(
        "harness_examples.report_harness", args=["--config", str(config), "--db", str(db)]
    )
    return server.start(timeout=30)


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{server.port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=DEADLINE_S,
    )


def _completed_run(c: httpx.Client, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """POST a blocking run that must complete; its body and its tool-call outputs, parsed."""
    answer = c.post("/v1/responses", json={"input": text})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "completed"
    outputs = [
        json.loads(item["output"])
        for item in body["output"]
        if item["type"] == "function_call_output"
    ]
    return body, outputs


def _envelope(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    assert set(body) == {"error"} and {"type", "code", "message"} <= set(body["error"])
    error: dict[str, Any] = body["error"]
    return error


def _events(answer: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in answer.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("hardening")
    proc = _start(folder, folder / "harness.db")
    try:
        yield proc
    finally:
        proc.stop()


# --------------------------------------------------------------------------- at the door
def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"d": value}
    return value


HOSTILE_POSTS: dict[str, tuple[bytes, int, str]] = {
    "NaN": (b'{"input": "hi", "metadata": {"x": NaN}}', 400, "invalid_json"),
    "Infinity": (b'{"input": "hi", "max_step": Infinity}', 400, "invalid_json"),
    "timeout 1e400": (b'{"input": "hi", "timeout_seconds": 1e400}', 400, "invalid_json"),
    "timeout 1.5": (b'{"input": "hi", "timeout_seconds": 1.5}', 400, "invalid_value"),
    "timeout 10**30": (
        b'{"input": "hi", "timeout_seconds": 1' + b"0" * 30 + b"}",
        400,
        "invalid_value",
    ),
    "lone surrogate": (b'{"input": "\\udc00"}', 400, "invalid_json"),
    "metadata 600 deep": (
        json.dumps({"input": "hi", "metadata": _deep(600)}).encode(),
        400,
        "invalid_json",
    ),
    "over the body limit": (
        json.dumps({"input": "x" * BODY_LIMIT}).encode(),
        413,
        "request_too_large",
    ),
}


def test_hostile_requests_are_refused_before_anything_runs(server: ServerProcess) -> None:
    with _client(server) as c:
        kept = c.post("/v1/responses", json={"input": "reply with the word kiwi"}).json()
        for name, (body, status, code) in HOSTILE_POSTS.items():
            answer = c.post("/v1/responses", content=body, headers={"Idempotency-Key": name})
            assert answer.status_code == status, (name, answer.text)
            assert _envelope(answer)["code"] == code, name
            # Nothing ran and nothing was recorded under the key: a sound body now runs.
            fresh = c.post("/v1/responses", json={"input": "hi"}, headers={"Idempotency-Key": name})
            assert fresh.status_code == 200 and fresh.json()["status"] == "completed", name
        for value in (str(2**63), "12abc", "-5"):
            answer = c.get(
                f"/v1/responses/{kept['id']}?stream=true", headers={"Last-Event-ID": value}
            )
            assert answer.status_code == 400 and _envelope(answer)["param"] == "Last-Event-ID"
        assert c.get(f"/v1/responses/{kept['id']}").json() == kept


def test_a_reused_idempotency_key_with_another_body_is_a_422(server: ServerProcess) -> None:
    with _client(server) as c:
        first = c.post("/v1/responses", json={"input": "hi"}, headers={"Idempotency-Key": "k"})
        other = c.post("/v1/responses", json={"input": "ho"}, headers={"Idempotency-Key": "k"})
        assert other.status_code == 422 and _envelope(other)["code"] == "idempotency_key_reused"
        assert c.get(f"/v1/responses/{first.json()['id']}").json() == first.json()


def test_a_token_in_a_query_string_never_reaches_the_access_log(server: ServerProcess) -> None:
    with _client(server) as c:
        c.get(f"/v1/uhp?access_token={SECRET}")
        c.get(f"/v1/responses/resp_nothing?token={SECRET}&stream=true")
    log = server.log_path.read_text(errors="replace")
    assert "/v1/uhp?<query redacted>" in log  # the access log is on, and scrubbed
    assert SECRET not in log


# --------------------------------------------------------------------------- streaming cost
class MeasuredStore(HarnessStore):
    """The real store, recording how many bytes each event's append writes (the snapshot of a
    step's events counted with the last of them, the one it was taken after) and how many
    transactions commit them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: list[tuple[str, int]] = []
        self.appends = self.transactions = 0

    def appending(
        self, response_id: str, first_seq: int, events: Sequence[tuple[str, str]],
        body_json: str | None, status: str, **kw: Any,
    ) -> StoreWrite:  # fmt: skip
        self.appends += 1
        for n, (event_type, event_json) in enumerate(events, start=1):
            snapshot = len(body_json or "") if n == len(events) else 0
            self.written.append((event_type, len(event_json) + snapshot))
        return super().appending(response_id, first_seq, events, body_json, status, **kw)

    def transaction(self) -> AbstractContextManager[Cursor]:
        self.transactions += 1
        return super().transaction()


@pytest.mark.anyio
@pytest.mark.parametrize("pace", [0, 0.001], ids=["one-step", "word-by-word"])
async def test_a_streamed_word_costs_the_same_however_long_the_answer(
    tmp_path: Path, pace: float
) -> None:
    url = f"sqlite:///{tmp_path / 'measured.db'}"
    store = MeasuredStore(HarnessStore.open(url).engine)
    words = [f"word{n:05d}" for n in range(1500)]

    async def ask(http: httpx.AsyncClient) -> httpx.Response:
        return await http.post(
            "/v1/responses", json={"input": "reply with exactly: " + " ".join(words)}
        )

    answer = await _serve_once(store, url, ask, pace_seconds=pace)
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    deltas = [size for kind, size in store.written if kind == "response.output_text.delta"]
    assert len(deltas) == len(words)
    # The answer is ~15 KB by the end; a delta that rewrote the response would grow with it.
    assert max(deltas) < 400 and max(deltas) - min(deltas) < 50
    # Paced, every word is stored (and streamed) when it is said; unpaced, the message is one
    # step's events: opening, the message and the terminal event.
    assert store.appends == (len(words) + 3 if pace else 3)
    # One transaction each, and one linking the response to its bridge run: a lone response
    # has no other run's writes to share a transaction with.
    assert store.transactions == store.appends + 1


class TerminalWritesFail(HarnessStore):
    """The real store, refusing every terminal write (as a disk that fills at that moment)."""

    def appending(
        self, response_id: str, first_seq: int, events: Sequence[tuple[str, str]],
        body_json: str | None, status: str, **kw: Any,
    ) -> StoreWrite:  # fmt: skip
        write = super().appending(response_id, first_seq, events, body_json, status, **kw)
        if status not in TERMINAL:
            return write

        def refused(cursor: Cursor) -> None:
            raise OSError("no space left on device")

        return refused


async def _serve_once(store: HarnessStore, url: str, action: Any, **config: Any) -> Any:
    """The harness in process on ``store`` for one ``action(http)``, then shut down."""
    app = create_app(parse_config(_config(**config)), url, store)
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn_server(app, sock, None, log_level="warning")
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        with anyio.fail_after(60):
            while not server.started:
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{sock.getsockname()[1]}",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=60,
            ) as http:
                return await action(http)
    finally:
        server.should_exit = True
        await serving


@pytest.mark.anyio
async def test_a_run_the_bridge_saw_end_is_settled_as_recorded_after_a_restart(
    tmp_path: Path,
) -> None:
    """The bridge's ledger recorded the run's end, then the harness's own terminal write gave
    up: after a restart the run is settled as the ledger recorded it, not executed again."""
    url = f"sqlite:///{tmp_path / 'split.db'}"

    async def start(http: httpx.AsyncClient) -> httpx.Response:
        return await http.post("/v1/responses", json={"input": "reply with the word fig"})

    failing = TerminalWritesFail(HarnessStore.open(url).engine)
    given_up = await _serve_once(failing, url, start, terminal_write_seconds=0.3)
    # Accepted, in progress: the store holds nothing more, and this process, stopped while
    # it retried the write, leaves the run to the next start.
    assert given_up.status_code == 202, given_up.text
    assert given_up.json()["status"] == "in_progress"
    (row,) = failing.in_progress()
    bridge_run = Ledger.open(url).for_principal(row.principal).reads.get_run(row.bridge_run_ref)
    assert bridge_run.status is OuterStatus.COMPLETED  # the bridge saw the end first

    async def read(http: httpx.AsyncClient) -> tuple[dict[str, Any], list[str]]:
        with anyio.fail_after(DEADLINE_S):
            while (body := (await http.get(f"/v1/responses/{row.id}")).json())[
                "status"
            ] == "in_progress":
                await asyncio.sleep(0.05)
        async with http.stream("GET", f"/v1/responses/{row.id}?stream=true") as answer:
            types = [json.loads(line[5:])["type"] async for line in answer.aiter_lines()
                     if line.startswith("data:")]  # fmt: skip
        return body, types

    final, types = await _serve_once(HarnessStore.open(url), url, read)
    assert final["status"] == "completed"
    assert types.count("response.completed") == 1
    assert not any(t.endswith(".resumed") for t in types), "settled, not executed again"


def _stored_message(tmp_path: Path, response_id: str) -> tuple[HarnessStore, dict[str, Any]]:
    """A store holding one new response, and its body with one (empty) message item that the
    store has not seen yet."""
    store = HarnessStore.open(f"sqlite:///{tmp_path / (response_id + '.db')}")
    body = new_response(
        response_id, model="m", metadata={"session_id": "hsess_f", "harness_id": "h"},
        previous_response_id=None,
    )  # fmt: skip
    store.create(
        principal="p", body=body, input_items=[], request={}, idempotency_key=None,
        fingerprint="f",
    )  # fmt: skip
    item = new_message_item()
    item["content"].append(new_text_part())
    body["output"].append(item)
    return store, body


def test_a_steps_events_go_with_the_snapshot_their_last_one_produced(tmp_path: Path) -> None:
    """A snapshot taken after a trailing delta would have that delta folded in twice on read;
    a step ending in a non-delta without one would leave reads a snapshot behind."""
    store, body = _stored_message(tmp_path, "resp_steps")
    where = {"output_index": 0, "content_index": 0}
    done = ("response.output_item.done", "{}")
    delta_type = "response.output_text.delta"
    delta = (delta_type, json.dumps({"type": delta_type, "delta": "a", **where}))
    snapshot = json.dumps(body)
    for events, body_json in [
        ([done, delta], snapshot),  # ends in a delta, with a snapshot
        ([done, delta], None),  # a non-delta without its snapshot
        ([done], None),
        ([delta], snapshot),
        ([], snapshot),
    ]:
        with pytest.raises(ValueError):
            store.appending("resp_steps", 0, events, body_json, "in_progress")
    assert store.events_after("resp_steps", -1) == []
    store.commit_all(
        [store.appending("resp_steps", 0, [delta, delta, done], snapshot, "in_progress")]
    )
    store.commit_all([store.appending("resp_steps", 3, [delta, delta], None, "in_progress")])
    assert [seq for seq, _, _ in store.events_after("resp_steps", -1)] == [0, 1, 2, 3, 4]
    stored = store.get("resp_steps")  # the snapshot (no text) and the two deltas after it
    assert stored is not None and stored.next_seq == 5
    assert stored.body["output"][0]["content"][0]["text"] == "aa"
    store.close()


def test_a_read_between_snapshots_folds_in_the_streamed_deltas(tmp_path: Path) -> None:
    store, body = _stored_message(tmp_path, "resp_fold")
    item = body["output"][0]
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    added = {"type": "response.content_part.added", "sequence_number": 0, **where}
    store.append("resp_fold", 0, added["type"], json.dumps(added), json.dumps(body), "in_progress")
    for seq, word in enumerate(["one ", "two ", "three"], start=1):
        delta = {"type": "response.output_text.delta", "sequence_number": seq, "delta": word}
        store.append(
            "resp_fold", seq, delta["type"], json.dumps({**delta, **where}), None, "in_progress"
        )
    stored = store.get("resp_fold")
    assert stored is not None and stored.next_seq == 4
    assert stored.body["output"][0]["content"][0]["text"] == "one two three"
    store.close()


# --------------------------------------------------------------------------- store faults
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MB tmpfs, or a skip where mounting is not permitted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; the filler file is returned (delete it to free)."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (65536, 1):  # big blocks, then the last bytes one by one
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    return filler


def _stream_to_the_end(c: httpx.Client, text: str, on_delta: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE_S * 2
    with c.stream("POST", "/v1/responses", json={"input": text, "stream": True}) as answer:
        assert answer.status_code == 200
        for event in _events(answer):
            assert time.monotonic() < deadline, "the stream did not end"
            events.append(event)
            if event["type"] == "response.output_text.delta":
                on_delta(event)
    return events


@pytest.mark.e2e
def test_a_full_disk_at_the_terminal_write_still_ends_the_response(
    tmp_path: Path, small_disk: Path
) -> None:
    server = _start(tmp_path, small_disk / "harness.db")
    try:
        with _client(server) as c:
            kept = c.post("/v1/responses", json={"input": "reply with the word fig"}).json()
            filled, freed = threading.Event(), threading.Event()

            def fill_once(event: dict[str, Any]) -> None:
                if event["delta"] == "3\n" and not filled.is_set():
                    filled.set()
                    filler = _fill(small_disk)
                    threading.Timer(1.5, lambda: (filler.unlink(), freed.set())).start()

            events = _stream_to_the_end(c, "count slowly to 30", fill_once)
            assert freed.wait(DEADLINE_S)
            final = events[-1]
            assert final["type"] == "response.failed", [e["type"] for e in events[-3:]]
            assert final["response"]["status"] == "failed"
            assert c.get(f"/v1/responses/{final['response']['id']}").json() == final["response"]
        server.restart(timeout=30)
        with _client(server) as c:
            assert c.get(f"/v1/responses/{final['response']['id']}").json() == final["response"]
            assert c.get(f"/v1/responses/{kept['id']}").json() == kept
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_store_read_only_for_seconds_still_ends_the_response(tmp_path: Path) -> None:
    """The database files turn read-only (``chattr +i``, which binds root too) mid-stream for
    2 s: the failed writes end the run, its terminal write is retried until the files are
    writable again, and the stored terminal state is what the client saw, across a restart."""
    chattr = shutil.which("chattr")
    server = _start(tmp_path, tmp_path / "harness.db")
    files = [str(p) for p in sorted(tmp_path.glob("harness.db*"))]
    if chattr is None or subprocess.run([chattr, "+i", *files], check=False).returncode:
        server.stop()
        pytest.skip("chattr +i is not available here (needs CAP_LINUX_IMMUTABLE)")
    subprocess.run([chattr, "-i", *files], check=True)
    try:
        with _client(server) as c:
            kept = c.post("/v1/responses", json={"input": "reply with the word fig"}).json()
            made_read_only, writable = threading.Event(), threading.Event()

            def read_only_once(event: dict[str, Any]) -> None:
                if event["delta"] == "3\n" and not made_read_only.is_set():
                    made_read_only.set()
                    subprocess.run([chattr, "+i", *files], check=True)

                    def restore() -> None:
                        subprocess.run([chattr, "-i", *files], check=True)
                        writable.set()

                    threading.Timer(2.0, restore).start()

            events = _stream_to_the_end(c, "count slowly to 30", read_only_once)
            assert writable.wait(DEADLINE_S)
            final = events[-1]
            assert final["type"] == "response.failed", [e["type"] for e in events[-3:]]
            assert c.get(f"/v1/responses/{final['response']['id']}").json() == final["response"]
            assert "terminal state: write failed" in server.log_tail(400)  # the retry ran
        server.restart(timeout=30)
        with _client(server) as c:
            assert c.get(f"/v1/responses/{final['response']['id']}").json() == final["response"]
            assert c.get(f"/v1/responses/{kept['id']}").json() == kept
    finally:
        subprocess.run([chattr or "chattr", "-i", *files], check=False)
        server.stop()


def _responses_stored(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        count: int = conn.execute("SELECT count(*) FROM harness_responses").fetchone()[0]
    return count


@pytest.mark.e2e
def test_a_full_disk_answer_matches_what_then_happens_without_a_restart(
    tmp_path: Path, small_disk: Path
) -> None:
    """Work the store refused is never done; work it accepted ends once space returns, in
    the running process: a blocking request whose terminal write is refused past
    ``terminal_write_seconds`` is answered 202 with the stored (``in_progress``) body, never a
    5xx for work that then finishes; a stream stays open and gets the terminal event."""
    db = small_disk / "harness.db"
    server = _start(tmp_path, db, terminal_write_seconds=0.5)
    try:
        with _client(server) as c:
            kept = c.post("/v1/responses", json={"input": "reply with the word fig"}).json()
            work = {"input": "count slowly to 40"}
            key = {"Idempotency-Key": "full-disk-run"}
            rid = c.post("/v1/responses", json={**work, "background": True}, headers=key).json()[
                "id"
            ]
            deadline = time.monotonic() + DEADLINE_S
            while "3" not in json.dumps(c.get(f"/v1/responses/{rid}").json()["output"]):
                assert time.monotonic() < deadline
            stored_before = _responses_stored(db)
            filler = _fill(small_disk)
            streamed: list[dict[str, Any]] = []

            def follow() -> None:
                with _client(server) as s, s.stream("GET", f"/v1/responses/{rid}?stream=true") as a:
                    streamed.extend(_events(a))

            follower = threading.Thread(target=follow)
            follower.start()
            # The run's writes fail, it ends, and its terminal write is refused past the
            # deadline: the blocking request (the same work by its key) is told it is accepted.
            waited = c.post("/v1/responses", json=work, headers=key)
            assert waited.status_code == 202, waited.text
            assert waited.headers["location"] == f"/v1/responses/{rid}"
            assert waited.json()["status"] == "in_progress"
            assert c.get(f"/v1/responses/{rid}").json() == waited.json()  # memory claims nothing
            # New work while the disk is full: refused (5xx) and then never done, or accepted
            # and then finished; which one depends on where the store's free pages fall.
            refused = c.post("/v1/responses", json={"input": "reply with the word plum"})
            assert refused.status_code in (200, 202, 503), refused.text
            assert follower.is_alive()  # the stream waits for the terminal event
            filler.unlink()
            deadline = time.monotonic() + DEADLINE_S * 2
            while (final := c.get(f"/v1/responses/{rid}").json())["status"] == "in_progress":
                assert time.monotonic() < deadline, "the accepted run did not end"
                time.sleep(0.05)
            assert final["status"] == "failed"  # its writes failed: the run ended on that
            follower.join(DEADLINE_S)
            assert not follower.is_alive()
            assert [e["type"] for e in streamed].count("response.failed") == 1
            assert streamed[-1]["response"] == final
            replayed = c.post("/v1/responses", json=work, headers=key)
            assert (replayed.status_code, replayed.json()) == (200, final)
            if refused.status_code != 503:
                plum = refused.json()["id"]
                while c.get(f"/v1/responses/{plum}").json()["status"] == "in_progress":
                    assert time.monotonic() < deadline, "the accepted request did not end"
                    time.sleep(0.05)
            assert "written after" in server.log_tail(400)  # stored by this process
        server.stop()
        assert _responses_stored(db) == stored_before + (refused.status_code != 503)
        row = HarnessStore.open(f"sqlite:///{db}").get(rid)
        assert row is not None and row.bridge_run_ref is not None
        bridge_run = Ledger.open(db).for_principal(row.principal).reads.get_run(row.bridge_run_ref)
        assert bridge_run.status is OuterStatus.FAILED  # the bridge's ledger says so too
        server.start(timeout=30)
        with _client(server) as c:
            assert c.get(f"/v1/responses/{rid}").json() == final
            assert c.get(f"/v1/responses/{kept['id']}").json() == kept
            with c.stream("GET", f"/v1/responses/{rid}?stream=true") as answer:
                types = [e["type"] for e in _events(answer)]
            assert types.count("response.failed") == 1
            assert not any(t.endswith(".resumed") for t in types), "ended here, not resumed"
    finally:
        server.stop()


# --------------------------------------------------------------------------- tool trouble
@pytest.mark.e2e
def test_an_invalid_task_response_is_the_steps_output_and_the_run_goes_on(tmp_path: Path) -> None:
    with ServerProcess("tests.servers.adversarial_server") as adversary:
        harness = {
            "id": "chrn_adv",
            "base": "scripted",
            "model": "scripted-1",
            "mcpServers": [{"name": "adv", "url": adversary.url, "enabled": True}],
        }
        server = _start(tmp_path, tmp_path / "harness.db", harnesses=[harness])
        try:
            with _client(server) as c:
                text = 'call adv.malformed_create\ncall adv.echo {"text": "after"}'
                body, outputs = _completed_run(c, text)
                assert outputs[0]["outcome"] == "error"
                assert outputs[0]["error"]["kind"] == "invalid_task_response"
                assert outputs[1]["outcome"] == "result"  # the run went on to the next step
                assert "dispatch" not in json.dumps(outputs[0])  # no ids, no raw server text
                assert c.get(f"/v1/responses/{body['id']}").json() == body
                # A handle the server already gave for another call: the same, as its own kind.
                text = "\n".join(
                    ["call adv.duplicate_id policy=detach"] * 2 + ['call adv.echo {"text": "on"}']
                )
                body, outputs = _completed_run(c, text)
                assert outputs[0]["outcome"] == "task_pending"
                assert outputs[1]["outcome"] == "error"
                assert outputs[1]["error"]["kind"] == "malformed_task_handle"
                assert outputs[2]["outcome"] == "result"
                assert "dup-" not in json.dumps(body)  # the raw handle is nowhere
        finally:
            server.stop()
