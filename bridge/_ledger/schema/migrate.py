"""Schema migrations (Alembic), runnable from code and from ``bridge db upgrade``.

Alembic loads only when a migration may have to run: a ledger whose stored revision is already
:data:`HEAD_REVISION` is opened with one ``SELECT``, which spares every process start the import
of Alembic and the parsing of its scripts (~0.6 s on these machines).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "bridge_alembic_version"
#: The newest revision in ``migrations/versions`` (a test keeps the two equal).
HEAD_REVISION = "0015_resolved_work"


def alembic_config(engine: Engine | None = None) -> Config:
    from alembic.config import Config

    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if engine is not None:
        url = engine.url.render_as_string(hide_password=False)
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    """The newest revision the shipped migrations define (read from the scripts)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the ledger schema up to ``revision`` (default: the newest)."""
    if revision in ("head", HEAD_REVISION) and current_revision(engine) == HEAD_REVISION:
        return  # nothing to run
    from alembic import command

    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the ledger's version table holds, read with one ``SELECT`` (no Alembic);
    ``None`` when there is none (a new database) or not exactly one (an upgrade then leaves it
    to Alembic). A database that cannot be opened raises, as it would in Alembic."""
    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    return str(rows[0][0]) if len(rows) == 1 else None
