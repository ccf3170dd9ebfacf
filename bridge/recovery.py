"""What a bridge found and took back when it opened (or when ``Bridge.recover`` ran)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bridge.errors import BridgeError
from bridge.ledger.views import CallInputView, InputRequestView, RunView
from bridge.uhp.request_record import RecordedRequest

if TYPE_CHECKING:
    from bridge.uhp.client import UhpClient, UhpRun


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
        return self.request is not None and self.request.repostable

    async def repost(self, *, background: bool = False, via: UhpClient | None = None) -> UhpRun:
        """Send the recorded request again with its key (``via``: the UHP client to send it
        with, by default the one the bridge has for this server). Raises
        ``RequestNotRepostable`` when there is no usable body."""
        client = via if via is not None else (await self.client() if self.client else None)
        if client is None:
            raise BridgeError(f"no UHP client is configured for {self.uhp_server}: pass via=")
        return await client.repost(self.run_ref, background=background)


@dataclass(slots=True)
class RecoveryReport:
    tasks_watched: int = 0
    dispatches_marked_unknown: int = 0
    answers_to_redeliver: int = 0
    cancels_to_resend: int = 0
    remote_runs_resumed: int = 0
    served_runs_open: list[str] = field(default_factory=list)
    # Surfaced before the restart and still unanswered: offer them to the host again, keyed by
    # input_ref (the same reference the original task.input_required event carried); see
    # also Bridge.pending_inputs, which returns them as typed InputRequests.
    pending_inputs: list[InputRequestView] = field(default_factory=list)
    # Remote runs that never got a response id (single-process mode): re-send with repost().
    unanswered_posts: list[UnansweredPost] = field(default_factory=list)
    # The same for calls the server answered with InputRequiredResult before any task (MRTR):
    # answering one sends the call again (call.input_required events named them).
    pending_call_inputs: list[CallInputView] = field(default_factory=list)
