"""How ``make test``'s worker processes share the tests (pytest-xdist).

A test file is one unit of work, run whole by one worker, so its module-scoped fixtures (the
servers a file starts once) start once. A file of ``SPLIT_FILES`` has none: each of its tests
is a unit of its own, so its long tests run on several workers side by side instead of one
after the other on one (``tests/test_scheduling.py`` keeps these files free of such fixtures).

Units are handed out in collection order, which ``tests/conftest.py`` sorts longest first
(``LONGEST``): a long unit started last would run alone at the end while the others idle.
"""

from __future__ import annotations

from pathlib import PurePath

from xdist.scheduler import LoadFileScheduling

# Files whose tests use only function- and session-scoped fixtures, with long tests.
SPLIT_FILES = frozenset(
    {
        "test_integration_dbos.py",
        "test_cli_recover_after_refusal.py",
        "test_bench_smoke.py",
        "test_retention_crash.py",
    }
)

# The longest units (from `make test PYTEST_ARGS=--durations=80`), longest first: a file, or
# ``file::test`` (every parameter of that test) in a split file. The rest keep their order.
LONGEST = (
    "test_docs_examples.py",
    "test_bench_smoke_history.py",
    "test_bench_smoke_replicas.py",
    "test_bench_smoke_hundred_k.py",
    "test_mcp_conformance.py",
    "test_integration_temporal_faults.py",
    "test_bench_smoke.py::test_bench_quick_run_writes_the_report",
    "test_first_bridged_task.py",
    "test_gateway_clients.py",
    "test_interop_typescript.py",
    "test_scale_out.py",
    "test_bench_smoke_temporal.py",
    "test_cli_recover_after_refusal.py::test_recover_from_the_terminal_after_a_refused_answer_sends_nothing",
    "test_integration_pydantic_ai.py",
    "test_gateway_inputs.py",
    "test_gateway.py",
    "test_report_harness_acceptance.py",
    "test_report_harness_hardening.py",
    "test_integration_dbos.py::test_unreachable_server_is_polled_with_backoff_and_its_restart_is_a_lost_result",
    "test_integration_dbos.py::test_worker_sigkilled_mid_task_is_resumed_by_dbos_recovery_on_the_same_handle",
    "test_integration_dbos.py::test_send_whose_reply_was_lost_becomes_unknown_and_is_never_sent_again",
    "test_integration_dbos.py::test_input_required_answered_by_an_operator_reaches_the_waiting_workflow_once",
    "test_integration_dbos.py::test_a_cancel_never_acknowledged_is_sent_by_the_recovered_workflow",
    "test_integration_dbos.py::test_worker_sigkilled_is_resumed_by_another_executor_on_the_same_handle",
    "test_integration_dbos.py::test_mcp_server_restart_is_a_lost_result_never_a_success",
    "test_bench_smoke_dbos.py",
    "test_integration_temporal.py",
    "test_retention_crash.py::test_sigkill_mid_prune_leaves_every_run_whole_or_gone",
    "test_integration_openai_agents.py",
    "test_mcp_real_server.py",
    "test_integration_langgraph.py",
    "test_demo.py",
)
_RANK = {unit: place for place, unit in enumerate(LONGEST)}


def rank(file_name: str, test_name: str) -> int:
    """Where a test's unit stands in ``LONGEST`` (after all of them when it is not there)."""
    return _RANK.get(f"{file_name}::{test_name}", _RANK.get(file_name, len(_RANK)))


class SplitFileScheduling(LoadFileScheduling):
    """xdist's ``--dist loadfile``, except that each test of a ``SPLIT_FILES`` file is a unit."""

    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        return nodeid if PurePath(file).name in SPLIT_FILES else file
