"""Adapters that embed the bridge in agent frameworks, one optional extra each.

Importing this package imports no framework: each adapter module imports its framework at
top level and is only imported by users who installed its extra."""
