"""The MCP Tasks wire: request and reply shapes (the extension and 2025-11-25 experimental
tasks), version negotiation, the HTTP transport, and task-id checks. No ledger, no scheduling."""
