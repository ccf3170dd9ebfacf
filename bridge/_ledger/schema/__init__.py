"""The ledger's tables, engines, dialect differences and Alembic migrations."""
