"""Run servers (MCP, UHP harness) as real subprocesses on 127.0.0.1, for the demo and tests.

Crash, restart and kill scenarios need a server in another process (an in-process server
cannot be SIGKILLed without taking the test with it). ``ServerProcess`` starts
``python -m <module> --port <port> ...`` from the repository root, so ``tests.servers.*``
import, sends its output to a log file, and considers it ready once the port accepts TCP
connections (uvicorn binds only after the app's lifespan has started). No pytest imports:
usable from scripts too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_accepts(port: int, timeout: float = 0.2) -> bool:
    """Whether something on 127.0.0.1:``port`` accepts a TCP connection right now."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


class ServerStartError(RuntimeError):
    """The server process exited or did not open its port in time."""


class ServerProcess:
    """One test server subprocess, restartable on the same port."""

    def __init__(
        self,
        module: str,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.module = module
        self.args = list(args)
        self.env = dict(env or {})
        self.port = port if port is not None else free_port()
        self.log_dir = Path(tempfile.mkdtemp(prefix="mcp-test-server-"))
        self.log_path = self.log_dir / f"{module.rsplit('.', 1)[-1]}-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The Streamable HTTP endpoint."""
        return f"http://{HOST}:{self.port}/mcp"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, "--port", str(self.port), *self.args]

    def start(self, timeout: float = 20.0) -> ServerProcess:
        """Spawn the server and block until its port accepts connections."""
        if self.running:
            raise RuntimeError(f"{self.module} is already running (pid {self.pid})")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log_path.open("ab") as log:
            log.write(f"--- start: {' '.join(self.command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the test runner is not delivered here
            )
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.module} exited with code {code} before listening on port "
                    f"{self.port}; log {self.log_path}:\n{self.log_tail()}"
                )
            if port_accepts(self.port):
                return self
            if time.monotonic() >= deadline:
                self.kill()
                raise ServerStartError(
                    f"{self.module} did not listen on port {self.port} within {timeout}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (a crash: no cleanup runs) and reap."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM for a graceful shutdown, SIGKILL if it is not gone by ``timeout``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self, timeout: float = 20.0) -> ServerProcess:
        """Crash and come back on the same port (in-memory server state is lost)."""
        self.kill()
        return self.start(timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if exc is None:  # keep the log around when the block failed
            self.remove_logs()

    def remove_logs(self) -> None:
        """Delete the log directory (the process must not be running)."""
        if not self.running:
            shutil.rmtree(self.log_dir, ignore_errors=True)
