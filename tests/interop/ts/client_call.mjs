// One `tools/call` through the official TypeScript client v2 (`@modelcontextprotocol/client`),
// as an application without the Tasks extension makes it: a request timeout of its own, reset
// by each progress notification, and the result (or the error) printed as one JSON line.
//
//   node client_call.mjs --url URL --token T --tool NAME --args JSON --timeout-ms N
//
// Prints {"result": CallToolResult, "progress": [messages]} or {"error": {code, message}}.

import { parseArgs } from "node:util";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const { values: opts } = parseArgs({
  options: {
    url: { type: "string" },
    token: { type: "string" },
    tool: { type: "string" },
    args: { type: "string", default: "{}" },
    "timeout-ms": { type: "string", default: "60000" },
  },
});

const client = new Client({ name: "bridge-interop-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(opts.url), {
  requestInit: { headers: { Authorization: `Bearer ${opts.token}` } },
});
const progress = [];
try {
  await client.connect(transport);
  const result = await client.callTool(
    { name: opts.tool, arguments: JSON.parse(opts.args) },
    {
      timeout: Number(opts["timeout-ms"]),
      resetTimeoutOnProgress: true,
      onprogress: (p) => progress.push(p.message ?? String(p.progress)),
    },
  );
  console.log(JSON.stringify({ result, progress }));
} catch (error) {
  console.log(JSON.stringify({ error: { code: error.code ?? null, message: String(error.message) } }));
} finally {
  await client.close();
}
