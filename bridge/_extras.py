"""Which extra a part of the bridge needs, checked when that part is imported.

The core install (``pip install uhp-mcp-bridge``) makes bridged calls: ledger, MCP side, UHP
client. Serving, the CLI, OTLP export, PostgreSQL and each agent framework need an extra; a
module that needs one calls :func:`require_extra` first, so a missing package is an
:class:`~bridge.errors.MissingExtra` naming the ``pip install`` to run, not a bare
``ModuleNotFoundError`` from deep inside it.
"""

from __future__ import annotations

from importlib.util import find_spec

from bridge._errors import MissingExtra

# The import names each extra provides, as the modules that need them check them.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "serve": ("starlette", "sse_starlette", "uvicorn"),
    "cli": ("typer", "rich"),
    "console": ("starlette", "sse_starlette", "uvicorn", "markupsafe"),
    "otlp": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "postgres": ("psycopg",),
    "pydantic-ai": ("pydantic_ai",),
    "openai-agents": ("agents",),
    "langgraph": ("langgraph", "langchain_core"),
    "dbos": ("dbos",),
    "webhooks": ("standardwebhooks",),
    "metrics": ("opentelemetry.sdk", "opentelemetry.exporter.prometheus", "prometheus_client"),
    "temporal": ("temporalio",),
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (without importing it, parents aside)."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require_extra(feature: str, extra: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`~bridge.errors.MissingExtra` if a package ``feature`` needs is missing.

    ``modules`` defaults to every import name of ``extra``."""
    wanted = EXTRA_MODULES[extra] if modules is None else modules
    missing = [module for module in wanted if not installed(module)]
    if missing:
        raise MissingExtra(feature, extra, missing)
