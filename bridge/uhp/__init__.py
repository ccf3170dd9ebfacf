r"""The UHP side: a resumable UHP client for the product side, and (in
:mod:`bridge.uhp.serving`) a serving kit for a harness that serves UHP.

See ``docs/uhp-side.md`` and ``docs/guides/resume-after-sse-loss.md``.

Every public name is importable from here; they load on first use (PEP 562), so
``import bridge.uhp`` loads no HTTP client. UHP errors are :class:`bridge.errors.BridgeError`\ s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge._public import load_public

if TYPE_CHECKING:
    from bridge._config import RetryPolicy as RetryPolicy
    from bridge.uhp._adapter import (
        SUMMARY_KEY as SUMMARY_KEY,
        nested_tasks_summary as nested_tasks_summary,
        to_uhp_event as to_uhp_event,
    )
    from bridge.uhp._client import (
        UhpClient as UhpClient,
        UnansweredPost as UnansweredPost,
    )
    from bridge.uhp._errors import (
        RequestNotRepostable as RequestNotRepostable,
        ResponseNotFollowable as ResponseNotFollowable,
        StreamFault as StreamFault,
        UhpAuthError as UhpAuthError,
        UhpError as UhpError,
        UhpInvalidRequest as UhpInvalidRequest,
        UhpNotFound as UhpNotFound,
        UhpQuotaExhausted as UhpQuotaExhausted,
        UhpRateLimited as UhpRateLimited,
        UhpServerError as UhpServerError,
        UhpSessionBusy as UhpSessionBusy,
        UhpUnsupportedVersion as UhpUnsupportedVersion,
    )
    from bridge.uhp._follower import ResponseFollower as ResponseFollower
    from bridge.uhp._models import (
        SUPPORTED_VERSIONS as SUPPORTED_VERSIONS,
        ResponseObject as ResponseObject,
        StreamEvent as StreamEvent,
    )
    from bridge.uhp._waiting import (
        InputWaitMapping as InputWaitMapping,
        input_wait_mapping as input_wait_mapping,
    )

_EXPORTS: dict[str, str] = {
    # The client: create, follow and resume a response; a POST whose answer was lost.
    "UhpClient": "bridge.uhp._client",
    "ResponseFollower": "bridge.uhp._follower",
    "RetryPolicy": "bridge._config",
    "UnansweredPost": "bridge.uhp._client",
    "ResponseObject": "bridge.uhp._models",
    "StreamEvent": "bridge.uhp._models",
    "SUPPORTED_VERSIONS": "bridge.uhp._models",
    # For a harness that serves UHP: bridge events as UHP stream events, the nested-task summary.
    "to_uhp_event": "bridge.uhp._adapter",
    "nested_tasks_summary": "bridge.uhp._adapter",
    "SUMMARY_KEY": "bridge.uhp._adapter",
    # How an inner input_required shows on the outer run, per UHP version.
    "InputWaitMapping": "bridge.uhp._waiting",
    "input_wait_mapping": "bridge.uhp._waiting",
    # Errors (all under bridge.errors.BridgeError).
    "UhpError": "bridge.uhp._errors",
    "UhpAuthError": "bridge.uhp._errors",
    "UhpInvalidRequest": "bridge.uhp._errors",
    "UhpNotFound": "bridge.uhp._errors",
    "UhpQuotaExhausted": "bridge.uhp._errors",
    "UhpRateLimited": "bridge.uhp._errors",
    "UhpServerError": "bridge.uhp._errors",
    "UhpSessionBusy": "bridge.uhp._errors",
    "UhpUnsupportedVersion": "bridge.uhp._errors",
    "StreamFault": "bridge.uhp._errors",
    "ResponseNotFollowable": "bridge.uhp._errors",
    "RequestNotRepostable": "bridge.uhp._errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    return load_public(__name__, globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
