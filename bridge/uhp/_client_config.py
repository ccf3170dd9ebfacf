"""How the UHP client retries a POST and follows a stream (plain settings, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from bridge._config import FollowConfig as FollowConfig


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How ``POST /v1/responses`` is retried (always with the same Idempotency-Key)."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: float = 0.25
    session_busy_deadline_s: float = 600.0  # keep retrying session_busy this long
