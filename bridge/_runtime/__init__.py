"""Composition above the two protocol sides: the parts the :class:`~bridge.Bridge`
wires together (outer runs, reads, waits, step results, recovery, agent states). Nothing here
speaks a wire protocol or writes a table itself: it calls :mod:`bridge._mcp`, :mod:`bridge.uhp`
and :mod:`bridge._ledger`."""
