"""A separate virtualenv holding an MCP SDK release that speaks the 2025-11-25 experimental tasks.

The bridge's own venv has ``mcp`` 2.x, whose server side no longer offers the 2025-11-25 tasks
(``params.task``, ``tasks/get|result|cancel``). The 1.2x releases shipped them server-side
(``server.experimental.enable_tasks()``, from 1.23.0; 1.27.0+ negotiate ``2025-11-25``), so the
tests run :mod:`tests.servers.legacy_tasks_server` with the python of ``.venv-legacy-mcp/`` at the
repository root. It is built once and kept: a stamp file names the pinned requirement, and a
venv whose stamp matches is reused as it is (a changed pin rebuilds it).

``make test`` builds it first (``python -m tests.support.legacy_venv``); a session fixture
calls :func:`ensure_legacy_venv` too, so ``pytest`` alone works from a clean clone. No pytest
imports: the Makefile runs this module.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness_examples.launch import ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGACY_VENV = Path(os.environ.get("BRIDGE_LEGACY_MCP_VENV", REPO_ROOT / ".venv-legacy-mcp"))
# The newest 1.x release: it negotiates 2025-11-25 and ships its experimental tasks.
LEGACY_MCP_REQUIREMENT = "mcp==1.30.0"
_STAMP = ".installed"


def legacy_python(venv: Path = LEGACY_VENV) -> Path:
    return venv / "bin" / "python"


def _stamp_matches(venv: Path) -> bool:
    stamp = venv / _STAMP
    try:
        return stamp.read_text().strip() == LEGACY_MCP_REQUIREMENT and legacy_python(venv).exists()
    except FileNotFoundError:
        return False


def _install(venv: Path, requirement: str) -> None:
    """A new venv at ``venv`` holding ``requirement``: by uv when the bridge's venv has it
    (a few seconds), else by the new venv's own pip (20-35 s)."""
    if importlib.util.find_spec("uv") is not None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        # Bytecode compiled at install, as pip does (see the Makefile).
        uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--compile-bytecode"]
        done = subprocess.run([*uv, "--python", str(legacy_python(venv)), requirement])
        if done.returncode == 0:
            return
        shutil.rmtree(venv)  # uv could not reach the packages; pip, with its own settings, may
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(legacy_python(venv)), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--disable-pip-version-check", requirement], check=True)


def ensure_legacy_venv(venv: Path = LEGACY_VENV) -> Path:
    """The legacy venv's python, building the venv first unless its stamp matches the pin.

    Built in a sibling directory and renamed into place, so an interrupted build never leaves a
    half-installed venv that looks ready.
    """
    if _stamp_matches(venv):
        return legacy_python(venv)
    building = venv.with_name(venv.name + f".building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    _install(building, LEGACY_MCP_REQUIREMENT)
    (building / _STAMP).write_text(LEGACY_MCP_REQUIREMENT + "\n")
    # Only ``bin/python -m ...`` is ever run (a symlink, and sys.prefix follows pyvenv.cfg),
    # so the pip scripts' shebangs naming the build directory do not matter.
    shutil.rmtree(venv, ignore_errors=True)
    try:
        building.rename(venv)
    except OSError:  # another process (a parallel test run) put its build there first
        shutil.rmtree(building, ignore_errors=True)
        if not _stamp_matches(venv):
            raise
    return legacy_python(venv)


class LegacyServerProcess(ServerProcess):
    """A test server run by the legacy venv's python instead of the bridge's."""

    def __init__(self, module: str, *, python: Path, args: list[str]) -> None:
        super().__init__(module, args=args)
        self.python = python

    def command(self) -> list[str]:
        return [str(self.python), *super().command()[1:]]


def main() -> None:
    started = time.monotonic()
    python = ensure_legacy_venv()
    print(f"legacy MCP venv ready: {python} ({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    main()
