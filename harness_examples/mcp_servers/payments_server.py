"""Example MCP payments server: a destructive, non-idempotent task tool gated on approval.

    python -m harness_examples.mcp_servers.payments_server --port 8702 --ledger payments.db
        [--host 127.0.0.1] [--token T]                 # Streamable HTTP on http://HOST:PORT/mcp
    python -m harness_examples.mcp_servers.payments_server --stdio --ledger payments.db

``approve_payment`` is a *required* task tool (MCP Tasks extension, fastmcp-tasks). Its first leg
asks for approval: the task parks in ``input_required`` with one form elicitation
(``{"approve": boolean}``). ``tasks/update`` with the answer re-enters the tool: on approval it
records the payment in the SQLite ledger (``--ledger``) and returns ``approved <payment_key>``,
otherwise ``declined <payment_key>``.

Every approved execution inserts a row; nothing de-duplicates on ``payment_key``, on purpose, so
a client that re-runs the call instead of resuming its task leaves a visible duplicate.
``payment_count(payment_key)`` (an ordinary inline tool) reports how many rows a key has. The
ledger file outlives the process; tasks do not (in-process ``memory://`` backend).

With ``--token`` (or ``$PAYMENTS_SERVER_TOKEN``) every HTTP request needs
``Authorization: Bearer <token>`` (see ``auth.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from pydantic import Field

from harness_examples.mcp_servers.auth import add_token_argument, check_transport, serve
from harness_examples.port_report import add_port_arguments

TOKEN_ENV = "PAYMENTS_SERVER_TOKEN"
POLL_INTERVAL = timedelta(milliseconds=200)
APPROVAL_KEY = "approve"  # the tool's own input key (the wire key is minted by fastmcp-tasks)
APPROVAL_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "true to execute the payment, false to decline it",
        }
    },
    "required": ["approve"],
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    payment_key TEXT NOT NULL,
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    payee TEXT NOT NULL,
    recorded_at TEXT NOT NULL
)
"""

mcp = FastMCP("example-payments-server")
mcp.add_extension(TasksExtension())  # memory:// Docket backend, in this process

_ledger: Path | None = None


def open_ledger(path: str | Path) -> None:
    """Use ``path`` as the payments ledger, creating the file and table if needed."""
    global _ledger
    _ledger = Path(path)
    with closing(_connect()) as db, db:
        db.execute(SCHEMA)


def _connect() -> sqlite3.Connection:
    if _ledger is None:
        raise RuntimeError("no ledger configured: call open_ledger() (CLI: --ledger PATH)")
    return sqlite3.connect(_ledger, timeout=10)


def _record_payment(payment_key: str, amount: int, currency: str, payee: str) -> None:
    recorded_at = datetime.now(UTC).isoformat()
    with closing(_connect()) as db, db:  # the inner ``db`` commits the transaction
        db.execute(
            "INSERT INTO payments (payment_key, amount, currency, payee, recorded_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (payment_key, amount, currency, payee, recorded_at),
        )


def _count_payments(payment_key: str) -> int:
    with closing(_connect()) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM payments WHERE payment_key = ?", (payment_key,)
        ).fetchone()
    return int(row[0])


def approval_request(
    amount: int, currency: str, payee: str, payment_key: str
) -> mcp_types.InputRequiredResult:
    """The first leg's answer: ask the user to approve this exact payment."""
    ask = mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(
            message=f"Approve payment of {amount} {currency} to {payee} (key {payment_key})?",
            requested_schema=APPROVAL_SCHEMA,
        )
    )
    return mcp_types.InputRequiredResult(input_requests={APPROVAL_KEY: ask})


def is_approved(answer: object) -> bool:
    """Only an accepted form whose ``approve`` field is literally ``true`` approves."""
    return (
        isinstance(answer, mcp_types.ElicitResult)
        and answer.action == "accept"
        and (answer.content or {}).get("approve") is True
    )


@mcp.tool(
    task=TaskConfig(mode="required", poll_interval=POLL_INTERVAL),
    annotations={"destructiveHint": True, "idempotentHint": False},
)
async def approve_payment(
    amount: Annotated[int, Field(gt=0, description="whole units, e.g. 120")],
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217, e.g. EUR")],
    payee: Annotated[str, Field(min_length=1, max_length=200)],
    payment_key: Annotated[str, Field(min_length=1, max_length=200)],
    ctx: Context,
) -> str | mcp_types.InputRequiredResult:
    """Pay ``amount currency`` to ``payee`` after an explicit approval (asked in the task)."""
    answers = ctx.input_responses
    if not answers:
        return approval_request(amount, currency, payee, payment_key)
    if not is_approved(answers.get(APPROVAL_KEY)):
        return f"declined {payment_key}"
    await asyncio.to_thread(_record_payment, payment_key, amount, currency, payee)
    return f"approved {payment_key}"


@mcp.tool(annotations={"readOnlyHint": True, "idempotentHint": True})
async def payment_count(payment_key: str) -> int:
    """How many times a payment with this key was recorded (more than 1: a duplicate)."""
    return await asyncio.to_thread(_count_payments, payment_key)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_port_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    parser.add_argument("--ledger", required=True, help="SQLite file recording payments")
    add_token_argument(parser, TOKEN_ENV)
    args = parser.parse_args(argv)
    check_transport(parser, args)
    open_ledger(args.ledger)
    serve(mcp, args, TOKEN_ENV)


if __name__ == "__main__":
    main()
