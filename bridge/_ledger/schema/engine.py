"""Database engines for the ledger: SQLite (WAL) embedded by default, PostgreSQL by URL.

What differs per database lives in :mod:`bridge._ledger.schema.dialects`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from bridge._extras import require_extra
from bridge._ledger.commit.availability import SQLITE_BUSY_TIMEOUT_MS
from bridge._ledger.schema.dialects import SqliteSynchronous, dialect_for_url

__all__ = [
    "DEFAULT_SQLITE_PATH",
    "SQLITE_BUSY_TIMEOUT_MS",
    "create_ledger_engine",
    "normalize_url",
]

DEFAULT_SQLITE_PATH = Path("bridge-ledger.db")


def normalize_url(url: str | Path | None) -> str:
    """Accept a SQLAlchemy URL, a plain ``postgresql://`` URL, or a file path for SQLite."""
    if url is None:
        return f"sqlite:///{DEFAULT_SQLITE_PATH}"
    text = str(url)
    if "://" not in text:
        return f"sqlite:///{text}"
    parsed = make_url(text)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return text


def create_ledger_engine(
    url: str | Path | None = None,
    *,
    sqlite_synchronous: SqliteSynchronous = "NORMAL",
    **kwargs: Any,
) -> Engine:
    """Create an engine tuned for short write transactions (see the dialect's
    ``create_engine``). ``sqlite_synchronous`` applies to SQLite only."""
    full_url = normalize_url(url)
    if make_url(full_url).drivername == "postgresql+psycopg":
        require_extra("a PostgreSQL ledger", "postgres")
    return dialect_for_url(full_url).create_engine(
        full_url, sqlite_synchronous=sqlite_synchronous, **kwargs
    )
