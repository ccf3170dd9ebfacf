"""Version negotiation that never takes an outage for a handshake-era server.

The SDK's ``mode="auto"`` sends ``server/discover`` and falls back to the 2025-11-25
``initialize`` on any JSON-RPC error. But a discovery can fail without any server answering
it: the isolating transport turns a refused connection, a dropped one, a 429/503 or a
gateway's 502/504 into a JSON-RPC error for that request, and the SDK makes up its own for a
timeout or a closed stream. Taken as a legacy verdict, such an error pins a reconnecting
connection to 2025-11-25 for good when the server comes back between the two requests: a
restarted 2026-07-28 server then answers every ``tasks/get`` with ``-32601``, and a handle it
forgot is never reported lost.

:func:`fail_unanswered_discovery` makes a discovery that got no answer fail the connection
attempt instead (:class:`DiscoveryUnanswered`, which the SDK propagates as an outage); the
caller's next request connects again. Only a reply from the server can choose the legacy
handshake.
"""

from __future__ import annotations

from typing import Any

from mcp import MCPError
from mcp.client.session import ClientSession
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from bridge._mcp.wire.transport import SYNTHETIC_KEY

# What the SDK's dispatcher says when the stream ended under a waiting request.
_SDK_CLOSED_MESSAGE = "Connection closed"


class DiscoveryUnanswered(ConnectionError):
    """``server/discover`` got no answer from the server: the connection attempt fails."""


def unanswered(exc: MCPError) -> bool:
    """Whether ``exc`` was made on this side (transport or SDK), not sent by the server.

    A server's own ``-32000`` (a handshake-era server refusing a request without a session
    says so) is an answer; only the transport's marked errors and the SDK's local timeout and
    closed-stream errors are not."""
    data = exc.data
    if isinstance(data, dict) and SYNTHETIC_KEY in data:
        return True
    if exc.code == REQUEST_TIMEOUT:
        return True
    return exc.code == CONNECTION_CLOSED and data is None and exc.message == _SDK_CLOSED_MESSAGE


def fail_unanswered_discovery(session: ClientSession) -> None:
    """Make ``session``'s discovery raise :class:`DiscoveryUnanswered` when no server answered
    it, so the SDK's automatic negotiation cannot fall back to ``initialize`` on an outage."""
    send_discover = session.send_discover

    async def discover_or_fail(version: str) -> dict[str, Any]:
        try:
            return await send_discover(version)
        except MCPError as exc:
            if unanswered(exc):
                raise DiscoveryUnanswered(f"server/discover got no answer: {exc.message}") from exc
            raise

    # One hook, on this session only (as the capability declaration is hooked).
    setattr(session, "send_discover", discover_or_fail)  # noqa: B010
