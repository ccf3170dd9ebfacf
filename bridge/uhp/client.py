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
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Literal

import anyio
import httpx
import pydantic
from httpx_sse import ServerSentEvent

# The library's decoders, used per chunk (see _sse_frames); pinned to httpx-sse 0.4.
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from bridge.aio import LedgerRunner
from bridge.ledger.engine import is_sqlite
from bridge.ledger.fencing import Membership
from bridge.ledger.store import Ledger
from bridge.lifecycle import OuterStatus
from bridge.uhp.errors import (
    ResponseNotFollowable,
    StreamFault,
    UhpAuthError,
    UhpError,
    UhpInvalidRequest,
    UhpNotFound,
    UhpQuotaExhausted,
    UhpRateLimited,
    UhpServerError,
    UhpSessionBusy,
    UhpUnsupportedVersion,
)
from bridge.uhp.models import (
    PREFERRED_VERSION,
    SUPPORTED_VERSIONS,
    TERMINAL_EVENT_TYPES,
    VERSION_HEADER,
    Discovery,
    ErrorEnvelope,
    Harness,
    ResponseObject,
    StreamEvent,
    terminal_event_for,
)

_TRANSPORT_ERRORS = (httpx.TransportError,)  # includes timeouts and dropped connections
STUCK_FAULTS_BEFORE_REREAD = 3
CHECKPOINT_PROBE = 32


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How ``POST /v1/responses`` is retried (always with the same Idempotency-Key)."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: float = 0.25
    session_busy_deadline_s: float = 600.0  # keep retrying session_busy this long


@dataclass(frozen=True, slots=True)
class FollowConfig:
    inactivity_timeout_s: float = 75.0  # servers send ': keep-alive' at least every 30 s
    blocking_timeout_s: float = 900.0  # a blocking POST waits for the whole task
    reread_interval_s: float = 1.0  # re-reading a response that cannot be streamed again
    max_reconnects: int = 50
    checkpoint_interval_ms: int = 200  # how often the last seen sequence is committed


@dataclass(frozen=True, slots=True)
class UhpRun:
    """An outer run created on (or found at) a UHP server."""

    run_ref: str
    response: ResponseObject


@dataclass(slots=True)
class _Follow:
    run_ref: str
    response_id: str | None
    last_seq: int  # last sequence delivered to the consumer (-1: none yet)
    source: httpx.Response | None = None
    checkpointed_at_ms: int = 0
    checkpointed_seq: int = -1
    anomalies: set[str] = field(default_factory=set)
    # The replica incarnation this run is leased to (several replicas on one ledger), carried
    # by every write the follower makes so a replica that lost the run cannot write over it.
    lease: Membership | None = None


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
        self.db = db or LedgerRunner(inline=is_sqlite(ledger.engine))
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
        _raise_for_status(response)
        discovery = Discovery.model_validate(response.json())
        if self.version not in discovery.versions:
            usable = [v for v in SUPPORTED_VERSIONS if v in discovery.versions]
            if not usable:
                raise UhpUnsupportedVersion(400, None, f"server serves {discovery.versions}")
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
        body.update(stream=False, background=background)
        run_ref, key = await self._register(harness_id, idempotency_key)
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
        run_ref, key = await self._register(harness_id, idempotency_key)
        # Leased before the response id exists, so no other replica can claim it meanwhile.
        lease = await self.lease_run(run_ref) if self.lease_run is not None else None
        response = await self._post_with_retries(body, key, stream=True, read_timeout=None)
        state = _Follow(run_ref, response_id=None, last_seq=-1, source=response, lease=lease)
        return ResponseFollower(self, state)

    async def follow(self, run_ref: str, *, lease: Membership | None = None) -> ResponseFollower:
        """Follow a recorded run (this process or another one) from its last seen sequence.

        ``lease``: the replica incarnation the run was claimed by (leased mode)."""
        run = await self.db(self.tenant.get_run, run_ref)
        if run.response_id is None:
            raise ResponseNotFollowable(
                f"run {run_ref} has no response id yet: send the same request again with its "
                f"idempotency key (the server returns the first request's response)"
            )
        last = run.last_sequence if run.last_sequence is not None else -1
        return ResponseFollower(self, _Follow(run_ref, run.response_id, last, lease=lease))

    async def _register(self, harness_id: str | None, key: str | None) -> tuple[str, str]:
        key = key or f"bridge-{uuid.uuid4()}"
        run = await self.db(
            self.tenant.open_run, self.base_url, idempotency_key=key, harness_id=harness_id
        )
        return run.ref, key

    async def _record_response(
        self, run_ref: str, response: ResponseObject, lease: Membership | None = None
    ) -> None:
        await self.db(
            self.tenant.record_outer_ids,
            run_ref,
            response_id=response.id,
            session_id=response.session_id,
            harness_id=response.harness_id,
        )
        status = response.outer_status
        if status is None:
            await self.db(
                self.tenant.record_anomaly,
                run_ref,
                "unknown_outer_status",
                f"response reported status {response.status[:40]!r}",
            )
        else:
            await self.db(
                self.tenant.observe_outer, run_ref, status, error=response.error, lease=lease
            )

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
        run = await self.db(self.tenant.find_run, self.base_url, response.id)
        if run is not None and response.outer_status is not None:
            await self.db(self.tenant.observe_outer, run.ref, response.outer_status)

    # -- HTTP plumbing --------------------------------------------------------------------------
    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}", VERSION_HEADER: self.version}
        headers.update(extra)
        return headers

    async def _json(self, method: str, path: str) -> dict[str, Any]:
        response = await self.http.request(
            method, f"{self.base_url}{path}", headers=self._headers()
        )
        _raise_for_status(response)
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
            error = _error_for(response)
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


class ResponseFollower:
    """Async iterator over one response's events: ordered, gap-checked, never duplicated."""

    def __init__(self, client: UhpClient, state: _Follow) -> None:
        self._client = client
        self._state = state
        self.final: ResponseObject | None = None

    @property
    def run_ref(self) -> str:
        return self._state.run_ref

    @property
    def response_id(self) -> str | None:
        return self._state.response_id

    @property
    def last_sequence(self) -> int:
        return self._state.last_seq

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._events()

    async def until_terminal(self) -> ResponseObject:
        """Consume every event; return the final response."""
        async for _ in self:
            pass
        assert self.final is not None
        return self.final

    async def aclose(self) -> None:
        """Stop following (a client-side cut): the last delivered sequence is committed, so a
        later :meth:`UhpClient.follow` resumes exactly after it."""
        source, self._state.source = self._state.source, None
        if source is not None:
            await source.aclose()
        if self._state.last_seq > self._state.checkpointed_seq:
            await self._checkpoint()

    async def __aenter__(self) -> ResponseFollower:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _events(self) -> AsyncIterator[StreamEvent]:
        client, state = self._client, self._state
        reconnects = 0
        stuck_faults = 0  # consecutive faults without a single new event
        while True:
            source = state.source
            state.source = None
            if source is None and stuck_faults >= STUCK_FAULTS_BEFORE_REREAD:
                # The server keeps breaking the stream at the same place: stop streaming and
                # take the stored response, the source of truth.
                assert state.response_id is not None
                response = await client.get_response(state.response_id)
                after = state.last_seq if state.last_seq >= 0 else None
                await self._resumed("reread", after)
                final = await self._reread_until_terminal(response)
                yield terminal_event_for(final)
                return
            if source is None:
                reopened = await self._reopen()
                if isinstance(reopened, ResponseObject):
                    final = await self._reread_until_terminal(reopened)
                    yield terminal_event_for(final)
                    return
                source = reopened
            seen_before = state.last_seq
            try:
                # The per-event path is inlined here (one generator layer, no per-event
                # coroutine): it runs tens of thousands of times a second.
                checkpoint_every = client.follow_config.checkpoint_interval_ms
                clock = client.ledger.clock
                content_type = source.headers.get("content-type", "")
                if "text/event-stream" not in content_type:
                    raise StreamFault(
                        "not_a_stream", f"server answered {content_type or 'no type'}"
                    )
                parse = StreamEvent.model_validate_json  # bound once: this loop is hot
                terminal_types = TERMINAL_EVENT_TYPES
                expected = state.last_seq + 1
                async for sse in _sse_frames(source):
                    if not sse.data:
                        # A comment (": keep-alive") and its blank line: the SSE spec
                        # dispatches no event for an empty data buffer (httpx-sse does).
                        continue
                    try:
                        # pydantic-core parses and checks in one pass (faster than json.loads
                        # alone); unknown fields and types are kept, a missing type is malformed.
                        event = parse(sse.data)
                    except pydantic.ValidationError:
                        detail = f"undecodable or untyped frame after sequence {state.last_seq}"
                        await self._anomaly("malformed_frame", detail)
                        raise StreamFault("malformed_frame", detail) from None
                    seq = event.sequence_number
                    if seq is None:
                        await self._anomaly(
                            "missing_sequence", f"{event.type[:60]} had no sequence_number"
                        )
                        raise StreamFault("missing_sequence", "an event had no sequence_number")
                    if seq != expected:
                        if seq < expected:
                            if event.type in TERMINAL_EVENT_TYPES:
                                await self._anomaly(
                                    "duplicate_terminal", f"terminal event {seq} repeated"
                                )
                            continue  # already delivered: a replay is never delivered twice
                        detail = f"expected sequence {expected}, got {seq}"
                        await self._anomaly("sequence_gap", detail)
                        raise StreamFault("sequence_gap", detail)
                    if state.response_id is None and event.response is not None:
                        state.response_id = event.response.id
                        await client._record_response(state.run_ref, event.response, state.lease)
                    state.last_seq = seq
                    expected = seq + 1
                    if event.type in terminal_types:
                        await self._finish(event)
                        yield event
                        return
                    # The clock is read every CHECKPOINT_PROBE events, not on every one.
                    if (
                        not seq % CHECKPOINT_PROBE or checkpoint_every == 0
                    ) and clock() - state.checkpointed_at_ms >= checkpoint_every:
                        await self._checkpoint()
                    yield event
                raise StreamFault("stream_ended", "the stream closed before a terminal event")
            except (StreamFault, *_TRANSPORT_ERRORS) as exc:
                stuck_faults = stuck_faults + 1 if state.last_seq == seen_before else 1
                reason = exc.kind if isinstance(exc, StreamFault) else type(exc).__name__
                last = state.last_seq if state.last_seq >= 0 else None
                await client.db(
                    client.tenant.record_stream_lost, state.run_ref, reason, last, lease=state.lease
                )
                state.checkpointed_seq = state.last_seq
                reconnects += 1
                if reconnects > client.follow_config.max_reconnects:
                    raise
                await client._sleep(client._backoff(min(reconnects, 5)) / 4)
            finally:
                await source.aclose()

    async def _finish(self, event: StreamEvent) -> None:
        client, state = self._client, self._state
        response = event.response
        if response is None:
            await self._anomaly("malformed_frame", f"{event.type} carried no response")
            raise StreamFault("malformed_frame", "terminal event without the response")
        self.final = response
        await self._record_sequence()
        await client._record_response(state.run_ref, response, state.lease)

    async def _checkpoint(self) -> None:
        """Commit the last seen sequence (at most every ``checkpoint_interval_ms``)."""
        client, state = self._client, self._state
        state.checkpointed_at_ms = client.ledger.clock()
        state.checkpointed_seq = state.last_seq
        await self._record_sequence()

    async def _resumed(self, mode: Literal["last_event_id", "reread"], after: int | None) -> None:
        client, state = self._client, self._state
        await client.db(
            client.tenant.record_stream_resumed, state.run_ref, mode, after, lease=state.lease
        )

    async def _record_sequence(self) -> None:
        client, state = self._client, self._state
        await client.db(
            client.tenant.record_outer_sequence, state.run_ref, state.last_seq, lease=state.lease
        )

    async def _anomaly(self, kind: str, detail: str) -> None:
        client = self._client
        await client.db(client.tenant.record_anomaly, self._state.run_ref, kind, detail)

    async def _reopen(self) -> httpx.Response | ResponseObject:
        """Ask for the rest of the stream; a server without resumption answers the JSON."""
        client, state = self._client, self._state
        if state.response_id is None:
            raise ResponseNotFollowable(
                f"run {state.run_ref}: the stream broke before the response id arrived; resend "
                f"the request with the same idempotency key"
            )
        headers = client._headers(Accept="text/event-stream")
        if state.last_seq >= 0:
            headers["Last-Event-ID"] = str(state.last_seq)
        request = client.http.build_request(
            "GET",
            f"{client.base_url}/v1/responses/{state.response_id}",
            params={"stream": "true"},
            headers=headers,
        )
        response = await client.http.send(request, stream=True)
        if not response.is_success:
            await response.aread()
            await response.aclose()
            raise _error_for(response)
        after = state.last_seq if state.last_seq >= 0 else None
        if "text/event-stream" in response.headers.get("content-type", ""):
            await self._resumed("last_event_id", after)
            return response
        await response.aread()
        await response.aclose()
        await self._resumed("reread", after)
        return ResponseObject.model_validate(response.json())

    async def _reread_until_terminal(self, response: ResponseObject) -> ResponseObject:
        client, state = self._client, self._state
        while response.outer_status is None or not response.outer_status.is_terminal:
            await client._sleep(client.follow_config.reread_interval_s)
            assert state.response_id is not None
            response = await client.get_response(state.response_id)
        self.final = response
        await client._record_response(state.run_ref, response, state.lease)
        return response


async def _sse_frames(source: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The SSE events of a response, decoded a whole network chunk at a time.

    httpx-sse's own line and event decoders, driven per chunk instead of through its per-line
    async generators: on this path each async hop per line costs as much as parsing the event.
    """
    lines = SSELineDecoder()
    frames = SSEDecoder()
    async for text in source.aiter_text():
        for line in lines.decode(text):
            frame = frames.decode(line)
            if frame is not None:
                yield frame
    for line in lines.flush():
        frame = frames.decode(line)
        if frame is not None:
            yield frame


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


def _raise_for_status(response: httpx.Response) -> None:
    if not response.is_success:
        raise _error_for(response)


def _error_for(response: httpx.Response) -> UhpError:
    """The typed error for a non-2xx answer, carrying the envelope when there is one."""
    envelope: ErrorEnvelope | None
    try:
        envelope = ErrorEnvelope.model_validate(response.json())
    except ValueError:
        envelope = None
    status = response.status_code
    code = envelope.error.code if envelope else None
    if status in (401, 403):
        return UhpAuthError(status, envelope, response.text[:200])
    if status == 429:
        if code == "quota_exhausted":
            return UhpQuotaExhausted(status, envelope)
        return UhpRateLimited(status, envelope, _retry_after(response))
    if status >= 500:
        return UhpServerError(status, envelope, response.text[:200])
    if code == "session_busy":
        return UhpSessionBusy(status, envelope)
    if code == "unsupported_protocol_version":
        return UhpUnsupportedVersion(status, envelope)
    if status == 404:
        return UhpNotFound(status, envelope)
    return UhpInvalidRequest(status, envelope, response.text[:200])


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


__all__ = [
    "FollowConfig",
    "OuterStatus",
    "ResponseFollower",
    "RetryPolicy",
    "UhpClient",
    "UhpRun",
]
