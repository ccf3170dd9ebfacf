"""The run page's live area over SSE: after each change in the run's event log, the area
re-rendered (:func:`bridge.console._run_page.live_fragment`) as one ``timeline`` event.

It follows :meth:`bridge.Run.subscribe`, which wakes on commits of any process sharing the
ledger (the harness that runs the call, the console answering it). Each update reads the run
as it is then, so a burst of events costs one render: events the last render already showed
are skipped. The event id is the run's last event ``seq``; a reconnecting ``EventSource``
sends it back (``Last-Event-ID``) and the stream goes on after it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bridge._facade import Bridge
from bridge.console._pages import Frame
from bridge.console._reads import run_snapshot
from bridge.console._run_page import live_fragment


def resume_point(after: str | None, last_event_id: str | None) -> int:
    """Where to go on from: the later of the page's ``after`` and the stream's last id."""
    points = [0]
    for value in (after, last_event_id):
        if value is not None and value.strip().isdigit():
            points.append(int(value.strip()))
    return max(points)


async def timeline_updates(
    bridge: Bridge,
    frame: Frame,
    run_ref: str,
    after: int,
    waiting: Callable[[str], Awaitable[int]],
) -> AsyncIterator[dict[str, Any]]:
    """SSE messages (``sse_starlette`` dicts) for the run's changes after ``after``;
    ``waiting``: how many items wait in the principal's inbox (the navigation's count)."""
    run = bridge.run(frame.principal, run_ref)
    shown = after
    async for event in run.subscribe(after_seq=after):
        if event.seq <= shown:
            continue  # the last render already included it
        snapshot, timeline = await run_snapshot(bridge, frame.principal, run_ref)
        shown = max([event.seq, *(e.seq for e in snapshot.events)])
        status = snapshot.run.status.value if snapshot.run.status is not None else "pending"
        data = {
            "seq": shown,
            "status": status,
            "attention": await waiting(frame.principal),
            "html": str(live_fragment(snapshot, timeline, frame)),
        }
        yield {"event": "timeline", "id": str(shown), "data": json.dumps(data)}
