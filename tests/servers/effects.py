"""The effects file test servers append to (stdlib only: the legacy-venv server imports it too)."""

from __future__ import annotations

import os
from pathlib import Path


def append_effect(path: Path | None, line: str) -> None:
    """Append one side-effect line; O_APPEND keeps concurrent writers from interleaving."""
    if path is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
