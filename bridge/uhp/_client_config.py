"""How the UHP client retries a POST and follows a stream (plain settings, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass


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
    """How a remote UHP response is followed: read timeouts, re-reads, reconnects, and how often its
    stream position is committed."""

    inactivity_timeout_s: float = 75.0  # servers send ': keep-alive' at least every 30 s
    blocking_timeout_s: float = 900.0  # a blocking POST waits for the whole task
    reread_interval_s: float = 1.0  # re-reading a response that cannot be streamed again
    max_reconnects: int = 50
    checkpoint_interval_ms: int = 200  # how often the last seen sequence is committed
