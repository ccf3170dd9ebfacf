"""How long a principal's finished runs are kept: a pure value, no I/O.

Off until configured: a bridge without a policy never removes anything. A policy removes a
*finished* run (see :mod:`bridge._ledger.retention.eligibility`) once it is older than
``max_age_days`` or beyond the newest ``keep_runs`` finished runs of its principal, and never
one that ended less than ``min_age_days`` ago (as Temporal's retention, at least a day by
default), whatever the count says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """When a principal's finished runs leave the ledger (``BridgeSettings.retention``).

    ``max_age_days``: a finished run whose last change is older than this goes (default 30;
    ``None``: age alone removes nothing). ``keep_runs``: keep at most this many finished runs,
    newest first (default ``None``: no count bound). ``min_age_days``: never remove a run that
    changed less than this ago (default 1, at least 0). The scheduled pruner of a running bridge
    runs every ``every_s`` seconds (default one hour), ``batch_runs`` runs per transaction
    (default 50), pausing between batches so calls go on: at least ``pause_s`` (default
    0.02 s) and, on PostgreSQL, at least ``pause_ratio`` times the last batch's own time
    (default 3: a prune holds the server at most a quarter of the time, however slow its
    batches are on a loaded machine).
    """

    max_age_days: float | None = 30.0
    keep_runs: int | None = None
    min_age_days: float = 1.0
    every_s: float = 3600.0
    batch_runs: int = 50
    pause_s: float = 0.02
    pause_ratio: float = 3.0

    def __post_init__(self) -> None:
        if self.max_age_days is not None and self.max_age_days < 0:
            raise ValueError("max_age_days is a number of days >= 0, or None")
        if self.keep_runs is not None and self.keep_runs < 0:
            raise ValueError("keep_runs is a count >= 0, or None")
        if self.min_age_days < 0:
            raise ValueError("min_age_days is a number of days >= 0")
        if self.every_s <= 0 or self.batch_runs < 1 or self.pause_s < 0 or self.pause_ratio < 0:
            raise ValueError(
                "every_s > 0, batch_runs >= 1, pause_s >= 0 and pause_ratio >= 0 are required"
            )

    @property
    def removes_anything(self) -> bool:
        """Whether the policy can remove a run at all (an age or a count bound is set)."""
        return self.max_age_days is not None or self.keep_runs is not None

    def pause_after(self, batch_s: float) -> float:
        """Seconds to pause after a batch that took ``batch_s``."""
        return max(self.pause_s, batch_s * self.pause_ratio)

    def age_cutoff_ms(self, now_ms: int) -> int | None:
        """Runs that last changed at or before this go by age (``None``: no age bound)."""
        if self.max_age_days is None:
            return None
        return now_ms - int(self.max_age_days * DAY_MS)

    def youngest_ms(self, now_ms: int) -> int:
        """No run that changed after this goes, whatever the bounds say."""
        return now_ms - int(self.min_age_days * DAY_MS)


#: What ``BridgeSettings.retention`` holds: one policy for every principal of the bridge, or one
#: per principal (principals missing from the mapping keep everything).
Retention = RetentionPolicy | Mapping[str, RetentionPolicy]


def policy_for(retention: Retention | None, principal: str) -> RetentionPolicy | None:
    """The policy that applies to ``principal`` (``None``: keep everything)."""
    if retention is None or isinstance(retention, RetentionPolicy):
        return retention
    return retention.get(principal)
