"""The TypeScript peers of the interoperability tests (``tests/interop/ts``): installed from
the pinned lockfile with ``npm ci`` when missing, the Tasks server run as a real subprocess,
and what it logged about every request it received.

Node comes from the system (Debian's ``nodejs``/``npm``; ``.ci/run`` installs them). Without
``node`` the tests are skipped with that reason; with it, a failed install is a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import REPO_ROOT, ServerProcess

TS_DIR = REPO_ROOT / "tests" / "interop" / "ts"
LOCKFILE = TS_DIR / "package-lock.json"
# Written once `npm ci` succeeded: the lockfile digest and node version it installed for.
STAMP = TS_DIR / "node_modules" / ".bridge-install-stamp"
INSTALL_TIMEOUT_S = 600


def node_missing() -> str | None:
    """Why the TypeScript peers cannot run here, or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install nodejs npm)"
    return None


def node_version() -> str:
    return subprocess.run(
        ["node", "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def _stamp_text() -> str:
    digest = hashlib.sha256(LOCKFILE.read_bytes()).hexdigest()
    return f"{digest} {node_version()}\n"


def ensure_installed() -> None:
    """``npm ci`` into ``tests/interop/ts`` unless the same lockfile is installed already."""
    npm_ci_once(TS_DIR, _stamp_text())


def npm_ci_once(folder: Path, wanted: str, ready: Callable[[], bool] = lambda: True) -> None:
    """``npm ci`` into ``folder`` from its lockfile unless the stamp already says ``wanted``
    (and ``ready()``). One process installs at a time (a file lock): test workers share it."""
    stamp = folder / "node_modules" / ".bridge-install-stamp"
    with (folder / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted and ready():
            return
        done = subprocess.run(
            # Scripts off: the Inspector's postinstall only matters in its own source tree.
            ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci in {folder} failed ({done.returncode}):\n{done.stderr}")
        stamp.write_text(wanted)


def installed_version(package: str) -> str:
    """The version of ``package`` the lockfile pins (what ``npm ci`` installs)."""
    lock = json.loads(LOCKFILE.read_text())
    return str(lock["packages"][f"node_modules/{package}"]["version"])


def node_bin(name: str) -> Path:
    """An executable an installed package provides (``node_modules/.bin``)."""
    return TS_DIR / "node_modules" / ".bin" / name


class TsTasksServer(ServerProcess):
    """``node tasks_server.mjs``: an MCP Tasks server on the official TypeScript SDK v2 and
    ext-tasks, restartable on the same port (its tasks live in memory: a restart loses them).
    ``adversarial``: the ADVERSARIAL mode, adding the ``adversarial_*`` tools that break the
    Tasks spec on purpose.

    Every instance started is kept in :attr:`started`, so a test module can check the wire of
    each one the bridge talked to (:func:`wire_problems`)."""

    started: list[TsTasksServer] = []  # noqa: RUF012 - the registry of this test process

    def __init__(
        self, *, push: bool = False, adversarial: bool = False, port: int | None = None
    ) -> None:
        super().__init__("ts_tasks_server", port=port)
        self.push = push
        self.adversarial = adversarial
        self.wire_log = self.log_dir / "wire.jsonl"
        TsTasksServer.started.append(self)

    def command(self) -> list[str]:
        return [
            *("node", str(TS_DIR / "tasks_server.mjs")),
            *("--port", str(self._port or 0), "--port-file", str(self.port_file)),
            *("--log-file", str(self.wire_log)),
            *(["--push"] if self.push else []),
            *(["--adversarial"] if self.adversarial else []),
        ]

    def wire(self) -> WireLog:
        """Everything the server logged so far."""
        text = self.wire_log.read_text() if self.wire_log.exists() else ""
        return WireLog([json.loads(line) for line in text.splitlines() if line])


@dataclass(frozen=True)
class WireLog:
    """The server's log: ``request`` (each JSON-RPC request as received, its standard
    headers and ext-tasks' verdict on its shape), ``created`` / ``reply`` (each task handle
    created and each ``tasks/get`` answered, with the ``pollIntervalMs`` it gave) and ``push``."""

    entries: Sequence[dict[str, Any]]

    def requests(self, *methods: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] == "request" and e["method"] in methods]

    def about(self, task_id: str, *methods: str) -> list[dict[str, Any]]:
        """The ``tasks/*`` requests naming ``task_id``."""
        return [r for r in self.requests(*methods) if (r["params"] or {}).get("taskId") == task_id]

    def of_kind(self, kind: str, task_id: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] == kind and e.get("task_id") == task_id]

    def after(self, at_ms: int) -> WireLog:
        """The entries logged at or after ``at_ms`` (the server's wall clock)."""
        return WireLog([e for e in self.entries if e["at_ms"] >= at_ms])

    def tasks_requests(self) -> list[dict[str, Any]]:
        """Every request whose method is a ``tasks/*`` one, known to the spec or not."""
        return [
            e for e in self.entries if e["kind"] == "request" and e["method"].startswith("tasks/")
        ]

    def schema_problems(self) -> list[str]:
        """Every request whose shape ext-tasks' own schema refused (method and issues)."""
        return [
            f"{r['method']} ({s['name']}): {s['issues']}"
            for r in self.requests(*{e.get("method", "") for e in self.entries})
            for s in r["schemas"]
            if not s["ok"]
        ]

    def header_problems(self) -> list[str]:
        """Every ``tasks/*`` request whose ``Mcp-Method`` / ``Mcp-Name`` headers do not
        mirror its method and ``params.taskId`` (SEP-2663's Streamable HTTP binding)."""
        problems = []
        for r in self.tasks_requests():
            headers = r["headers"]
            if headers["mcp-method"] != r["method"]:
                problems.append(f"{r['method']}: Mcp-Method {headers['mcp-method']!r}")
            if headers["mcp-name"] != (r["params"] or {}).get("taskId"):
                problems.append(f"{r['method']}: Mcp-Name does not name the task")
        return problems
