"""Public names say where users import them from, not the private module that defines them
(as httpx rewrites ``__module__``): reprs, docs and pickles show the public door."""

from __future__ import annotations

import contextlib
import importlib
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


def load_public(door: str, namespace: dict[str, Any], exports: dict[str, str], name: str) -> Any:
    """A door's lazy name (PEP 562 ``__getattr__``): imported from its private module on
    first use, published under ``door`` and cached in the door's namespace."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {door!r} has no attribute {name!r}")
    value = publish(getattr(importlib.import_module(module), name), door)
    namespace[name] = value  # later lookups skip __getattr__
    return value
