"""The MCP servers file the CLI and the gateway share: ``{"mcpServers": [...]}`` with
credential refs only; the tokens come from the environment (``BRIDGE_CREDENTIAL_<REF>``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from bridge._errors import BridgeError

if TYPE_CHECKING:
    from bridge._config import McpServerConfig


class McpConfigError(BridgeError, ValueError):
    """The MCP servers file cannot be read or does not have the expected shape."""


def credential_env_name(ref: str) -> str:
    """The environment variable a credential ref is read from: ``BRIDGE_CREDENTIAL_<REF>``."""
    return "BRIDGE_CREDENTIAL_" + re.sub(r"[^A-Za-z0-9]", "_", ref).upper()


def resolve_credential(ref: str) -> str | None:
    """The token for ``ref`` from the environment (None when it is not set)."""
    return os.environ.get(credential_env_name(ref))


def load_mcp_config(path: Path) -> list[McpServerConfig]:
    """``{"mcpServers": [{"name", "url", "enabled", "auth": {"credential_ref"}}]}`` (a mapping
    of name -> entry is accepted too). Tokens are never in this file: only credential refs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"cannot read MCP config {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"MCP config {path} is not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from exc
    # The MCP stack (SDK, transports) loads only for the callers that talk to a server.
    from bridge._config import McpServerConfig

    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if isinstance(entries, dict):
        entries = [{"name": name, **entry} for name, entry in entries.items()]
    if not isinstance(entries, list):
        raise McpConfigError(f'MCP config {path}: expected {{"mcpServers": [...]}}')
    servers = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise McpConfigError(f"MCP config {path}: server #{index} needs a string 'name'")
        auth = entry.get("auth") or {}
        if not isinstance(auth, dict):
            raise McpConfigError(
                f"MCP config {path}: server {entry['name']!r}: 'auth' must be object"
            )
        try:
            servers.append(
                McpServerConfig(
                    name=entry["name"],
                    url=entry.get("url"),
                    command=entry.get("command"),
                    args=tuple(entry.get("args") or ()),
                    env=entry.get("env"),
                    enabled=bool(entry.get("enabled", True)),
                    credential_ref=auth.get("credential_ref"),
                    retry_safe_tools=frozenset(entry.get("retry_safe_tools") or ()),
                )
            )
        except (TypeError, ValueError) as exc:
            raise McpConfigError(f"MCP config {path}: {exc}") from exc
    return servers
