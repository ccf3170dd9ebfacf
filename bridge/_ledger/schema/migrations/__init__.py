"""Alembic migrations of the ledger schema (applied by ``Ledger.open`` unless ``upgrade=False``)."""
