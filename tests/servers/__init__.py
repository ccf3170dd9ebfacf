"""Real and adversarial MCP Tasks servers the test suite runs as subprocesses."""
