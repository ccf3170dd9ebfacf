"""A gateway client in its own process, so a test can SIGKILL it mid-call.

    python -m tests.support.gateway_client_driver --url URL --token T --tool NAME \
        --args JSON --idempotency-key KEY

It is the official MCP SDK client without the Tasks extension: one ``tools/call`` that waits,
with ``Idempotency-Key`` as an HTTP header. It prints ``calling`` once the request is about to
leave, then the result as one JSON line (``{"text": …, "is_error": …}``).
"""

from __future__ import annotations

import argparse
import json
import sys

import anyio
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bridge.gateway._identity import IDEMPOTENCY_KEY_HEADER


async def call_once(
    url: str, token: str, tool: str, arguments: dict[str, object], key: str
) -> None:
    headers = {"Authorization": f"Bearer {token}", IDEMPOTENCY_KEY_HEADER: key}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        print("calling", flush=True)
        result = await client.session.call_tool(tool, arguments)
    text = "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
    print(json.dumps({"text": text, "is_error": bool(result.is_error)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--args", required=True, type=json.loads)
    parser.add_argument("--idempotency-key", required=True)
    args = parser.parse_args()
    anyio.run(call_once, args.url, args.token, args.tool, args.args, args.idempotency_key)
    sys.exit(0)


if __name__ == "__main__":
    main()
