"""Reads of the ledger: immutable views, one principal's queries, and the lean reads a
waiting step makes on every wake."""
