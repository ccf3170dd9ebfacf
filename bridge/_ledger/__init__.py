"""The ledger: the only writer of the bridge's tables. One module per aggregate over a private
base, composed in :mod:`bridge._ledger.store`; the runner that calls it from async code; its
schema, commit paths, reads and coordination in sub-packages."""
