"""The web console (`bridge console`) as a real subprocess on 127.0.0.1, for the tests that
drive it over HTTP or from a browser."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from bridge.console._auth import token_digest
from tests.support.processes import ServerProcess

CONSOLE_MODULE = "bridge.console"


@contextmanager
def console_process(
    tmp_path: Path,
    db: Path | str,
    tokens: Mapping[str, str],
    *,
    mcp_servers: Mapping[str, str] | None = None,
    server_token: str | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """A console on ``db`` for ``tokens`` (principal -> token; the file holds digests only),
    answering through ``mcp_servers`` (name -> URL) with ``server_token`` as their bearer."""
    tokens_file = tmp_path / "console-tokens.json"
    tokens_file.write_text(
        json.dumps(
            {"principals": {p: {"token_sha256": token_digest(t)} for p, t in tokens.items()}}
        )
    )
    args = ["--db", str(db), "--tokens", str(tokens_file), *extra_args]
    env = {}
    if mcp_servers:
        config = tmp_path / "console-mcp.json"
        entries = [
            {"name": name, "url": url, "auth": {"credential_ref": "servers"}}
            for name, url in mcp_servers.items()
        ]
        config.write_text(json.dumps({"mcpServers": entries}))
        args += ["--mcp-config", str(config)]
        if server_token is not None:
            env["BRIDGE_CREDENTIAL_SERVERS"] = server_token
    with ServerProcess(CONSOLE_MODULE, args=args, env=env) as proc:
        yield proc


def base_url(proc: ServerProcess) -> str:
    """Where the console serves."""
    return f"http://127.0.0.1:{proc.port}"
