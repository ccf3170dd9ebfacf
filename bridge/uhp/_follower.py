"""Following one response's stream: ordered, gap-checked, never duplicated, resumed after a
fault (``Last-Event-ID`` where the server streams ``GET /v1/responses/{id}``, otherwise by
re-reading the stored response), with the last seen sequence checkpointed in the ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import httpx
import pydantic

from bridge._config import FollowConfig
from bridge._ledger.fencing import Membership
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge.uhp._error_mapping import error_for
from bridge.uhp._errors import ResponseNotFollowable, StreamFault
from bridge.uhp._models import (
    TERMINAL_EVENT_TYPES,
    ResponseObject,
    StreamEvent,
    terminal_event_for,
)
from bridge.uhp._sse_decoding import sse_frames

_TRANSPORT_ERRORS = (httpx.TransportError,)  # includes timeouts and dropped connections
STUCK_FAULTS_BEFORE_REREAD = 3
CHECKPOINT_PROBE = 32


@dataclass(slots=True)
class FollowState:
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


class FollowingClient(Protocol):
    """What a follower uses of its client (``bridge.uhp._client.UhpClient``)."""

    base_url: str
    ledger: Ledger
    tenant: TenantLedger
    follow_config: FollowConfig
    db: LedgerRunner
    _sleep: Callable[[float], Awaitable[None]]

    @property
    def http(self) -> httpx.AsyncClient: ...

    async def get_response(self, response_id: str) -> ResponseObject: ...

    async def _record_response(
        self, run_ref: str, response: ResponseObject, lease: Membership | None = None
    ) -> None: ...

    def _headers(self, **extra: str) -> dict[str, str]: ...

    def _backoff(self, attempt: int) -> float: ...


class ResponseFollower:
    """Async iterator over one response's events: ordered, gap-checked, never duplicated."""

    def __init__(self, client: FollowingClient, state: FollowState) -> None:
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
        later :meth:`bridge.uhp._client.UhpClient.follow` resumes exactly after it."""
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
                async for sse in sse_frames(source):
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
                lost = client.tenant.runs.record_stream_lost
                await client.db(lost, state.run_ref, reason, last, lease=state.lease)
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
            client.tenant.runs.record_stream_resumed, state.run_ref, mode, after, lease=state.lease
        )

    async def _record_sequence(self) -> None:
        client, state = self._client, self._state
        record = client.tenant.runs.record_outer_sequence
        await client.db(record, state.run_ref, state.last_seq, lease=state.lease)

    async def _anomaly(self, kind: str, detail: str) -> None:
        client = self._client
        await client.db(client.tenant.runs.record_anomaly, self._state.run_ref, kind, detail)

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
            raise error_for(response)
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
