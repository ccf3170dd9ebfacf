"""A real second process holding SQLite's write lock on a database file."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEADLINE_S = 15.0

# A second process takes SQLite's write lock on the file and holds it until told to let go.
_HOLDER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
connection.execute("ROLLBACK")
"""


class HeldLock:
    """A real second process holding ``BEGIN IMMEDIATE`` on ``path`` until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], DEADLINE_S)
        assert ready and self._proc.stdout.readline().strip() == "held", "lock holder stuck"

    def release(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.write("\n")
            self._proc.stdin.flush()
            self._proc.wait(timeout=DEADLINE_S)


@contextmanager
def held_lock(path: Path) -> Iterator[HeldLock]:
    holder = HeldLock(path)
    try:
        yield holder
    finally:
        holder.release()
