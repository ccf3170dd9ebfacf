"""OpenTelemetry for the bridge: spans for outer responses, tool calls and inner task
lifetimes (linked, not nested as one synchronous call), with raw task ids redacted."""
