"""A LangGraph checkpointer that keeps a thread's checkpoints beside its bridge run, in the
bridge's own ledger (:meth:`Run.save_agent_state`, name ``langgraph:<thread_id>``): one
database, one backup, and a SIGKILLed harness resumes the thread where the ledger resumes the
run's tasks."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from bridge.integrations.langgraph._tools import run_ref_of

if TYPE_CHECKING:
    from bridge._facade import Bridge

STATE_PREFIX = "langgraph:"


class BridgeCheckpointer(BaseCheckpointSaver[str]):
    """Async checkpointer for ``graph.ainvoke`` / ``astream`` (use ``aget_state``; the sync
    API is not offered). The graph config names the run: :func:`graph_config`.

    The state of one thread is one JSON document (≤ 4 MiB, versioned: a concurrent writer in
    another process fails with ``InvalidTransition`` instead of overwriting). It keeps the
    newest ``keep`` checkpoints per namespace with their pending writes: enough to resume, not
    an unbounded history (``get_state_history`` sees those ``keep``)."""

    def __init__(self, bridge: Bridge, principal: str, *, keep: int = 8) -> None:
        super().__init__()
        if keep < 2:
            raise ValueError("keep at least 2 checkpoints (a resume reads the parent's writes)")
        self.bridge = bridge
        self.principal = principal
        self.keep = keep
        self._lock = asyncio.Lock()

    # --- reads ---------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns = _thread(config), _namespace(config)
        saved = (await self._load(config))[0].get(ns, [])
        wanted = get_checkpoint_id(config)
        for entry in reversed(saved):
            if wanted is None or entry["id"] == wanted:
                return self._tuple(thread, ns, entry, config)
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            raise ValueError("BridgeCheckpointer lists one thread: pass its graph config")
        thread, ns = _thread(config), _namespace(config)
        wanted = get_checkpoint_id(config)
        upper = get_checkpoint_id(before) if before else None
        found = 0
        for entry in reversed((await self._load(config))[0].get(ns, [])):
            if wanted is not None and entry["id"] != wanted:
                continue
            if upper is not None and entry["id"] >= upper:
                continue
            item = self._tuple(thread, ns, entry, config)
            if filter and any(item.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield item
            found += 1
            if limit is not None and found >= limit:
                return

    # --- writes --------------------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread, ns = _thread(config), _namespace(config)
        entry = {
            "id": checkpoint["id"],
            "parent": get_checkpoint_id(config),
            "checkpoint": self._dump(checkpoint),
            "metadata": self._dump(get_checkpoint_metadata(config, metadata)),
            "writes": [],
        }

        def change(namespaces: dict[str, list[dict[str, Any]]]) -> None:
            kept = [e for e in namespaces.get(ns, []) if e["id"] != checkpoint["id"]]
            namespaces[ns] = sorted([*kept, entry], key=lambda e: str(e["id"]))[-self.keep :]

        await self._update(config, change)
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        ns, checkpoint_id = _namespace(config), get_checkpoint_id(config)

        def change(namespaces: dict[str, list[dict[str, Any]]]) -> None:
            entry = next((e for e in namespaces.get(ns, []) if e["id"] == checkpoint_id), None)
            if entry is None:  # pruned meanwhile: nothing resumes from it any more
                return
            stored: dict[tuple[str, int], list[Any]] = {(w[0], w[1]): w for w in entry["writes"]}
            for idx, (channel, value) in enumerate(writes):
                key = (task_id, WRITES_IDX_MAP.get(channel, idx))
                if key[1] >= 0 and key in stored:
                    continue  # a regular write is kept once; special ones are replaced
                stored[key] = [task_id, key[1], channel, self._dump(value), task_path]
            entry["writes"] = list(stored.values())

        await self._update(config, change)

    # --- storage -------------------------------------------------------------------------------

    async def _load(self, config: RunnableConfig) -> tuple[dict[str, list[dict[str, Any]]], int]:
        saved = await self.bridge.run(self.principal, run_ref_of(config)).agent_state(
            STATE_PREFIX + _thread(config)
        )
        if saved is None:
            return {}, 0
        namespaces: dict[str, list[dict[str, Any]]] = saved.state["namespaces"]
        return namespaces, saved.version

    async def _update(self, config: RunnableConfig, change: Any) -> None:
        async with self._lock:  # one read-modify-write at a time in this process
            namespaces, version = await self._load(config)
            change(namespaces)
            await self.bridge.run(self.principal, run_ref_of(config)).save_agent_state(
                STATE_PREFIX + _thread(config),
                {"namespaces": namespaces},
                expected_version=version,
            )

    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode("ascii")]

    def _load_value(self, dumped: list[str]) -> Any:
        return self.serde.loads_typed((dumped[0], base64.b64decode(dumped[1])))

    def _tuple(
        self, thread: str, ns: str, entry: dict[str, Any], config: RunnableConfig
    ) -> CheckpointTuple:
        def at(checkpoint_id: str) -> RunnableConfig:
            configurable = {**config.get("configurable", {}), "thread_id": thread}
            configurable.update(checkpoint_ns=ns, checkpoint_id=checkpoint_id)
            return {"configurable": configurable}

        writes = sorted(entry["writes"], key=lambda w: writes_sort_key(w[4], w[0], w[1]))
        return CheckpointTuple(
            config=at(entry["id"]),
            checkpoint=self._load_value(entry["checkpoint"]),
            metadata=self._load_value(entry["metadata"]),
            parent_config=at(entry["parent"]) if entry["parent"] else None,
            pending_writes=[(w[0], w[2], self._load_value(w[3])) for w in writes],
        )


def _thread(config: RunnableConfig) -> str:
    thread = config.get("configurable", {}).get("thread_id")
    if not thread:
        raise ValueError("the graph config names no thread_id: use graph_config(run_ref)")
    return str(thread)


def _namespace(config: RunnableConfig) -> str:
    return str(config.get("configurable", {}).get("checkpoint_ns", ""))
