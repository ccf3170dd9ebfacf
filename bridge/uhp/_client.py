"""A resumable UHP client on ``httpx`` + ``httpx-sse``, recording the outer run in the ledger.

* The ``Idempotency-Key`` of ``POST /v1/responses`` is generated and committed to the ledger
  *before* the POST, and reused on every retry, so a retry after a timeout can never start a
  second task.
* A stream is followed with its ``sequence_number`` checked: a gap, a missing number or a
  malformed frame is recorded (``anomaly`` + ``outer.stream_lost``) and never rendered; the
  stream is then resumed. An inactivity timeout (fed by ``: keep-alive`` comments) catches a
  silent stall. The terminal event is authoritative; a cancelled task is recognised by
  ``response.status``, not by the event name.
* Resuming uses ``Last-Event-ID`` where the server streams ``GET /v1/responses/{id}``
  (no event is delivered twice), and otherwise re-reads the stored response until terminal.
  The response and session ids and the last seen sequence live in the ledger, so another
  process resumes the same response.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import httpx

from bridge._config import FollowConfig, RetryPolicy
from bridge._errors import BridgeError
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import RunView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge.uhp._error_mapping import error_for, raise_for_status
from bridge.uhp._errors import (
    RequestNotRepostable,
    ResponseNotFollowable,
    UhpError,
    UhpRateLimited,
    UhpServerError,
    UhpSessionBusy,
    no_common_version,
)
from bridge.uhp._follower import FollowState, ResponseFollower
from bridge.uhp._models import (
    PREFERRED_VERSION,
    SUPPORTED_VERSIONS,
    VERSION_HEADER,
    Deleted,
    Discovery,
    Harness,
    ResponseObject,
)
from bridge.uhp._request_record import RecordedRequest, record_request

log = logging.getLogger("bridge.uhp")
_TRANSPORT_ERRORS = (httpx.TransportError,)  # includes timeouts and dropped connections


@dataclass(frozen=True, slots=True)
class UnansweredPost:
    """A run whose ``POST /v1/responses`` was sent, or about to be, and never got a response
    id recorded: the process died (or the request failed) before the server's answer was
    committed. Whether the server started it is unknown; :meth:`repost` finds out safely, by
    sending the recorded body again with the recorded ``Idempotency-Key`` (the server answers
    with the first request's response, or starts the one execution there will be)."""

    run_ref: str
    uhp_server: str  # base URL
    idempotency_key: str
    request: RecordedRequest | None  # None: registered without a recorded body
    created_at_ms: int
    client: Callable[[], Awaitable[UhpClient]] | None = field(
        default=None, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        run: RunView,
        request_json: str | None,
        client: Callable[[], Awaitable[UhpClient]] | None,
    ) -> UnansweredPost:
        assert run.idempotency_key is not None
        return cls(
            run_ref=run.ref,
            uhp_server=run.uhp_server,
            idempotency_key=run.idempotency_key,
            request=RecordedRequest.from_json(request_json) if request_json else None,
            created_at_ms=run.created_at_ms,
            client=client,
        )

    @property
    def repostable(self) -> bool:
        """Whether a recorded body allows :meth:`repost`."""
        return self.request is not None and self.request.repostable

    async def repost(self, *, background: bool = False, via: UhpClient | None = None) -> UhpRun:
        """Send the recorded request again with its key (``via``: the UHP client to send it
        with, by default the one the bridge has for this server). Raises
        ``RequestNotRepostable`` when there is no usable body."""
        client = via if via is not None else (await self.client() if self.client else None)
        if client is None:
            raise BridgeError(f"no UHP client is configured for {self.uhp_server}: pass via=")
        return await client.repost(self.run_ref, background=background)


@dataclass(frozen=True, slots=True)
class UhpRun:
    """An outer run created on (or found at) a UHP server."""

    run_ref: str
    response: ResponseObject


class UhpClient:
    """One principal's view of one UHP server."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        ledger: Ledger,
        principal: str,
        version: str = PREFERRED_VERSION,
        retry: RetryPolicy | None = None,
        follow: FollowConfig | None = None,
        http: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        db: LedgerRunner | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token  # the client's own credential: sent, never written to the ledger
        self.ledger = ledger
        self.tenant = ledger.for_principal(principal)
        self.version = version
        self.retry = retry or RetryPolicy()
        self.follow_config = follow or FollowConfig()
        self._http = http
        self._owns_http = http is None
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.db = db or LedgerRunner(inline=ledger.dialect.runs_calls_inline)
        self.discovery: Discovery | None = None
        # Leased mode: called with a run this client just registered for streaming; returns
        # the lease its follower writes under (None: single process, or held elsewhere).
        self.lease_run: Callable[[str], Awaitable[Membership | None]] | None = None

    async def __aenter__(self) -> UhpClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(30.0, read=self.follow_config.inactivity_timeout_s)
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("use the UHP client inside 'async with'")
        return self._http

    # -- discovery and catalogue ------------------------------------------------------------
    async def discover(self) -> Discovery:
        """``GET /v1/uhp`` without a credential; settles the ``UHP-Version`` to send."""
        response = await self.http.get(f"{self.base_url}/v1/uhp")
        raise_for_status(response)
        discovery = Discovery.model_validate(response.json())
        if self.version not in discovery.versions:
            usable = [v for v in SUPPORTED_VERSIONS if v in discovery.versions]
            if not usable:
                raise no_common_version(discovery.versions, SUPPORTED_VERSIONS)
            self.version = usable[0]
        self.discovery = discovery
        return discovery

    async def harnesses(self) -> list[Harness]:
        body = await self._json("GET", "/v1/harnesses")
        return [Harness.model_validate(item) for item in body.get("data", [])]

    async def get_response(self, response_id: str) -> ResponseObject:
        return ResponseObject.model_validate(
            await self._json("GET", f"/v1/responses/{response_id}")
        )

    # -- creating responses -------------------------------------------------------------------
    async def create_response(
        self,
        input: Any,
        *,
        harness_id: str | None = None,
        model: str | None = None,
        previous_response_id: str | None = None,
        background: bool = False,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> UhpRun:
        """Blocking (or ``background``) ``POST /v1/responses``; the run is recorded first."""
        body = _body(input, harness_id, model, previous_response_id, fields)
        run_ref, key = await self._register(harness_id, idempotency_key, body)
        return await self._post_and_record(run_ref, body, key, background=background)

    async def _post_and_record(
        self, run_ref: str, body: dict[str, Any], key: str, *, background: bool
    ) -> UhpRun:
        body = {**body, "stream": False, "background": background}
        timeout = None if background else self.follow_config.blocking_timeout_s
        response = await self._post_with_retries(body, key, stream=False, read_timeout=timeout)
        created = ResponseObject.model_validate(response.json())
        await self._record_response(run_ref, created)
        return UhpRun(run_ref, created)

    async def stream_response(
        self,
        input: Any,
        *,
        harness_id: str | None = None,
        model: str | None = None,
        previous_response_id: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> ResponseFollower:
        """Streaming ``POST /v1/responses``; iterate the returned follower for its events."""
        body = _body(input, harness_id, model, previous_response_id, fields)
        body.update(stream=True)
        run_ref, key = await self._register(harness_id, idempotency_key, body)
        # Leased before the response id exists, so no other replica can claim it meanwhile.
        lease = await self.lease_run(run_ref) if self.lease_run is not None else None
        response = await self._post_with_retries(body, key, stream=True, read_timeout=None)
        state = FollowState(run_ref, response_id=None, last_seq=-1, source=response, lease=lease)
        return ResponseFollower(self, state)

    async def follow(self, run_ref: str, *, lease: Membership | None = None) -> ResponseFollower:
        """Follow a recorded run (this process or another one) from its last seen sequence.

        ``lease``: the replica incarnation the run was claimed by (leased mode)."""
        run = await self.db(self.tenant.reads.get_run, run_ref)
        if run.response_id is None:
            raise ResponseNotFollowable(
                f"run {run_ref} has no response id yet: send the same request again with its "
                f"idempotency key (the server returns the first request's response)"
            )
        last = run.last_sequence if run.last_sequence is not None else -1
        return ResponseFollower(self, FollowState(run_ref, run.response_id, last, lease=lease))

    # -- runs that never got a response id ----------------------------------------------------
    async def unanswered_posts(self) -> list[UnansweredPost]:
        """This principal's runs on this server whose POST never got a response id recorded."""
        runs = await self.db(self.tenant.reads.unacknowledged_runs, self.base_url)
        request = self.tenant.reads.run_request
        return [UnansweredPost.of(run, await self.db(request, run.ref), self._self) for run in runs]

    async def _self(self) -> UhpClient:
        return self

    async def repost(self, run_ref: str, *, background: bool = False) -> UhpRun:
        """Send a run's recorded request again with its recorded ``Idempotency-Key``: the
        server answers with the first request's response (waiting for it while it runs,
        unless ``background``), or runs it now if the first POST never arrived; either way
        there is one execution. Raises ``RequestNotRepostable`` without a usable body."""
        run = await self.db(self.tenant.reads.get_run, run_ref)
        recorded = await self.db(self.tenant.reads.run_request, run_ref)
        if run.idempotency_key is None or recorded is None:
            raise RequestNotRepostable(f"run {run_ref} has no recorded request to send again")
        request = RecordedRequest.from_json(recorded)
        if not request.repostable:
            raise RequestNotRepostable(
                f"run {run_ref}: credentials were scrubbed from its recorded request "
                f"({', '.join(request.redacted)}); send it again with its key yourself"
            )
        return await self._post_and_record(
            run_ref, request.body, run.idempotency_key, background=background
        )

    async def _register(
        self, harness_id: str | None, key: str | None, body: dict[str, Any]
    ) -> tuple[str, str]:
        """The run, its key and its body (credentials scrubbed) committed before the POST."""
        key = key or f"bridge-{uuid.uuid4()}"
        run = await self.db(
            self.tenant.runs.open_run,
            self.base_url,
            idempotency_key=key,
            harness_id=harness_id,
            request_json=record_request(body, self._token).to_json(),
        )
        return run.ref, key

    async def _record_response(
        self, run_ref: str, response: ResponseObject, lease: Membership | None = None
    ) -> None:
        if response.ignored_fields:
            await self._note_ignored_fields(run_ref, response, lease)
        await self.db(
            self.tenant.runs.record_outer_ids,
            run_ref,
            response_id=response.id,
            session_id=response.session_id,
            harness_id=response.harness_id,
        )
        status = response.outer_status
        if status is None:
            await self.db(
                self.tenant.runs.record_anomaly,
                run_ref,
                "unknown_outer_status",
                f"response reported status {response.status[:40]!r}",
            )
        else:
            await self.db(
                self.tenant.runs.observe_outer, run_ref, status, error=response.error, lease=lease
            )

    async def _note_ignored_fields(
        self, run_ref: str, response: ResponseObject, lease: Membership | None
    ) -> None:
        """Once per run (when its response id is first recorded): an ``outer.fields_ignored``
        event and a warning. Never an error: the response ran, only not with every field."""
        run = await self.db(self.tenant.reads.get_run, run_ref)
        if run.response_id is not None:
            return
        fields = response.ignored_fields
        await self.db(self.tenant.runs.record_fields_ignored, run_ref, fields, lease=lease)
        log.warning("UHP run %s: the server ignored request fields %s", run_ref, fields)

    # -- deletion -----------------------------------------------------------------------------
    async def delete_response(self, response_id: str) -> Deleted:
        """``DELETE /v1/responses/{id}``: the stored response is gone (it is not cancelled: a
        running task runs on). ``UhpNotFound`` for an unknown or already deleted one."""
        return Deleted.model_validate(await self._json("DELETE", f"/v1/responses/{response_id}"))

    async def delete_session(self, session_id: str) -> Deleted:
        """``DELETE /v1/sessions/{id}``: the server cancels what runs in the session, then
        deletes it and its responses. ``UhpNotFound`` for an unknown or already deleted one."""
        return Deleted.model_validate(await self._json("DELETE", f"/v1/sessions/{session_id}"))

    # -- cancellation -------------------------------------------------------------------------
    async def cancel_response(self, response_id: str) -> ResponseObject:
        """Ask for cancellation. The answer is a request, not proof: follow or re-read to see
        the task reach ``cancelled`` (or another terminal state)."""
        body = await self._json("POST", f"/v1/responses/{response_id}/cancel")
        response = ResponseObject.model_validate(body)
        await self._observe_if_known(response)
        return response

    async def cancel_session(self, session_id: str) -> dict[str, Any]:
        return await self._json("POST", f"/v1/sessions/{session_id}/cancel")

    async def _observe_if_known(self, response: ResponseObject) -> None:
        run = await self.db(self.tenant.reads.find_run, self.base_url, response.id)
        if run is not None and response.outer_status is not None:
            await self.db(self.tenant.runs.observe_outer, run.ref, response.outer_status)

    # -- HTTP plumbing --------------------------------------------------------------------------
    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}", VERSION_HEADER: self.version}
        headers.update(extra)
        return headers

    async def _json(self, method: str, path: str) -> dict[str, Any]:
        response = await self.http.request(
            method, f"{self.base_url}{path}", headers=self._headers()
        )
        raise_for_status(response)
        body: dict[str, Any] = response.json()
        return body

    async def _post_with_retries(
        self, body: dict[str, Any], key: str, *, stream: bool, read_timeout: float | None
    ) -> httpx.Response:
        """POST with the UHP retry rules; the same Idempotency-Key on every attempt."""
        headers = self._headers(**{"Idempotency-Key": key, "Content-Type": "application/json"})
        if stream:
            headers["Accept"] = "text/event-stream"
        timeout = httpx.Timeout(30.0, read=read_timeout or self.follow_config.inactivity_timeout_s)
        attempt = 0
        started = anyio.current_time()
        while True:
            attempt += 1
            request = self.http.build_request(
                "POST",
                f"{self.base_url}/v1/responses",
                headers=headers,
                content=json.dumps(body),
                timeout=timeout,
            )
            try:
                response = await self.http.send(request, stream=True)
            except _TRANSPORT_ERRORS:
                if attempt >= self.retry.max_attempts:
                    raise
                await self._sleep(self._backoff(attempt))
                continue
            if response.is_success:
                if not stream:
                    await response.aread()
                    await response.aclose()
                return response
            await response.aread()
            await response.aclose()
            error = error_for(response)
            delay = self._retry_delay(error, attempt, anyio.current_time() - started)
            if delay is None:
                raise error
            await self._sleep(delay)

    def _retry_delay(self, error: UhpError, attempt: int, waited: float) -> float | None:
        if isinstance(error, UhpSessionBusy):
            if waited >= self.retry.session_busy_deadline_s:
                return None
            return self._backoff(min(attempt, 6))
        if attempt >= self.retry.max_attempts:
            return None
        if isinstance(error, UhpRateLimited):
            return error.retry_after if error.retry_after is not None else self._backoff(attempt)
        if isinstance(error, UhpServerError):
            return self._backoff(attempt)
        return None  # invalid request, auth, quota: retrying cannot help

    def _backoff(self, attempt: int) -> float:
        delay = min(self.retry.base_delay_s * 2.0 ** (attempt - 1), self.retry.max_delay_s)
        return float(delay * (1 + self._rng.random() * self.retry.jitter))


def _body(
    input: Any,
    harness_id: str | None,
    model: str | None,
    previous_response_id: str | None,
    fields: dict[str, Any],
) -> dict[str, Any]:
    body: dict[str, Any] = {"input": input, **fields}
    if model is not None:
        body["model"] = model
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    if harness_id is not None:
        metadata = dict(body.get("metadata") or {})
        metadata["harness_id"] = harness_id
        body["metadata"] = metadata
    return body


__all__ = [
    "FollowConfig",
    "OuterStatus",
    "ResponseFollower",
    "RetryPolicy",
    "UhpClient",
    "UhpRun",
]
