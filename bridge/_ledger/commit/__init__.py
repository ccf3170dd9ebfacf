"""How the ledger commits: the precompiled driver sessions of the call path and the group
commit that lets concurrent callers share a transaction."""
