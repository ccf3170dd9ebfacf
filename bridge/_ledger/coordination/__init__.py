"""Coordination around the ledger: waking waiters on commits (in process and across
processes), replica membership and leases, fencing, and the SQLite write lock's availability."""
