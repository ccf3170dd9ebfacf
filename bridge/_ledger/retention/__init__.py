"""Retention: which finished runs a ledger may forget, removing them in short batches, the
archive written before they go, and returning the space they took."""
