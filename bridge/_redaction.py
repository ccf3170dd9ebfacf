"""Keeping raw MCP task ids out of log output.

The official SDK logs whole JSON-RPC messages at DEBUG level, ``taskId`` included, and task
ids may act as bearer handles. :func:`install_log_redaction` adds a filter to every ``mcp``
logger that rewrites ``taskId`` values (and ``task_id=`` in model reprs) before a record is
emitted, whatever handlers the host configured. It also hides MRTR ``requestState`` values
(opaque server state the bridge echoes, possibly sealed credentials of the server's own).
"""

from __future__ import annotations

import json
import logging
import re

REDACTED = "[redacted-task-id]"
# Shorter ids ("1", "42") are guessable, so no bearer handle; replacing them everywhere would
# corrupt unrelated text (every "1" in a result). Longer ids are replaced wherever they occur.
MIN_SCRUBBED_ID_LEN = 8
_PATTERNS = (
    re.compile(r"""(["']taskId["']\s*:\s*["'])([^"']+)(["'])"""),
    re.compile(r"""(\btask_id\s*=\s*["'])([^"']+)(["'])"""),
    re.compile(r"""(\bMcp-Name["']?\s*[:=]\s*["']?)([^"',\s}]+)""", re.IGNORECASE),
)

STATE_REDACTED = "[redacted-request-state]"
_STATE_PATTERN = re.compile(r"""(\brequest_?state["']?\s*[:=]\s*["'])([^"']*)(["'])""", re.I)


# A subscriptions/listen filter names many ids at once: "taskIds": ["…", "…"].
_ID_LIST = re.compile(r"""(["']taskIds["']\s*:\s*\[)([^\]]*)(\])""")
_QUOTED = re.compile(r"""["']([^"']+)["']""")


#: Field names (compared lower-case, ``-`` read as ``_``) whose values are credentials.
CREDENTIAL_FIELDS = frozenset(
    {
        "authorization",
        "api_key",
        "apikey",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "bearer",
        "secret",
        "client_secret",
        "password",
        "credential",
        "credentials",
        "cookie",
        "private_key",
    }
)


def is_credential_name(name: str) -> bool:
    """Is a field of this name a credential (never stored, never logged)?"""
    return name.lower().replace("-", "_") in CREDENTIAL_FIELDS


def redact(text: str) -> str:
    """Replace every ``taskId`` value (and every id of a ``taskIds`` list) in ``text``, and
    every other occurrence of those values in the same text (an input key or a message that
    embeds the id), by :data:`REDACTED`."""
    found: set[str] = set()

    def hide_list(match: re.Match[str]) -> str:
        found.update(_QUOTED.findall(match.group(2)))
        return match.group(1) + f'"{REDACTED}"' + match.group(3)

    text = _ID_LIST.sub(hide_list, text)

    def hide(match: re.Match[str]) -> str:
        found.add(match.group(2))
        return match.group(1) + REDACTED + (match.group(3) if match.lastindex == 3 else "")

    for pattern in _PATTERNS:
        text = pattern.sub(hide, text)
    for raw_id in sorted(found - {REDACTED}, key=len, reverse=True):
        text = scrub_task_id(text, raw_id, "redacted-task-id")
    return text


def task_id_forms(raw_id: str) -> tuple[str, ...]:
    """The raw id and its obvious encodings inside text: as is, JSON-escaped (ASCII and UTF-8
    flavours) and Python-repr-escaped; the first is the raw id, the rest only where they differ."""
    forms = [raw_id]
    for form in (
        json.dumps(raw_id)[1:-1],
        json.dumps(raw_id, ensure_ascii=False)[1:-1],
        repr(raw_id)[1:-1],
    ):
        if form and form not in forms:
            forms.append(form)
    return tuple(forms)


def scrub_task_id(text: str, raw_id: str, ref: str) -> str:
    """Replace the raw task id (and its encodings, see :func:`task_id_forms`) by ``[ref]``.

    Cheap when the id is absent (one substring test per form), so it can run on every stored
    server text. Keeps a JSON document valid: the replacement has no character to escape.
    """
    if len(raw_id) < MIN_SCRUBBED_ID_LEN:
        return text
    for form in task_id_forms(raw_id):
        if form in text:
            text = text.replace(form, f"[{ref}]")
    return text


class TaskIdRedactor(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        lowered = message.lower()
        cleaned = message
        if "requeststate" in lowered or "request_state" in lowered:
            cleaned = _STATE_PATTERN.sub(
                lambda m: m.group(1) + STATE_REDACTED + m.group(3), message
            )
        if "task" in lowered or "mcp-name" in lowered:
            cleaned = redact(cleaned)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = TaskIdRedactor()


def install_log_redaction(
    prefixes: tuple[str, ...] = ("mcp", "fastmcp", "httpx2", "aiohttp", "bridge"),
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
