"""Test-side name of :mod:`harness_examples.launch` (servers as real subprocesses)."""

import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from harness_examples.launch import (
    HOST,
    REPO_ROOT,
    ServerProcess,
    ServerStartError,
    refused_port,
    server_logs_under,
)

__all__ = [
    "HOST",
    "REPO_ROOT",
    "ServerProcess",
    "ServerStartError",
    "loads_native_code_of",
    "quick_bench",
    "refused_port",
    "running_together",
    "server_logs_under",
]


def loads_native_code_of(pid: int, *packages: str) -> bool:
    """Whether a running process has mapped a compiled module of every one of ``packages``
    (``/proc/<pid>/maps``): which event loop and HTTP parser it actually serves on."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    paths = {fields[5] for line in maps if len(fields := line.split()) >= 6}
    return all(any(f"/{package}/" in path for path in paths) for package in packages)


@contextmanager
def running_together(procs: dict[str, ServerProcess]) -> Iterator[dict[str, ServerProcess]]:
    """Start the servers in parallel; stop every one of them on the way out."""
    try:
        with ThreadPoolExecutor(max_workers=len(procs)) as pool:
            for started in [pool.submit(p.start) for p in procs.values()]:
                started.result()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()


def quick_bench(tmp_path: Path, *sections: str) -> str:
    """The report of ``python -m bench.run --quick --only SECTIONS`` (small sizes), run in a
    subprocess. The benchmark smoke tests split the sections over three test files, so the
    test workers run them side by side."""
    out = tmp_path / "benchmarks.md"
    command = [sys.executable, "-X", "faulthandler", "-m", "bench.run", "--quick", "--only"]
    with subprocess.Popen(
        [*command, *sections, "--out", str(out)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as bench:
        try:
            _, stderr = bench.communicate(timeout=480)
        except subprocess.TimeoutExpired:
            # A hung benchmark says where it hangs: faulthandler prints every thread on SIGABRT.
            bench.send_signal(signal.SIGABRT)
            _, stderr = bench.communicate(timeout=60)
            raise AssertionError(f"bench.run hung; its threads:\n{stderr[-8000:]}") from None
    # A failure shows what the benchmark said, not only its exit status.
    assert bench.returncode == 0, f"bench.run exited {bench.returncode}:\n{stderr[-4000:]}"
    return out.read_text()
