"""What a fresh interpreter loads: for tests that keep heavy dependencies off an import path."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable

from harness_examples.launch import REPO_ROOT


def packages_loaded_by(code: str, packages: Iterable[str]) -> list[str]:
    """Which of ``packages`` (themselves or a submodule) are in ``sys.modules`` after a fresh
    interpreter ran ``code`` in the repository root."""
    wanted = list(packages)
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps([p for p in {wanted!r} if p in sys.modules "
        "or any(m.startswith(p + '.') for m in sys.modules)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))
