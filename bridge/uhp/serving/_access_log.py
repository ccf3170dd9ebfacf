"""Access logs without secrets: uvicorn's access log writes each request's path *with* its
query string, and a client that puts a bearer token there (``?access_token=...``) would leave
it in every log line. :func:`scrub_access_log` removes query strings from that log.
"""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"
REDACTED_QUERY = "?<query redacted>"


def scrub_query(path: str) -> str:
    """``path`` without its query string (a marker says one was there)."""
    head, sep, _ = path.partition("?")
    return head + REDACTED_QUERY if sep else head


class QueryStringScrubber(logging.Filter):
    """Rewrites every string argument of an access-log record that carries a query string
    (uvicorn passes ``(client, method, path?query, http_version, status)``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                scrub_query(arg) if isinstance(arg, str) and "?" in arg else arg
                for arg in record.args
            )
        return True


def scrub_access_log(logger_name: str = ACCESS_LOGGER) -> None:
    """Install the scrubber on the access logger (once; a logger's filters survive the
    ``dictConfig`` uvicorn applies at start-up)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, QueryStringScrubber) for f in logger.filters):
        logger.addFilter(QueryStringScrubber())
