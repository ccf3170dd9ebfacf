"""Command line: ``python -m harness_examples.report_harness``."""

from __future__ import annotations

import argparse
import gc
import logging
import sqlite3
import sys
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp

from bridge import Ledger
from bridge.errors import LedgerUnavailable
from bridge.uhp.serving import first_line, scrub_access_log
from harness_examples.port_report import add_port_arguments, check_port_arguments, run_uvicorn
from harness_examples.report_harness.config import (
    TOKENS_ENV,
    ConfigError,
    HarnessConfig,
    load_config,
)
from harness_examples.report_harness.server import create_app

GRACEFUL_SHUTDOWN_SECONDS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness_examples.report_harness",
        description="A native UHP harness server (class Core) with a deterministic scripted "
        "agent whose MCP tool calls go through the bridge.",
        epilog=f"Bearer tokens: the config file's 'tokens' list and/or ${TOKENS_ENV} "
        "(comma-separated). See the package docstring for the config format and the "
        "scripted agent's instructions.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    add_port_arguments(parser, default_port=8800)
    parser.add_argument(
        "--config", required=True, help="JSON config file: harnesses, tokens, credentials"
    )
    parser.add_argument(
        "--db",
        default="report-harness.db",
        help="database for responses, event logs and the bridge ledger: a SQLite file path "
        "or a postgresql:// URL (default report-harness.db)",
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    return parser


def open_app(config: HarnessConfig, db: str) -> ASGIApp:
    """The app, once the database is known to open (a one-line error otherwise, before
    anything is served: not a traceback from the server's start-up)."""
    Ledger.open(db).close()  # migrates the bridge's tables, as Bridge.open would
    try:
        return create_app(config, db)
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise LedgerUnavailable(f"cannot open {db}: {first_line(exc)}") from exc


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    logging.basicConfig(level=args.log_level.upper())
    if logging.getLogger().level >= logging.INFO:
        # The MCP SDK's HTTP client logs every request at INFO (each tools/call, poll and
        # listen): below the debug level those lines are noise, and cost a line each.
        logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.exit(f"report_harness: {exc}")
    try:
        app = open_app(config, args.db)
    except LedgerUnavailable as exc:
        sys.exit(f"report_harness: {exc}")
    scrub_access_log()  # a token given in a query string never reaches the access log
    # A server process: what the imports and the app built lives as long as it does. Frozen,
    # the collector no longer walks it (a full collection took up to 230 ms with the event
    # loop stopped, 15 ms frozen), and the young generation is collected every 20,000
    # allocations instead of 700: a response makes thousands of short-lived objects, most
    # freed by reference counting first (young collections over start-up and 400 responses:
    # 0.30 s of CPU, 0.16 s with these settings).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)
    run_uvicorn(
        app,
        args,
        args.host,
        log_level=args.log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


if __name__ == "__main__":
    main()
