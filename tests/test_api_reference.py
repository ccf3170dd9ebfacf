"""The API reference (``mkdocs.yml``: mkdocstrings over the docstrings) builds with
``--strict`` and no warning, and names every public name of :mod:`bridge`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import bridge
import bridge.uhp
from tests.support.processes import REPO_ROOT


def test_api_reference_builds_strict_without_warnings_and_covers_the_api(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output
    text = " ".join(page.read_text() for page in site.rglob("*.html"))
    headings = set(re.findall(r'id="(bridge(?:\.[a-z]\w*)*\.[A-Za-z_]\w*)"', text))
    public = {f"bridge.{n}" for n in bridge.__all__} | {
        f"bridge.uhp.{n}" for n in bridge.uhp.__all__
    }
    missing = sorted(public - headings)
    assert missing == [], f"public names without a section in the API reference: {missing}"


def test_the_reference_names_no_private_module() -> None:
    private = re.compile(r"^::: bridge(\.\w+)*\._", re.M)
    pages = (REPO_ROOT / "docs" / "reference").glob("*.md")
    assert sorted(p.name for p in pages if private.search(p.read_text())) == []
