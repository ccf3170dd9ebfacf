"""MCP side of the bridge: a durable Tasks requester on the official ``mcp`` SDK."""
