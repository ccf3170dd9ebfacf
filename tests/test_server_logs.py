"""Test servers keep their logs where the run can find them, and leave nothing in /tmp."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import ServerProcess, server_logs_under


def test_a_test_servers_log_folder_is_under_pytests_temporary_folder(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = ServerProcess("tests.servers.tasks_server")
    assert server.log_dir.is_relative_to(tmp_path_factory.getbasetemp() / "server-logs")
    assert server.log_dir.is_dir()


def test_the_log_root_holds_inside_its_block_only(tmp_path: Path) -> None:
    outer = ServerProcess("tests.servers.tasks_server").log_dir.parent
    with server_logs_under(tmp_path / "inner") as inner:
        assert ServerProcess("tests.servers.tasks_server").log_dir.parent == inner
    after = ServerProcess("tests.servers.tasks_server").log_dir.parent
    assert after == outer != inner
