"""How upstream tools are named at the gateway: ``<server>__<tool>`` (server names never
contain ``__``, the config refuses them; a tool name may)."""

from __future__ import annotations

SEPARATOR = "__"


def exposed_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_exposed(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an exposed name, or ``None`` if it names no upstream tool."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        return None
    return server, tool
