"""A throwaway PostgreSQL server for the test suite, on 127.0.0.1 only.

Started from the ``initdb``/``pg_ctl`` binaries on the machine. ``initdb`` refuses to run as
root, so under root the cluster is owned by and run as the unprivileged ``nobody`` user.
The server is stopped and its files removed when the test session ends, and also when the
process that started it dies without ending it (killed from outside): a small reaper process
holds a pipe from it and stops the server when that pipe closes.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, text

UNPRIVILEGED_USER = "nobody"
SUPERUSER = "bridge"


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def _candidate_port() -> int:
    """A port that was free a moment ago; another process may take it before PostgreSQL does."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# PostgreSQL cannot bind port 0 and report the port it got, so a port is chosen here and the
# first start retried on another one when something took it in between ("could not bind").
START_ATTEMPTS = 5


class ThrowawayPostgres:
    """A PostgreSQL server of its own in a temporary directory, on 127.0.0.1.

    Tuned for speed: no fsync, and commits acknowledged before their WAL is written unless
    ``durable_commits`` (a test that crashes the server must not lose acknowledged commits).
    """

    def __init__(self, *, durable_commits: bool = False) -> None:
        self.durable_commits = durable_commits
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise FileNotFoundError("initdb/pg_ctl not found (PostgreSQL 15 binaries)")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.base = Path(tempfile.mkdtemp(prefix="bridge-pg-"))
        self.data = self.base / "data"
        self.port = _candidate_port()
        self.as_root = os.geteuid() == 0
        self._reaper: subprocess.Popen[bytes] | None = None

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if self.as_root:
            command = ["runuser", "-u", UNPRIVILEGED_USER, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.base, user=UNPRIVILEGED_USER)
        self._run(
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        for attempt in range(1, START_ATTEMPTS + 1):
            logged_before = self._log_size()
            try:
                self.start_server()
                self._start_reaper()
                return
            except subprocess.CalledProcessError:
                if attempt == START_ATTEMPTS or not self._lost_the_port(since=logged_before):
                    raise
                self.port = _candidate_port()

    def _log_size(self) -> int:
        log = self.base / "server.log"
        return log.stat().st_size if log.exists() else 0

    def _lost_the_port(self, *, since: int) -> bool:
        """Whether the start that logged from offset ``since`` on failed for want of the port."""
        with (self.base / "server.log").open("rb") as log:
            log.seek(since)
            return b"could not bind" in log.read()

    def start_server(self) -> None:
        """Start the server on its data directory (again, after :meth:`kill_server`), on the
        same port: a restart keeps the URL clients were given."""
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        if not self.durable_commits:
            options += " -c synchronous_commit=off"
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.base / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def _start_reaper(self) -> None:
        """A process that stops the server and removes its files once this process is gone:
        it reads its stdin, which only this process writes, so the read ends at this process's
        exit however it comes (a SIGKILL included)."""
        stop = [self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"]
        if self.as_root:
            stop = ["runuser", "-u", UNPRIVILEGED_USER, "--", *stop]
        script = (
            "import shutil, subprocess, sys\n"
            "sys.stdin.buffer.read()\n"
            f"subprocess.run({stop!r}, capture_output=True, timeout=120)\n"
            f"shutil.rmtree({str(self.base)!r}, ignore_errors=True)\n"
        )
        self._reaper = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the test run must not end it first
        )

    def kill_server(self) -> None:
        """An outage: stop the server at once (no clean shutdown), keeping its data."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        try:
            self.kill_server()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            if self._reaper is not None:
                assert self._reaper.stdin is not None
                self._reaper.stdin.close()  # it finds nothing left to stop
                self._reaper.wait(timeout=120)

    def postmaster_pid(self) -> int:
        """The running server's postmaster (the first line of ``postmaster.pid``)."""
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """Create an empty database on the server behind ``admin_url``; drop it afterwards."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(admin_url)
    name = "t_" + uuid.uuid4().hex[:16]
    conninfo = dict(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=url.database or "postgres",
    )
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for_lock_waiters(engine: Engine, count: int, *, timeout_s: float = 30.0) -> None:
    """Until ``count`` sessions of ``engine``'s database wait on a lock (a deadline, not a
    sleep). Each look is a transaction of its own: within one transaction PostgreSQL keeps
    answering ``pg_stat_activity`` from the snapshot it took first, and would never see a
    session that started waiting after it."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        with engine.connect() as watch:
            if watch.execute(query).scalar_one() >= count:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} sessions came to wait on a lock")
        time.sleep(0.01)
