"""Input requests meet the host: typed handlers, call rounds (MRTR) and task input requests,
the 2025-11-25 held-result inputs, the stuck-input deadline and the declared capabilities."""
