"""Test-side name of :mod:`harness_examples.launch` (servers as real subprocesses)."""

from harness_examples.launch import (
    HOST,
    REPO_ROOT,
    ServerProcess,
    ServerStartError,
    refused_port,
)

__all__ = ["HOST", "REPO_ROOT", "ServerProcess", "ServerStartError", "refused_port"]
