"""How the test workers share the tests (tests/support/scheduling.py): a split file's tests
each run alone only when no fixture of theirs is shared by a module or class (split, such a
fixture would start again on each worker, and its tests could not count on one instance) and
none is a ``@compat`` row; the order names only tests that exist."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.processes import REPO_ROOT
from tests.support.scheduling import LONGEST, SPLIT_FILES, SplitFileScheduling, rank

TESTS = Path(__file__).resolve().parent

# Collects the given files in a pytest of its own and prints, per test, its file, its
# function's name and the scopes of the fixtures it uses ("compat" for a @compat test: its
# parameters' outcomes are kept under one cache key, read and written by one worker at a time).
PROBE = """
import json, sys
import pytest

class Probe:
    def pytest_collection_finish(self, session):
        rows = []
        for item in session.items:
            defs = item._fixtureinfo.name2fixturedefs.values()
            scopes = sorted({d[-1].scope for d in defs if d})
            if item.get_closest_marker("compat") is not None:
                scopes.append("compat")
            rows.append([item.path.name, getattr(item, "originalname", item.name), scopes])
        print("PROBE" + json.dumps(rows))

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                      *sys.argv[1:]], plugins=[Probe()]))
"""


def collected(*files: str) -> list[tuple[str, str, list[str]]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *(str(TESTS / f) for f in files)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("PROBE"))
    return [(f, t, s) for f, t, s in json.loads(line[len("PROBE") :])]


def test_split_files_share_no_fixture_below_the_session_and_the_order_names_real_tests() -> None:
    rows = collected(*sorted(SPLIT_FILES))
    assert {f for f, _, _ in rows} == SPLIT_FILES  # every split file has tests
    below_session = [(f, t, s) for f, t, s in rows if set(s) - {"function", "session"}]
    assert below_session == [], below_session
    tests = {f"{f}::{t}" for f, t, _ in rows}
    for unit in LONGEST:
        assert (TESTS / unit.split("::")[0]).is_file(), unit
        assert "::" not in unit or unit in tests, unit  # a test of a split file
    assert len(set(LONGEST)) == len(LONGEST)


def test_a_split_files_tests_are_units_of_their_own_and_the_rest_go_by_file() -> None:
    scheduler = object.__new__(SplitFileScheduling)  # the scope rule needs no workers
    dbos = "tests/test_integration_dbos.py::test_a[sqlite]"
    assert scheduler._split_scope(dbos) == dbos
    gateway = "tests/test_gateway.py::test_b[x]"
    assert scheduler._split_scope(gateway) == "tests/test_gateway.py"
    first, last = LONGEST[0], LONGEST[-1].split("::")
    assert rank(first, "any_test") == 0
    assert rank(last[0], last[-1]) == len(LONGEST) - 1
    assert rank("test_not_listed.py", "t") == len(LONGEST)
