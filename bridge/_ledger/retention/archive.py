"""The archive a prune writes before it deletes: compressed JSON Lines, one gzip member per batch.

Each member starts with a header line (``{"archive": "uhp-mcp-bridge", "version": 1,
"principal": …, "runs": n}``) followed by one ``{"table": …, "row": {…}}`` line per row, parents
first. Raw MCP task ids are never written: a task's ``task_id`` becomes ``[tk_…]`` and every text
that quoted it says ``[tk_…]`` instead, as the ledger's own events already do.

A member is flushed and synced before the batch's deletes commit, so a crash between the two
leaves a run in both the ledger and the archive (the next prune archives it again; an import
takes it once), never in neither.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "uhp-mcp-bridge"
VERSION = 1


class ArchiveError(ValueError):
    """An archive that cannot be read back: not one of ours, another version, or damaged."""


def _scrubbed(value: Any, raw_ids: Mapping[str, str]) -> Any:
    if not isinstance(value, str):
        return value
    for raw, ref in raw_ids.items():
        if raw:
            value = value.replace(json.dumps(raw)[1:-1], f"[{ref}]").replace(raw, f"[{ref}]")
    return value


def scrub_rows(rows: Mapping[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The rows with every raw task id (of the tasks among them) replaced by ``[tk_…]``."""
    raw_ids = {str(t["task_id"]): str(t["ref"]) for t in rows.get("bridge_inner_tasks", [])}
    return {
        table: [{k: _scrubbed(v, raw_ids) for k, v in row.items()} for row in table_rows]
        for table, table_rows in rows.items()
    }


def append_member(
    path: Path, principal: str, runs: int, rows: Mapping[str, list[dict[str, Any]]]
) -> int:
    """Append one batch to the archive at ``path`` as a gzip member, synced to disk; the
    compressed bytes written."""
    lines = [
        json.dumps({"archive": FORMAT, "version": VERSION, "principal": principal, "runs": runs})
    ]
    for table, table_rows in scrub_rows(rows).items():
        lines.extend(json.dumps({"table": table, "row": row}) for row in table_rows)
    data = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"))
    with open(path, "ab") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return len(data)


@dataclass(slots=True)
class Member:
    """One batch read back from an archive."""

    principal: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def read_members(path: Path) -> Iterator[Member]:
    """The batches of the archive at ``path``, in the order they were written."""
    member: Member | None = None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if "archive" in record:
                    if record.get("archive") != FORMAT or record.get("version") != VERSION:
                        raise ArchiveError(
                            f"{path}: line {number} is not a version {VERSION} "
                            "bridge archive header"
                        )
                    if member is not None:
                        yield member
                    member = Member(str(record["principal"]))
                elif member is None or "table" not in record or "row" not in record:
                    raise ArchiveError(f"{path}: line {number} is not an archive record")
                else:
                    member.rows.setdefault(str(record["table"]), []).append(record["row"])
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ArchiveError(f"{path}: {exc}") from exc
    if member is not None:
        yield member
