"""One Alembic revision per file, numbered in order; the newest is ``migrate.HEAD_REVISION``."""
