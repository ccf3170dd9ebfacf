"""Run servers (MCP, UHP harness) as real subprocesses on 127.0.0.1, for the demo and tests.

Crash, restart and kill scenarios need a server in another process (an in-process server
cannot be SIGKILLed without taking the test with it). ``ServerProcess`` starts
``python -m <module> --port 0 --port-file F ...`` from the repository root, so
``tests.servers.*`` import, and sends its output to a log file. The child binds the port itself
and writes the number to ``F`` once its app has started (:mod:`harness_examples.port_report`);
that file is the readiness signal. No port is picked here and handed over, so no other process
can take it in between. A restart asks for the port first bound: the URL stays valid (ledgers
record endpoints). No pytest imports: usable from scripts too.
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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# Where each server's log folder is made (None: the system's temporary folder).
_log_root: Path | None = None


@contextmanager
def server_logs_under(folder: Path) -> Iterator[Path]:
    """Servers created inside the block keep their log folders under ``folder``.

    The tests point this into pytest's temporary folder, which keeps the last few sessions
    (a failed run's logs stay readable) and prunes older ones; ``bench.run`` into a folder it
    removes after a clean run. Without it, a server's log folder outlives it unless the
    server ran in a ``with`` block that ended cleanly (:meth:`ServerProcess.remove_logs`)."""
    global _log_root
    folder.mkdir(parents=True, exist_ok=True)
    before, _log_root = _log_root, folder
    try:
        yield folder
    finally:
        _log_root = before


@contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where connections are refused, for as long as the block runs.

    The socket stays bound but never listens: nothing else can take the port meanwhile, and a
    connect gets ``ECONNREFUSED`` at once (an unreachable server, deterministically)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield int(sock.getsockname()[1])


class ServerStartError(RuntimeError):
    """The server process exited or did not report its port in time."""


class ServerProcess:
    """One test server subprocess, restartable on the same port.

    ``port`` pins the port from the first start; by default the server binds any free port and
    :attr:`port` is known once :meth:`start` returned."""

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
        self._port = port
        self.log_dir = Path(tempfile.mkdtemp(prefix="mcp-test-server-", dir=_log_root))
        self.log_path = self.log_dir / f"{module.rsplit('.', 1)[-1]}.log"
        self.port_file = self.log_dir / "port"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        """The TCP port the server bound (known once it has been started)."""
        if self._port is None:
            raise RuntimeError(f"{self.module} has not been started: no port yet")
        return self._port

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
        port = str(self._port or 0)
        return [
            *(sys.executable, "-m", self.module),
            *("--port", port, "--port-file", str(self.port_file)),
            *self.args,
        ]

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Spawn the server and block until it reports the port it serves on."""
        if self.running:
            raise RuntimeError(f"{self.module} is already running (pid {self.pid})")
        self.port_file.unlink(missing_ok=True)  # a report left by an earlier run proves nothing
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
            reported = self._reported_port()
            if reported is not None:
                self._port = reported
                return self
            code = self._proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.module} exited with code {code} before serving; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise ServerStartError(
                    f"{self.module} did not report a port within {timeout}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def _reported_port(self) -> int | None:
        try:
            text = self.port_file.read_text()
        except FileNotFoundError:
            return None
        return int(text)  # written atomically by the child: whole or absent

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

    def restart(self, timeout: float = 60.0) -> ServerProcess:
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
