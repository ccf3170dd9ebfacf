"""UHP <-> MCP Tasks bridge."""
