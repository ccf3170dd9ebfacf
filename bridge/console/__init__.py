"""`bridge console`: the operator web console over the ledger (starlette + SSE, no front-end
build step): runs, the attention inbox with forms from each request's schema, answering,
resolving and cancelling, and a live two-lane timeline of a run.

Needs the ``[console]`` extra (the serving stack and ``markupsafe``).
"""

from bridge._extras import require_extra

require_extra("the web console (bridge.console)", "console")
