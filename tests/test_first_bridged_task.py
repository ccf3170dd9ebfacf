"""The newcomer's path (docs/guides/first-bridged-task.md), step by step as written, in a clean
venv outside the repository, timed: a venv, ``pip install`` of the wheel with ``[serve]``,
the example task server, the guide's script. The one difference: the server binds a free port
(``--port 0``, handed to the script as ``BRIDGE_MCP_URL``) instead of 8701, so the test never
races another process for that port, and the checkout is installed as a wheel built from it.
The script's output must be what the guide shows; run again, it sends nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.e2e  # builds a wheel and installs it in a clean venv (~30 s)

GUIDE = REPO_ROOT / "docs" / "guides" / "first-bridged-task.md"
BUDGET_S = 300  # the guide promises under 5 minutes


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def run(*argv: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_first_task_guide_runs_as_written_in_a_clean_venv(tmp_path: Path) -> None:
    shell = "\n".join(fenced("sh"))
    for command in (
        "python3 -m venv venv",
        'venv/bin/pip install "./uhp-mcp-bridge[serve]"',
        "venv/bin/python -m bridge.testing.server --port 8701",
        "venv/bin/python first_task.py",
    ):
        assert command in shell, f"the guide no longer says {command!r}"
    [script] = fenced("python")
    [expected] = fenced("text")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    uv = str(Path(sys.executable).with_name("uv"))
    timings: dict[str, float] = {}

    started = time.monotonic()
    run(uv, "build", "--wheel", "--quiet", "--out-dir", str(tmp_path / "dist"), str(REPO_ROOT),
        cwd=tmp_path, env=env)  # fmt: skip
    [wheel] = (tmp_path / "dist").glob("*.whl")
    timings["build the wheel (not a newcomer step)"] = time.monotonic() - started

    folder = tmp_path / "newcomer"
    folder.mkdir()
    total = time.monotonic()
    started = time.monotonic()
    base_python = getattr(sys, "_base_executable", sys.executable)
    run(base_python, "-m", "venv", "venv", cwd=folder, env=env)
    timings["python3 -m venv venv"] = time.monotonic() - started
    started = time.monotonic()
    run("venv/bin/pip", "install", "--quiet", f"{wheel}[serve]", cwd=folder, env=env)
    timings["pip install the wheel [serve]"] = time.monotonic() - started

    started = time.monotonic()
    port_file = folder / "port"
    server = subprocess.Popen(
        ["venv/bin/python", "-m", "bridge.testing.server", "--port", "0", "--port-file",
         str(port_file)],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert server.poll() is None, "the task server exited"
            assert time.monotonic() < deadline, "the task server did not start in 60 s"
            time.sleep(0.05)
        timings["start bridge.testing.server"] = time.monotonic() - started
        (folder / "first_task.py").write_text(script)
        started = time.monotonic()
        url = f"http://127.0.0.1:{int(port_file.read_text())}/mcp"
        out = run(
            "venv/bin/python", "first_task.py", cwd=folder, env={**env, "BRIDGE_MCP_URL": url}
        )
        timings["python first_task.py"] = time.monotonic() - started
        # Run again: the operation is replayed from the ledger, nothing is sent again.
        again = run(
            "venv/bin/python", "first_task.py", cwd=folder, env={**env, "BRIDGE_MCP_URL": url}
        )
    finally:
        server.terminate()
        server.wait(10)
    elapsed = time.monotonic() - total
    for step, seconds in timings.items():
        print(f"{seconds:6.1f} s  {step}")
    print(f"{elapsed:6.1f} s  the newcomer's steps in all")
    assert [line.rstrip() for line in out.splitlines()] == expected.rstrip().splitlines()
    rerun = [line.rstrip() for line in again.splitlines()]
    assert rerun == ["rerun: nothing sent again", *expected.rstrip().splitlines()[1:]]
    assert (folder / "first-task.db").is_file()
    assert elapsed < BUDGET_S
