"""The report harness's configuration file (JSON), shaped like UHP harness objects.

    {
      "harnesses": [
        {"id": "chrn_reports", "name": "Reports", "base": "scripted", "model": "scripted-1",
         "mcpServers": [{"name": "reports", "url": "http://127.0.0.1:8701/mcp",
                         "enabled": true, "auth": {"credential_ref": "reports-token"}}]}
      ],
      "tokens": ["<bearer token>", ...],
      "credentials": {"reports-token": "<token for the MCP server>"},
      "pace_seconds": 0.03, "think_seconds": 0.6, "count_interval_seconds": 0.25,
      "keepalive_seconds": 15, "wait_deadline_seconds": 60, "max_body_bytes": 1048576,
      "terminal_write_seconds": 5
    }

Bearer tokens may also come from the environment (``REPORT_HARNESS_TOKENS``, comma-separated);
both sources are accepted. Credentials are resolved only when the harness connects to an MCP
server and are never returned by the API.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.uhp.serving import MAX_BODY_BYTES

TOKENS_ENV = "REPORT_HARNESS_TOKENS"
DEFAULT_MODEL = "scripted-1"
DEFAULT_BASE = "scripted"


class ConfigError(ValueError):
    """The configuration file is unusable."""


@dataclass(frozen=True)
class McpServerEntry:
    name: str
    url: str
    enabled: bool = True
    transport: str = "http"
    credential_ref: str | None = None
    header_names: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        """The UHP ``McpServer`` object; a credential is shown by reference only."""
        out: dict[str, Any] = {
            "name": self.name,
            "url": self.url,
            "transport": self.transport,
            "enabled": self.enabled,
        }
        if self.credential_ref:
            out["auth"] = f"credential_ref:{self.credential_ref}"
        if self.header_names:
            out["headers"] = {name: "<redacted>" for name in self.header_names}
        return out


@dataclass(frozen=True)
class HarnessEntry:
    id: str
    name: str
    base: str
    model: str
    system_prompt: str | None = None
    mcp_servers: tuple[McpServerEntry, ...] = ()
    disabled_tools: tuple[str, ...] = ()
    max_step: int | None = None
    timeout_seconds: int | None = None

    def server(self, name: str) -> McpServerEntry | None:
        return next((s for s in self.mcp_servers if s.name == name), None)

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "harness",
            "name": self.name,
            "base": self.base,
            "baseLabel": "Scripted report agent (deterministic, no model)",
            "defaultModel": self.model,
            "mcpServers": [s.public() for s in self.mcp_servers],
            "skills": [],
            "disabledTools": list(self.disabled_tools),
            "maxStep": self.max_step,
            "timeoutSeconds": self.timeout_seconds,
            "createdAt": 0,
        }
        if self.system_prompt is not None:
            out["systemPrompt"] = self.system_prompt
        return out


@dataclass(frozen=True)
class HarnessConfig:
    harnesses: tuple[HarnessEntry, ...]
    tokens: tuple[str, ...]
    credentials: dict[str, str] = field(default_factory=dict)
    pace_seconds: float = 0.03
    think_seconds: float = 0.6
    count_interval_seconds: float = 0.25
    keepalive_seconds: float = 15.0
    wait_deadline_seconds: float = 60.0
    max_body_bytes: int = MAX_BODY_BYTES  # a larger request body is refused with 413
    #: How long a blocking request waits for a refused terminal write before it is answered
    #: 202 (accepted, in progress); the write goes on being retried after that.
    terminal_write_seconds: float = 5.0

    def harness(self, harness_id: str) -> HarnessEntry | None:
        return next((h for h in self.harnesses if h.id == harness_id), None)

    @property
    def default_harness(self) -> HarnessEntry:
        return self.harnesses[0]


def _server(raw: Any, where: str) -> McpServerEntry:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ConfigError(f"{where}: an MCP server needs a string 'name'")
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{where}: MCP server {raw['name']!r} needs a 'url'")
    auth = raw.get("auth")
    ref = None
    if isinstance(auth, dict):
        ref = auth.get("credential_ref")
    elif isinstance(auth, str) and auth:
        ref = auth  # a bare string is treated as a reference, never as the token itself
    headers = raw.get("headers") or {}
    return McpServerEntry(
        name=raw["name"],
        url=url,
        enabled=bool(raw.get("enabled", True)),
        transport=str(raw.get("transport", "http")),
        credential_ref=ref if isinstance(ref, str) else None,
        header_names=tuple(sorted(headers)) if isinstance(headers, dict) else (),
    )


def _harness(raw: Any, index: int) -> HarnessEntry:
    where = f"harnesses[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object")
    hid = raw.get("id")
    if not isinstance(hid, str) or not hid.startswith("chrn_"):
        raise ConfigError(f"{where}: 'id' must be a string starting with 'chrn_'")
    servers = tuple(
        _server(s, f"{where}.mcpServers[{i}]") for i, s in enumerate(raw.get("mcpServers") or [])
    )
    names = [s.name for s in servers]
    if len(names) != len(set(names)):
        raise ConfigError(f"{where}: MCP server names must be unique")
    return HarnessEntry(
        id=hid,
        name=str(raw.get("name") or hid),
        base=str(raw.get("base") or DEFAULT_BASE),
        model=str(raw.get("model") or raw.get("defaultModel") or DEFAULT_MODEL),
        system_prompt=raw.get("systemPrompt"),
        mcp_servers=servers,
        disabled_tools=tuple(raw.get("disabledTools") or ()),
        max_step=raw.get("maxStep"),
        timeout_seconds=raw.get("timeoutSeconds"),
    )


def parse_config(data: dict[str, Any], env: dict[str, str] | None = None) -> HarnessConfig:
    env = dict(os.environ) if env is None else env
    raw_harnesses = data.get("harnesses") or []
    if not raw_harnesses:
        raise ConfigError("the configuration needs at least one harness")
    harnesses = tuple(_harness(h, i) for i, h in enumerate(raw_harnesses))
    ids = [h.id for h in harnesses]
    if len(ids) != len(set(ids)):
        raise ConfigError("harness ids must be unique")
    # Bridge server names are global to the process: one name, one URL.
    seen: dict[str, str] = {}
    for h in harnesses:
        for s in h.mcp_servers:
            if seen.setdefault(s.name, s.url) != s.url:
                raise ConfigError(f"MCP server {s.name!r} is configured with two different URLs")
    tokens = [t for t in data.get("tokens") or [] if isinstance(t, str) and t]
    tokens += [t.strip() for t in env.get(TOKENS_ENV, "").split(",") if t.strip()]
    if not tokens:
        raise ConfigError(f"no bearer tokens: set 'tokens' in the config or ${TOKENS_ENV}")
    credentials = data.get("credentials") or {}
    if not isinstance(credentials, dict):
        raise ConfigError("'credentials' must be an object of name -> secret")

    def num(name: str, default: float) -> float:
        value = data.get(name, default)
        if not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"{name!r} must be a non-negative number")
        return float(value)

    return HarnessConfig(
        harnesses=harnesses,
        tokens=tuple(dict.fromkeys(tokens)),
        credentials={str(k): str(v) for k, v in credentials.items()},
        pace_seconds=num("pace_seconds", 0.03),
        think_seconds=num("think_seconds", 0.6),
        count_interval_seconds=num("count_interval_seconds", 0.25),
        keepalive_seconds=max(num("keepalive_seconds", 15.0), 0.05),
        wait_deadline_seconds=num("wait_deadline_seconds", 60.0),
        max_body_bytes=max(int(num("max_body_bytes", MAX_BODY_BYTES)), 1),
        terminal_write_seconds=num("terminal_write_seconds", 5.0),
    )


def load_config(path: str | Path) -> HarnessConfig:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError("the configuration file must hold a JSON object")
    return parse_config(data)
