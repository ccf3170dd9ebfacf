"""The report harness's runtime: the live runs of this process, their event logs and the
scripted agent's steps, each tool call made through the bridge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio

from bridge import Bridge, BridgeSettings, Ledger, McpServerConfig, OuterStatus, WaitMode
from bridge.errors import DuplicateTaskHandle, InvalidTaskResponse, ServerConnectFailed
from bridge.uhp import nested_tasks_summary, to_uhp_event
from bridge.uhp.serving import (
    BearerAuth,
    Cursor,
    GroupCommit,
    LedgerRunner,
    StagedCommit,
    new_id,
    new_message_item,
    new_text_part,
    sse_frames,
)
from harness_examples.report_harness import agent
from harness_examples.report_harness.config import HarnessConfig, HarnessEntry
from harness_examples.report_harness.live import (
    Events,
    Incomplete,
    LiveRun,
    StoredLog,
    json_copy,
    stop_if_cancel_requested,
    to_json,
)
from harness_examples.report_harness.outcomes import describe, tool_trouble
from harness_examples.report_harness.settling import (
    terminal_record,
    write_until_stored,
    write_with_retry,
)
from harness_examples.report_harness.store import (
    DELTA_EVENTS,
    HarnessStore,
    StoredResponse,
)
from harness_examples.report_harness.writes import StoreWrite

log = logging.getLogger("report_harness")

CANCEL_ANSWER_SECONDS = 1.0
VENDOR = "report_harness"


class Runtime:
    """Owns the store, the bridge and every live run."""

    def __init__(self, config: HarnessConfig, store: HarnessStore, db_url: str) -> None:
        self.config = config
        self.store = store
        self.db_url = db_url
        self.auth = BearerAuth(config.tokens)
        self.live: dict[str, LiveRun] = {}
        self.create_lock = asyncio.Lock()
        self.bridge: Bridge | None = None
        self.shutting_down = False
        self.resumed: list[str] = []
        #: Runs whose terminal state the store refused past ``terminal_write_seconds``: their
        #: waiting requests are answered 202 with the stored (``in_progress``) body while the
        #: write is retried; streams stay open until it lands.
        self.unsettled: set[str] = set()
        #: Store writes and the bridge's ledger reads: inline on SQLite, threads otherwise.
        self._inline = LedgerRunner(inline=store.writes_inline)
        #: The event-log writes of all runs, committed a loop turn's worth at a time.
        self.turn_writes: GroupCommit[Cursor] = GroupCommit(store.transaction, gather_turn=True)

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A read of the store, in a worker thread."""
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A write of the store in a transaction of its own (a new response): on the event
        loop where it takes tens of microseconds (SQLite; a held write lock is waited for off
        the loop's back), in a worker thread otherwise. Never interrupted once asked for, as a
        write in a thread is not."""
        with anyio.CancelScope(shield=True):
            return await self._inline(fn, *args, **kwargs)

    async def commit(self, write: StoreWrite) -> None:
        """A write of the store (:meth:`HarnessStore.appending`...), committed with the others
        asked for in this turn of the event loop
        (:class:`~bridge.uhp.serving.GroupCommit`): durable when this returns; never
        interrupted once asked for. If the shared transaction fails, each write is committed
        again alone, so only a failing write fails; a database that cannot take writes
        (``LedgerUnavailable``) fails them all at once."""
        await self._inline.commit(self.turn_writes, StagedCommit(write, _nothing))

    # -- lifespan --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        servers = [
            McpServerConfig(name=s.name, url=s.url, credential_ref=s.credential_ref)
            for h in self.config.harnesses
            for s in h.mcp_servers
            if s.enabled  # disabled servers are never contacted, not even by recovery
        ]
        unique = list({s.name: s for s in servers}.values())
        settings = BridgeSettings(
            ledger_url=self.db_url,
            principals=self.auth.principals,
            mcp_servers=unique,
            credentials=self.config.credentials.get,
        )
        # The harness's own tables live beside the bridge's, in one database; its reads of the
        # bridge's records go through Bridge.read.
        async with Bridge(Ledger.open(self.db_url), settings, owns_ledger=True) as bridge:
            self.bridge = bridge
            await self.resume_all()
            try:
                yield
            finally:
                self.shutting_down = True  # stop, but leave in-flight responses resumable
                tasks = [t for r in self.live.values() for t in (r.task, r.forwarder) if t]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.bridge = None

    async def resume_all(self) -> None:
        """Responses left ``in_progress`` by an earlier process are resumed from their
        persisted step (tool calls are replayed by operation id, so none runs twice)."""
        for stored in await self.db(self.store.in_progress):
            harness = self.config.harness(stored.harness_id)
            run = self._live_from(stored, harness or self.config.default_harness)
            self.live[run.id] = run
            self.resumed.append(run.id)
            if harness is None:
                run.task = asyncio.create_task(
                    self._fail_unresumable(run, "its harness is no longer configured")
                )
            else:
                run.task = asyncio.create_task(self.execute(run, resumed=True))

    def _live_from(self, stored: StoredResponse, harness: HarnessEntry) -> LiveRun:
        return LiveRun(
            id=stored.id,
            principal=stored.principal,
            harness=harness,
            body=stored.body,
            request=stored.request,
            next_seq=stored.next_seq,
            step=stored.step,
            run_ref=stored.bridge_run_ref,
            bridge_cursor=stored.bridge_cursor,
        )

    async def _fail_unresumable(self, run: LiveRun, why: str) -> None:
        await self.finish(
            run,
            "failed",
            {
                "type": "harness_error",
                "code": "harness_error",
                "message": f"The harness restarted and could not resume this task: {why}.",
            },
        )

    # -- the event log ---------------------------------------------------------------------
    async def emit(
        self,
        run: LiveRun,
        type_: str,
        *,
        step: int | None = None,
        forwarded_seq: int | None = None,
        **payload: Any,
    ) -> None:
        """Append one event to the run's log (and the snapshot it produced), durably."""
        await self._append(run, [(type_, payload)], step=step, forwarded_seq=forwarded_seq)

    async def emit_all(self, run: LiveRun, events: Events, *, step: int | None = None) -> None:
        """Append the events of one step in one transaction, with the snapshot the last one
        produced: streams see them together, as they were made together (a step with no pause
        between its events), and a crash leaves all of them or none."""
        await self._append(run, events.items, step=step, forwarded_seq=None)

    async def _append(
        self,
        run: LiveRun,
        events: Sequence[tuple[str, dict[str, Any]]],
        *,
        step: int | None,
        forwarded_seq: int | None,
    ) -> None:
        async with run.lock:
            if forwarded_seq is not None:
                if forwarded_seq <= run.bridge_cursor:
                    return  # already forwarded
                run.bridge_cursor = forwarded_seq
            if step is not None:
                run.step = step
            first = run.next_seq
            rows = [
                (type_, to_json({"type": type_, "sequence_number": seq, **payload}))
                for seq, (type_, payload) in enumerate(events, start=first)
            ]
            # Advance first: a cancellation delivered while the (uncancellable) write runs
            # must not make the next event reuse these numbers.
            run.next_seq = first + len(rows)
            # Deltas store only themselves (the stored body catches up at the next item
            # boundary, and a read in between folds the pending deltas in: see the store), so
            # a streamed word costs the same however long the response already is.
            body_json = None if rows[-1][0] in DELTA_EVENTS else to_json(run.body)
            try:
                cursor = run.bridge_cursor if forwarded_seq is not None else None
                await self.commit(
                    self.store.appending(
                        run.id,
                        first,
                        rows,
                        body_json,
                        run.body["status"],
                        step=step,
                        bridge_cursor=cursor,
                    )
                )
            except asyncio.CancelledError:
                raise
            except BaseException:
                run.next_seq = first  # nothing was written
                raise
            finally:
                run.signal.notify()

    def snapshot(self, run: LiveRun) -> dict[str, Any]:
        body: dict[str, Any] = json_copy(run.body)
        return body

    def frames(self, response_id: str, start: int) -> AsyncIterator[bytes]:
        """The persisted log from ``start`` on as SSE frames, live until the terminal event."""
        log_source = StoredLog(self, response_id)
        return sse_frames(log_source, start, keepalive_s=lambda: self.config.keepalive_seconds)

    # -- starting a run --------------------------------------------------------------------
    def start(self, run: LiveRun) -> None:
        self.live[run.id] = run
        run.task = asyncio.create_task(self.execute(run, resumed=False), name=f"run-{run.id}")

    async def execute(self, run: LiveRun, *, resumed: bool) -> None:
        try:
            budget = run.request.get("timeout_seconds")
            with anyio.fail_after(budget if isinstance(budget, int) and budget > 0 else None):
                await self._execute(run, resumed=resumed)
        except TimeoutError:
            run.body["incomplete_details"] = {"reason": "timeout_seconds"}
            await self.finish(run, "incomplete")
        except asyncio.CancelledError:
            if self.shutting_down:
                raise  # leave it in_progress: the next process resumes it
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self.finish(run, "cancelled")
        except Incomplete as exc:
            run.body["incomplete_details"] = {"reason": exc.reason}
            await self.finish(run, "incomplete")
        except Exception as exc:  # the task fails; the server does not
            log.exception("response %s failed", run.id)
            error = {
                "type": "harness_error",
                "code": "harness_error",
                "message": f"The scripted agent failed: {type(exc).__name__}.",
            }
            await self.finish(run, "failed", error)

    async def _execute(self, run: LiveRun, *, resumed: bool) -> None:
        assert self.bridge is not None
        stop_if_cancel_requested(run)
        if run.next_seq == 0:
            opening = Events()
            opening.add("response.created", response=self.snapshot(run))
            opening.add("response.in_progress", response=self.snapshot(run))
            await self.emit_all(run, opening)
        if run.run_ref is None:
            view = await self.bridge.register_served_run(
                run.principal,
                response_id=run.id,
                session_id=run.body["metadata"]["session_id"],
                harness_id=run.harness.id,
                harness="report_harness",
            )
            run.run_ref = view.ref
            await self.commit(self.store.setting_bridge_run(run.id, view.ref))
        if resumed:
            ended = await self.bridge.run(run.principal, run.run_ref).view()
            if ended.status is not None and ended.status.is_terminal:
                # The bridge recorded the end, then this store's terminal write gave up before
                # the restart: settle as recorded, never re-run to a different ending.
                await self.finish(run, ended.status.value, ended.error)
                return
            await self.emit(run, f"{VENDOR}.resumed", resumed_at_step=run.step)
            await self._close_open_items(run)
        run.forwarder = asyncio.create_task(self._forward(run))
        steps = agent.plan(run.request["text"], run.request.get("previous_answer"))
        if run.step == 0 and self.config.think_seconds:
            await asyncio.sleep(self.config.think_seconds)
        max_step = run.request.get("max_step")
        tool_steps_done = sum(1 for s in steps[: run.step] if isinstance(s, agent.ToolStep))
        for index in range(run.step, len(steps)):
            stop_if_cancel_requested(run)
            step = steps[index]
            if isinstance(step, agent.ToolStep):
                if isinstance(max_step, int) and tool_steps_done >= max_step:
                    raise Incomplete("max_step")
                await self._tool_step(run, index, step)
                tool_steps_done += 1
            elif isinstance(step, agent.CountStep):
                deltas = [f"{n}\n" for n in range(step.start, step.end + 1)]
                await self._message(run, index, deltas, self.config.count_interval_seconds)
            else:
                text = step.text or agent.summary_text(run.body["output"])
                words = text.split(" ")
                deltas = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
                await self._message(run, index, deltas, self.config.pace_seconds)
        await self.finish(run, "completed")

    async def _close_open_items(self, run: LiveRun) -> None:
        """Items a crash left open end ``incomplete``; their step is re-run as a new item."""
        for index, item in enumerate(run.body["output"]):
            if item.get("status") == "in_progress":
                item["status"] = "incomplete"
                await self.emit(
                    run, "response.output_item.done", output_index=index, item=json_copy(item)
                )

    async def _message(self, run: LiveRun, index: int, deltas: list[str], pause: float) -> None:
        """One message item; with a ``pause`` each word is stored (and streamed) on its own,
        without one the whole item is one step's events."""
        item = new_message_item()
        out = run.body["output"]
        out.append(item)
        where = {"item_id": item["id"], "output_index": len(out) - 1}
        events = Events()
        events.add("response.output_item.added", output_index=len(out) - 1, item=json_copy(item))
        part = new_text_part()
        item["content"].append(part)
        events.add("response.content_part.added", **where, content_index=0, part=json_copy(part))
        for delta in deltas:
            if pause:
                await self.emit_all(run, events)
                events = Events()
                await asyncio.sleep(pause)
                stop_if_cancel_requested(run)
            part["text"] += delta
            events.add("response.output_text.delta", **where, content_index=0, delta=delta)
        events.add("response.output_text.done", **where, content_index=0, text=part["text"])
        events.add("response.content_part.done", **where, content_index=0, part=json_copy(part))
        item["status"] = "completed"
        events.add(
            "response.output_item.done", output_index=where["output_index"], item=json_copy(item)
        )
        await self.emit_all(run, events, step=index + 1)

    async def _tool_step(self, run: LiveRun, index: int, step: agent.ToolStep) -> None:
        assert self.bridge is not None and run.run_ref is not None
        call_id = f"call_{run.id[5:13]}_{index}"
        arguments = json.dumps(step.arguments, sort_keys=True)
        call = {
            "id": new_id("fc_"),
            "type": "function_call",
            "call_id": call_id,
            "name": f"{step.server}.{step.tool}",
            "arguments": "",
            "status": "in_progress",
        }
        out = run.body["output"]
        out.append(call)
        pos = len(out) - 1
        events = Events()
        events.add("response.output_item.added", output_index=pos, item=json_copy(call))
        call["arguments"] = arguments
        events.add(
            "response.function_call_arguments.delta",
            item_id=call["id"],
            output_index=pos,
            delta=arguments,
        )
        events.add(
            "response.function_call_arguments.done",
            item_id=call["id"],
            output_index=pos,
            arguments=arguments,
        )
        call["status"] = "completed"
        events.add("response.output_item.done", output_index=pos, item=json_copy(call))
        await self.emit_all(run, events)

        result = await self._call(run, index, step)
        result_item = {
            "id": new_id("fco_"),
            "type": "function_call_output",
            "call_id": call_id,
            "output": json.dumps(result),
            "status": "completed",
        }
        out.append(result_item)
        pos = len(out) - 1
        events = Events()
        events.add("response.output_item.added", output_index=pos, item=json_copy(result_item))
        events.add("response.output_item.done", output_index=pos, item=json_copy(result_item))
        await self.emit_all(run, events, step=index + 1)

    async def _call(self, run: LiveRun, index: int, step: agent.ToolStep) -> dict[str, Any]:
        """One bridged MCP call; the result as the agent sees it (never raises)."""
        assert self.bridge is not None and run.run_ref is not None
        server = run.harness.server(step.server)
        if server is None:
            return {"outcome": "error", "error": f"no MCP server named {step.server!r}"}
        if not server.enabled:
            return {"outcome": "skipped", "error": f"MCP server {step.server!r} is disabled"}
        if step.tool in run.harness.disabled_tools:
            return {"outcome": "skipped", "error": f"tool {step.tool!r} is disabled"}
        mode = WaitMode(step.policy) if step.policy else None
        try:
            outcome = await self.bridge.run(run.principal, run.run_ref).call_tool(
                step.server,
                step.tool,
                step.arguments,
                operation_id=f"{run.id}:step-{index}",
                wait=mode,
                wait_deadline_s=self.config.wait_deadline_seconds,
            )
        except ServerConnectFailed as exc:
            await self.emit(
                run,
                f"{VENDOR}.mcp_server.unreachable",
                server=step.server,
                tool=step.tool,
                detail="the MCP server could not be reached; nothing was sent",
            )
            log.warning("response %s: %s", run.id, exc)
            return {"outcome": "server_unreachable", "server": step.server}
        except (InvalidTaskResponse, DuplicateTaskHandle) as exc:
            # The server misbehaved on this one call: the step's output says so and the run
            # goes on. A fixed text per kind: the exception's own text may quote the server.
            log.warning("response %s step %d: %s", run.id, index, type(exc).__name__)
            return tool_trouble(exc)
        return describe(outcome)

    async def _forward(self, run: LiveRun) -> None:
        """Bridge events of this run -> vendor events in the response's own log."""
        assert self.bridge is not None and run.run_ref is not None
        async for event in self.bridge.run(run.principal, run.run_ref).subscribe(
            after_seq=run.bridge_cursor
        ):
            body = to_uhp_event(event)
            if body is None:
                async with run.lock:
                    run.bridge_cursor = max(run.bridge_cursor, event.seq)
                continue
            kind = body.pop("type")
            await self.emit(run, kind, forwarded_seq=event.seq, **body)

    async def _drain(self, run: LiveRun) -> None:
        """Forward what the bridge recorded for this run and was not forwarded yet."""
        if run.forwarder is not None:
            run.forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run.forwarder
        if run.run_ref is None or self.bridge is None:
            return
        run_ref, cursor = run.run_ref, run.bridge_cursor
        events: list[tuple[str, dict[str, Any]]] = []
        last_seq = 0
        for event in await self.bridge.read(
            run.principal, lambda reader: reader.events(run_ref, after_seq=cursor)
        ):
            body = to_uhp_event(event)
            if body is not None:
                events.append((body.pop("type"), body))
                last_seq = event.seq
        if events:  # one append: they were recorded before the run ended, and end it together
            await self._append(run, events, step=None, forwarded_seq=last_seq)

    async def finish(self, run: LiveRun, status: str, error: dict[str, Any] | None = None) -> None:
        """End the run: its terminal state is stored (retried up to a deadline) before memory
        says so, and whatever happens, waiting requests are released and streams end."""
        if run.terminal or run.finishing:
            return
        run.finishing = True  # from here on a cancel request no longer interrupts the task
        try:
            try:
                await self._before_settling(run, status, error)
            except Exception:  # the terminal state matters more than the last vendor events
                log.exception("response %s: closing events not recorded", run.id)
            await self._settle(run, status, error)
        finally:
            run.done.set()
            self.live.pop(run.id, None)
            run.signal.notify()

    async def _before_settling(
        self, run: LiveRun, status: str, error: dict[str, Any] | None
    ) -> None:
        if self.bridge is None or run.run_ref is None:
            return
        await self._record_end(run, status, error)
        await self._drain(run)
        run_ref = run.run_ref
        summary = await self.bridge.read(
            run.principal, lambda reader: nested_tasks_summary(reader, run_ref)
        )
        run.body["metadata"].update(summary)

    async def _record_end(self, run: LiveRun, status: str, error: dict[str, Any] | None) -> None:
        """The run's end in the bridge's ledger (what its operators and recovery read)."""
        if self.bridge is None or run.run_ref is None:
            return
        with contextlib.suppress(Exception):
            await self.bridge.run(run.principal, run.run_ref).record_status(
                OuterStatus(status), error=error
            )

    async def _settle(self, run: LiveRun, status: str, error: dict[str, Any] | None) -> None:
        async with run.lock:
            record = terminal_record(run.body, status, error, run.next_seq)

            async def write() -> None:
                event = (record.event_type, record.event_json)
                await self.commit(
                    self.store.appending(
                        run.id, run.next_seq, [event], record.body_json, record.status
                    )
                )

            what = f"response {run.id} terminal state"
            deadline_s = self.config.terminal_write_seconds
            if not await write_with_retry(write, deadline_s=deadline_s, what=what):
                # Accepted work is finished, not dropped: waiting requests are told it is
                # still in progress, and the write goes on until the store takes it (a stop
                # first leaves it in_progress in the store: the next start resumes it).
                self.unsettled.add(run.id)
                run.done.set()

                async def after_the_bridge() -> None:
                    # The bridge's record of the end was refused too: made again first.
                    await self._record_end(run, status, error)
                    await write()

                await write_until_stored(after_the_bridge, what=what)
                self.unsettled.discard(run.id)
            run.body = record.body
            run.next_seq += 1

    # -- cancelling --------------------------------------------------------------------------
    async def cancel(self, response_ids: list[str]) -> None:
        runs = [self.live[r] for r in response_ids if r in self.live]
        for run in runs:
            run.cancel_requested = True
            if run.task is not None and not run.task.done() and not run.finishing:
                run.task.cancel()
        for run in runs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(run.done.wait()), CANCEL_ANSWER_SECONDS)


def _nothing(_: None) -> None:
    """What a committed store write settles to (its caller only needs it durable)."""
