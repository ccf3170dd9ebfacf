"""Which input kinds the bridge declares to one server, and the SDK client that declares them.

On 2026-07-28 a client declares ``elicitation`` (form and/or URL mode) and ``sampling`` in the
``io.modelcontextprotocol/clientCapabilities`` of every request; a server MUST NOT ask for an
undeclared kind. The bridge declares a kind only when the host can answer it (a handler, or the
host itself through ``pending_inputs``), per server. The SDK derives these entries from its own
callbacks and always declares both elicitation modes together, so :class:`DeclaringClient`
replaces exactly those two entries of the capabilities the SDK builds (for ``server/discover``,
each request's ``_meta`` stamp, and the legacy ``initialize``), leaving everything else — the
Tasks extension above all — as the SDK made it. The hook sits on SDK internals
(:mod:`bridge._mcp.wire.sdk_compat`); without them the client connects declaring what the SDK
derives from its callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types
from mcp.client.session import ClientSession

from bridge._mcp.wire.sdk_compat import HookedClient, wrap_capabilities


@dataclass(frozen=True, slots=True)
class InputCapabilities:
    """The input kinds declared to one server."""

    form_elicitation: bool = False
    url_elicitation: bool = False
    sampling: bool = False

    def applied_to(self, built: mcp_types.ClientCapabilities) -> mcp_types.ClientCapabilities:
        """``built`` with its ``elicitation`` / ``sampling`` entries replaced by these."""
        elicitation = None
        if self.form_elicitation or self.url_elicitation:
            elicitation = mcp_types.ElicitationCapability(
                form=mcp_types.FormElicitationCapability() if self.form_elicitation else None,
                url=mcp_types.UrlElicitationCapability() if self.url_elicitation else None,
            )
        sampling = mcp_types.SamplingCapability() if self.sampling else None
        return built.model_copy(update={"elicitation": elicitation, "sampling": sampling})


NO_INPUTS = InputCapabilities()


class DeclaringClient(HookedClient):
    """The SDK client, declaring exactly :attr:`declared` as its input capabilities."""

    declared: InputCapabilities = NO_INPUTS

    def session_built(self, session: ClientSession) -> None:
        super().session_built(session)
        # One hook, on this session only: every capability ad the SDK sends is built there.
        wrap_capabilities(session, self.declared.applied_to)
