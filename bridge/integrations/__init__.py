"""Adapters for agent frameworks (each an optional extra; importing this package imports none
of them): :mod:`bridge.integrations.langgraph` (``uhp-mcp-bridge[langgraph]``)."""
