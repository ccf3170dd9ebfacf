"""Test-side name of :mod:`harness_examples.launch` (servers as real subprocesses)."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from harness_examples.launch import (
    HOST,
    REPO_ROOT,
    ServerProcess,
    ServerStartError,
    refused_port,
)

__all__ = [
    "HOST",
    "REPO_ROOT",
    "ServerProcess",
    "ServerStartError",
    "refused_port",
    "running_together",
]


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
