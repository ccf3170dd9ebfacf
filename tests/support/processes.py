"""Test-side name of :mod:`harness_examples.launch` (servers as real subprocesses)."""

from harness_examples.launch import (
    HOST,
    REPO_ROOT,
    ServerProcess,
    ServerStartError,
    free_port,
    port_accepts,
)

__all__ = ["HOST", "REPO_ROOT", "ServerProcess", "ServerStartError", "free_port", "port_accepts"]
