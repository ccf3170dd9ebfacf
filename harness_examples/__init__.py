"""Example harnesses and MCP task servers that use the bridge (see docs/)."""
