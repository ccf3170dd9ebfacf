"""UHP wire models (pydantic). Tolerant by rule: unknown fields, unknown event types and unknown
output item types are kept as they came, never an error (UHP client rules)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from bridge._lifecycle import OuterStatus

VERSION_HEADER = "UHP-Version"
#: Every version this client speaks, newest first: each is additive to the one before, and the
#: client reads none of the optional capabilities they added, so one code path reads them all.
SUPPORTED_VERSIONS = ("2026-10-04", "2026-09-28", "2026-09-12", "2026-08-11")
PREFERRED_VERSION = SUPPORTED_VERSIONS[0]
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Discovery(_Open):
    object: str = "uhp.discovery"
    protocol: str = "uhp"
    versions: list[str] = Field(default_factory=list)
    default_version: str | None = None
    conformance_class: str | None = None
    capabilities: dict[str, Any] = Field(default_factory=dict)


class Harness(_Open):
    id: str
    object: str = "harness"


class OutputItem(_Open):
    """``message``, ``reasoning``, ``function_call``, ``function_call_output`` — or any other."""

    type: str
    id: str | None = None


class ResponseObject(_Open):
    id: str
    object: str = "response"
    created_at: int | float | None = None
    status: str
    error: dict[str, Any] | None = None
    output: list[OutputItem] = Field(default_factory=list)
    model: str | None = None
    usage: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    previous_response_id: str | None = None

    @property
    def outer_status(self) -> OuterStatus | None:
        try:
            return OuterStatus(self.status)
        except ValueError:
            return None

    @property
    def session_id(self) -> str | None:
        value = self.metadata.get("session_id")
        return value if isinstance(value, str) else None

    @property
    def harness_id(self) -> str | None:
        value = self.metadata.get("harness_id")
        return value if isinstance(value, str) else None

    @property
    def ignored_fields(self) -> list[str]:
        """The request fields the server named as not acted on (``metadata.ignored_fields``;
        the reserved ``tools`` and ``include`` are always among them when sent)."""
        value = self.metadata.get("ignored_fields")
        if not isinstance(value, list):
            return []
        return [name for name in value if isinstance(name, str)]

    def output_text(self) -> str:
        """The assistant text of every ``message`` item, concatenated."""
        parts: list[str] = []
        for item in self.output:
            if item.type != "message":
                continue
            for part in (item.model_extra or {}).get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
        return "".join(parts)


class Deleted(_Open):
    """The answer to ``DELETE /v1/responses/{id}`` or ``DELETE /v1/sessions/{id}``."""

    id: str
    object: str
    deleted: bool = True


class StreamEvent(_Open):
    """One SSE event. ``sequence_number`` is None only for a re-read stand-in (``synthetic``)."""

    type: str
    sequence_number: StrictInt | None = None
    response: ResponseObject | None = None
    synthetic: bool = False  # built from a re-read of the stored response, not received

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES


def terminal_event_for(response: ResponseObject) -> StreamEvent:
    """The terminal event a stream would have ended with, for a response re-read by GET."""
    kind = {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
    }.get(response.status, "response.failed")  # failed and cancelled both end as failed
    return StreamEvent(type=kind, response=response, synthetic=True)


class ErrorBody(_Open):
    type: str | None = None
    code: str | None = None
    message: str | None = None
    param: str | None = None
    detail: Any = None


class ErrorEnvelope(_Open):
    error: ErrorBody
