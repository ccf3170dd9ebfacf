"""Gateway mode: the bridge as the MCP server of an MCP client it cannot change.

``bridge gateway --config FILE --db URL`` (or ``python -m bridge.gateway``) serves one MCP
endpoint over Streamable HTTP that fronts the configured upstream MCP servers through one
:class:`~bridge.facade.Bridge` (see ``docs/guides/gateway.md``):

- :mod:`bridge.gateway.config` — the config file: upstreams, principals (token digests), deadlines;
- :mod:`bridge.gateway.auth` — bearer tokens to principals, refused requests answered 401;
- :mod:`bridge.gateway.naming` — upstream tools exposed as ``<server>__<tool>``;
- :mod:`bridge.gateway.identity` — outer identity and idempotency key from headers / ``_meta``;
- :mod:`bridge.gateway.runs` — which outer run a call is recorded under;
- :mod:`bridge.gateway.calls` — a ``tools/call`` for a client with or without the Tasks extension;
- :mod:`bridge.gateway.task_wire` — a bridge-issued handle's ``tasks/get`` body, from the ledger;
- :mod:`bridge.gateway.server` — the official SDK's lowlevel ``Server`` with those handlers;
- :mod:`bridge.gateway.serve` — the Bridge, the HTTP app and uvicorn in one process (or stdio).
"""

from bridge.extras import require_extra

require_extra("the gateway (bridge.gateway)", "serve")
