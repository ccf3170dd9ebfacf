"""Gateway mode: the bridge as the MCP server of an MCP client it cannot change.

``bridge gateway --config FILE --db URL`` (or ``python -m bridge.gateway``) serves one MCP
endpoint over Streamable HTTP that fronts the configured upstream MCP servers through one
:class:`~bridge.Bridge` (see ``docs/guides/gateway.md``):

- :mod:`bridge.gateway._config` — the config file: upstreams, principals (token digests), deadlines;
- :mod:`bridge.gateway._auth` — bearer tokens to principals, refused requests answered 401;
- :mod:`bridge.gateway._naming` — upstream tools exposed as ``<server>__<tool>``;
- :mod:`bridge.gateway._identity` — outer identity and idempotency key from headers / ``_meta``;
- :mod:`bridge.gateway._runs` — which outer run a call is recorded under;
- :mod:`bridge.gateway._calls` — a ``tools/call`` for a client with or without the Tasks extension;
- :mod:`bridge.gateway._task_wire` — a bridge-issued handle's ``tasks/get`` body, from the ledger;
- :mod:`bridge.gateway._server` — the official SDK's lowlevel ``Server`` with those handlers;
- :mod:`bridge.gateway._serve` — the Bridge, the HTTP app and uvicorn in one process (or stdio).
"""

from bridge._extras import require_extra

require_extra("the gateway (bridge.gateway)", "serve")
