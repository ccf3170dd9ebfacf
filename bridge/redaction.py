"""Keeping raw MCP task ids out of log output.

The official SDK logs whole JSON-RPC messages at DEBUG level, ``taskId`` included, and task
ids may act as bearer handles. :func:`install_log_redaction` adds a filter to every ``mcp``
logger that rewrites ``taskId`` values (and ``task_id=`` in model reprs) before a record is
emitted, whatever handlers the host configured.
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted-task-id]"
_PATTERNS = (
    re.compile(r"""(["']taskId["']\s*:\s*["'])([^"']+)(["'])"""),
    re.compile(r"""(\btask_id\s*=\s*["'])([^"']+)(["'])"""),
    re.compile(r"""(\bMcp-Name["']?\s*[:=]\s*["']?)([^"',\s}]+)""", re.IGNORECASE),
)


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(
            lambda m: m.group(1) + REDACTED + (m.group(3) if m.lastindex == 3 else ""), text
        )
    return text


class TaskIdRedactor(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "task" in message.lower() or "mcp-name" in message.lower():
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


_FILTER = TaskIdRedactor()


def install_log_redaction(
    prefixes: tuple[str, ...] = ("mcp", "fastmcp", "httpx2", "bridge"),
) -> None:
    """Attach the filter to every existing logger under ``prefixes`` (idempotent).

    Logger filters only see records logged on that very logger, so each one gets the filter;
    call this after the SDK modules are imported (the bridge does when it starts).
    """
    names = [
        name
        for name in logging.root.manager.loggerDict
        if any(name == p or name.startswith(p + ".") for p in prefixes)
    ]
    for name in [*prefixes, *names]:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
