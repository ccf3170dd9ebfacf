"""Watching open task handles: the one poll scheduler, its due queue, pushed task states,
reading a status reply, and handing recorded handles back after a restart or a claim."""
