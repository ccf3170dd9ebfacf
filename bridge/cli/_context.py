"""What every command of the operator CLI shares: settings, consoles, the scoped ledger, errors.

Every read is scoped to ``--principal``; an expected failure is printed as one line (exit 1).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from sqlalchemy import inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from bridge._errors import BridgeError, LedgerUnavailable, NotFound
from bridge._ledger.commit.availability import first_line, unavailable_reason
from bridge._ledger.reader import LedgerReader
from bridge._ledger.schema.engine import normalize_url
from bridge._ledger.store import Ledger

REQUIRED_TABLE = "bridge_outer_responses"


class CliError(Exception):
    """A clear, expected failure: printed as one line, exit status 1 (no traceback)."""


@dataclass(slots=True)
class Settings:
    db: str | None
    principal: str | None

    def require_db(self) -> str:
        if not self.db:
            raise CliError("no ledger given: use --db URL or set BRIDGE_DB")
        return self.db

    def require_principal(self) -> str:
        if not self.principal:
            raise CliError("no principal given: use --principal P or set BRIDGE_PRINCIPAL")
        return self.principal


def out_console() -> Console:
    return Console(soft_wrap=False)


def err_console() -> Console:
    return Console(stderr=True)


def settings_of(ctx: typer.Context) -> Settings:
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def fail(message: str) -> NoReturn:
    err_console().print(
        Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True
    )
    raise typer.Exit(1)


def safe_url(url: str) -> str:
    """The URL without its password (for messages); a plain file path as given."""
    if "://" not in url:
        return url
    try:
        return make_url(normalize_url(url)).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


@contextmanager
def open_ledger(settings: Settings) -> Iterator[Ledger]:
    """Open an existing, migrated ledger without changing it; clear errors otherwise."""
    url = settings.require_db()
    full = normalize_url(url)
    parsed = make_url(full)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not Path(database).exists():
            raise CliError(
                f"no ledger at {safe_url(url)} (file not found); create it with "
                f"`bridge --db {safe_url(url)} db upgrade`"
            )
    try:
        ledger = Ledger.open(url, upgrade=False)
    except LedgerUnavailable as exc:
        raise CliError(exc.reason) from exc
    except SQLAlchemyError as exc:
        raise CliError(f"cannot open ledger at {safe_url(url)}: {type(exc).__name__}") from exc
    try:
        try:
            tables = set(inspect(ledger.engine).get_table_names())
        except SQLAlchemyError as exc:
            raise CliError(f"cannot read ledger at {safe_url(url)}: {type(exc).__name__}") from exc
        if REQUIRED_TABLE not in tables:
            raise CliError(
                f"the ledger at {safe_url(url)} has no bridge tables; "
                f"run `bridge --db {safe_url(url)} db upgrade` first"
            )
        yield ledger
    finally:
        ledger.close()


@contextmanager
def reader_scope(ctx: typer.Context) -> Iterator[LedgerReader]:
    settings = settings_of(ctx)
    principal = settings.require_principal()
    with open_ledger(settings) as ledger:
        yield LedgerReader(ledger, principal)


def _expected(exc: BaseException) -> BaseException:
    """The expected error inside a task group's exception group, if that is all it holds."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_expected(e) for e in exc.exceptions]
        known = [e for e in leaves if isinstance(e, CliError | BridgeError | SQLAlchemyError)]
        if known and len(known) == len(leaves):
            return known[0]
    return exc


def run_command(body: Any) -> None:
    """Run a command body, turning expected failures into one-line errors."""
    try:
        try:
            body()
        except BaseExceptionGroup as group:
            inner = _expected(group)
            if inner is group:
                raise
            raise inner from None
    except CliError as exc:
        fail(str(exc))
    except NotFound as exc:
        fail(f"{exc.kind} {exc.ref!r} not found for this principal")
    except LedgerUnavailable as exc:
        fail(str(exc))
    except BridgeError as exc:
        fail(f"{type(exc).__name__}: {exc}")
    except (SQLAlchemyError, sqlite3.Error) as exc:
        if _database_refused(exc):
            fail(f"ledger unavailable: {first_line(exc)}")
        fail(f"ledger error ({type(exc).__name__}); if the schema is old, run `bridge db upgrade`")


def _database_refused(exc: BaseException) -> bool:
    """The database itself refused (cannot open, not a database, read-only, locked, server
    down), as opposed to a query the schema does not fit."""
    driver_error = getattr(exc, "orig", None) or exc
    return isinstance(exc, OperationalError | sqlite3.OperationalError) or (
        unavailable_reason(driver_error) is not None
    )


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
RunArg = Annotated[str, typer.Argument(help="Run reference (run_…).")]
FollowForOpt = Annotated[
    float | None, typer.Option("--follow-for", hidden=True, help="Stop following after SECONDS.")
]
