"""Public names say where users import them from, not the private module that defines them
(as httpx rewrites ``__module__``): reprs, docs and pickles show the public door."""

from __future__ import annotations

import contextlib
from typing import Any


def publish(value: Any, door: str) -> Any:
    """Point ``value.__module__`` at ``door`` when it is defined under ``bridge``'s private tree.

    A pydantic model still being built resolves its annotations through its module, so only a
    complete one is moved."""
    module = getattr(value, "__module__", None)
    if not isinstance(module, str) or not module.startswith("bridge.") or module == door:
        return value
    if not hasattr(value, "__qualname__"):
        return value
    if getattr(value, "__pydantic_complete__", True) is False:
        return value
    with contextlib.suppress(AttributeError, TypeError):  # a builtin: left as defined
        value.__module__ = door
    return value
