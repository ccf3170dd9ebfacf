"""The wheel alone: a real bridged call; a refused token named as such; every extra missing
says which extra to install."""

import importlib

import anyio
from common import TOKEN, absent, bridged_call, done, missing_extra, settings

absent("typer", "rich", "opentelemetry.sdk", "psycopg", "uvloop", "httptools")
absent("pydantic_ai", "agents", "langgraph", "dbos", "temporalio", "fastmcp", "harness_examples")
absent("standardwebhooks", "prometheus_client")


async def main() -> None:
    from bridge import Bridge
    from bridge.errors import ServerCredentialsRejected

    async with Bridge.open(settings(token="not-" + TOKEN)) as bridge:
        try:
            await bridged_call(bridge, "resp_refused")
        except ServerCredentialsRejected as exc:
            assert "credential_ref" in str(exc) and "BridgeSettings.credentials" in str(exc)
        else:
            raise AssertionError("a refused token must raise ServerCredentialsRejected")
    async with Bridge.open(settings()) as bridge:
        await bridged_call(bridge)


anyio.run(main)
missing_extra("cli", lambda: importlib.import_module("bridge.cli._app"))
# No MissingExtra check for [console]: the MCP SDK already brings its serving packages
# (and markupsafe) into the core install; the extra names them for the console explicitly.
missing_extra("otlp", lambda: importlib.import_module("bridge").setup_tracing())
missing_extra("langgraph", lambda: importlib.import_module("bridge.integrations.langgraph"))
missing_extra("pydantic-ai", lambda: importlib.import_module("bridge.testing.pydantic_ai"))
missing_extra("openai-agents", lambda: importlib.import_module("bridge.integrations.openai_agents"))
missing_extra("dbos", lambda: importlib.import_module("bridge.integrations.dbos"))
missing_extra("temporal", lambda: importlib.import_module("bridge.integrations.temporal"))
missing_extra(
    "postgres", lambda: importlib.import_module("bridge._ledger.store").Ledger.open("postgresql://x/y")
)
missing_extra("webhooks", lambda: importlib.import_module("bridge._runtime.webhook_message"))
missing_extra(
    "metrics",
    lambda: importlib.import_module("bridge._telemetry.prometheus").serve_prometheus("127.0.0.1", 0),
)
done("core")
