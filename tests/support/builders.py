"""Small builders that drive the ledger through its public write path."""

from __future__ import annotations

import secrets

from bridge._ledger.reads.views import RunView, TaskView
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import OuterStatus, TaskStatus

ENDPOINT = "http://127.0.0.1:9/mcp"


def new_run(tenant: TenantLedger, **ids: str) -> RunView:
    return tenant.runs.open_run(
        "local:test-harness",
        response_id=ids.get("response_id", "resp_" + secrets.token_hex(6)),
        session_id=ids.get("session_id", "hsess" + secrets.token_hex(6)),
        harness_id=ids.get("harness_id", "chrn_test"),
        status=OuterStatus.IN_PROGRESS,
    )


def new_task(
    tenant: TenantLedger,
    run_ref: str,
    *,
    task_id: str | None = None,
    tool: str = "generate_report",
    arguments: dict[str, object] | None = None,
    ttl_ms: int | None = 60_000,
    poll_interval_ms: int | None = 1_000,
    server_endpoint: str = ENDPOINT,
    server_name: str = "reports",
) -> TaskView:
    op = tenant.calls.begin_dispatch(
        run_ref,
        server_endpoint=server_endpoint,
        server_name=server_name,
        tool_name=tool,
        arguments=arguments if arguments is not None else {"quarter": "Q3"},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    return tenant.calls.record_task_created(
        op.ref,
        task_id=task_id or "task-" + secrets.token_hex(16),
        status=TaskStatus.WORKING,
        ttl_ms=ttl_ms,
        poll_interval_ms=poll_interval_ms,
    )
