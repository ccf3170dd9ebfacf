"""The ``bridge`` operator CLI: read a ledger (runs, show, timeline, events) and act on it
through the :class:`bridge.facade.Bridge` (recover, cancel-task, answer, db upgrade)."""

from bridge.extras import require_extra

require_extra("the operator CLI (bridge.cli)", "cli")
