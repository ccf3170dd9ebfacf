"""A real webhook receiver on loopback, verifying every request with ``standardwebhooks``, and
builders of attention items through the ledger's write path.

The receiver is a threaded HTTP server (the stdlib's): it answers each request as its current
``mode`` says (``ok``: 204; ``fail``: 503; ``hold``: keeps the request open until released,
then 204), and records every request it verified; a request whose body never fully came (its
sender was killed) is only counted. Tests wait on it with deadlines
(:meth:`Receiver.wait_for`), never with bare sleeps.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
from standardwebhooks import Webhook, WebhookVerificationError

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import LostReason, TaskStatus
from tests.support.builders import ENDPOINT, new_run, new_task

APPROVAL = {"method": "elicitation/create", "params": {"message": "Approve 120 EUR?"}}


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass(frozen=True)
class Received:
    id: str
    body: bytes
    payload: dict[str, Any]
    at: float  # time.time() when it arrived


class Receiver:
    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.mode = "ok"
        self.received: list[Received] = []  # verified requests, in arrival order
        self.rejected = 0  # requests whose signature did not verify
        self.rejections: list[str] = []  # why
        self.truncated = 0  # requests whose sender went away before the whole body came
        self.requests = 0
        self._changed = threading.Condition()
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the deliverer reuses its connections

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if len(body) < length:  # the sender died mid-request (a crash test)
                    with receiver._changed:
                        receiver.truncated += 1
                    return
                receiver._take(self, body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            # The stdlib's backlog of 5 drops the connections of a burst (each then waits for
            # a SYN retransmit, a second later): a receiver in production listens deeper.
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        headers = {k: v for k, v in handler.headers.items()}
        with self._changed:
            self.requests += 1
            mode = self.mode
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as exc:
            with self._changed:
                self.rejected += 1
                self.rejections.append(str(exc))
                self._changed.notify_all()
            _answer(handler, 400)
            return
        if mode == "fail":
            _answer(handler, 503)
            with self._changed:
                self._changed.notify_all()
            return
        if mode == "hold":
            with self._changed:
                self._changed.notify_all()
            self._release.wait(60)
        with self._changed:
            self.received.append(Received(headers["webhook-id"], body, payload, time.time()))
            self._changed.notify_all()
        _answer(handler, 204)

    def set_mode(self, mode: str) -> None:
        with self._changed:
            self.mode = mode
            if mode != "hold":
                self._release.set()

    def wait_for(self, predicate: Callable[[Receiver], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"receiver: condition not met in {timeout} s "
                        f"({len(self.received)} received, {self.requests} requests)"
                    )
                self._changed.wait(min(left, 0.5))

    async def until(self, predicate: Callable[[Receiver], bool], timeout: float = 30.0) -> None:
        """:meth:`wait_for` in a worker thread, while the event loop (the deliverer) runs."""
        await anyio.to_thread.run_sync(self.wait_for, predicate, timeout)

    def ids(self) -> set[str]:
        with self._changed:
            return {r.id for r in self.received}

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


def _answer(handler: BaseHTTPRequestHandler, status: int) -> None:
    handler.send_response(status)
    handler.send_header("content-length", "0")
    handler.end_headers()


@contextmanager
def receiving(secret: str) -> Iterator[Receiver]:
    receiver = Receiver(secret).start()
    try:
        yield receiver
    finally:
        receiver.stop()


def one_of_each_kind(tenant: TenantLedger) -> dict[str, str]:
    """One attention item of each kind the ledger writes, on a new run: kind -> the id its
    webhook carries (the event's run and sequence number)."""
    run = new_run(tenant)
    waiting = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        waiting.ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests={"k": APPROVAL})
    )
    lost = new_task(tenant, run.ref)
    tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "gone")
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="pay",
        arguments={"amount": 1},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection dropped")
    tenant.runs.record_anomaly(run.ref, "malformed_reply", "not JSON")
    kinds = {}
    for event in tenant.reads.events(run.ref):
        payload = json.loads(event.model_dump_json())
        kind = {
            "task.input_required": "input_waiting",
            "task.lost": "lost_task",
            "call.unknown_outcome": "unknown_outcome",
            "anomaly": "anomaly",
        }.get(payload["type"])
        if kind is not None:
            kinds[kind] = f"msg_{run.ref}_{event.seq}"
    return kinds
