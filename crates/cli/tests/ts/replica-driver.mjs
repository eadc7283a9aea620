// replica-driver.mjs: the TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
// tools/package.json) in a steady call loop through a load balancer, for the replica tests
// (crates/cli/tests/replicas.rs). The same lines as py/replica_driver.py: one JSON line per call
// as it ends ({"i", "ok", "error"}), then {"done": true, "ok", "failed"}. It asserts nothing.
//
//   node replica-driver.mjs --modules DIR --url URL --prefix P [--calls N] [--interval MS]
//                           [--tool-prefix T]
//
// One client, one 2025-era session (the SDK's streamable HTTP transport keeps the
// Mcp-Session-Id it is given in the answer to initialize), the non-idempotent `count` tool with
// an id of its own per call. Bounded: each call by 15 s, the whole run by 120 s.

import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
};
const modules = opt("--modules", null);
const url = opt("--url", null);
const prefix = opt("--prefix", null);
if (!modules || !url || !prefix) {
  process.stderr.write("usage: replica-driver.mjs --modules DIR --url URL --prefix P [--calls N] [--interval MS] [--tool-prefix T]\n");
  process.exit(2);
}
const calls = Number(opt("--calls", "30"));
const interval = Number(opt("--interval", "0"));
const toolPrefix = opt("--tool-prefix", "");
setTimeout(() => {
  process.stderr.write("replica-driver: the run took longer than 120 s\n");
  process.exit(3);
}, 120_000).unref();

const requireSdk = createRequire(path.join(modules, "package.json"));
const { Client } = requireSdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = requireSdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

const emit = (line) => process.stdout.write(JSON.stringify(line) + "\n");
const client = new Client({ name: "replica-test-ts", version: "1.0.0" }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport, { timeout: 15_000 });
emit({ connected: true, session: Boolean(transport.sessionId) });

let ok = 0;
const failed = [];
for (let i = 0; i < calls; i++) {
  const id = `${prefix}-${i}`;
  const started = Date.now();
  const line = { i };
  try {
    const result = await client.callTool({ name: `${toolPrefix}count`, arguments: { id } }, undefined, { timeout: 15_000 });
    const text = (result.content ?? []).map((b) => b.text ?? "").join("");
    line.ok = !result.isError && text === id;
    if (!line.ok) line.error = `result: ${text}`;
  } catch (error) {
    line.ok = false;
    line.error = String(error?.message ?? error);
  }
  line.ms = Date.now() - started;
  emit(line);
  if (line.ok) ok++;
  else failed.push(i);
  if (interval > 0) await new Promise((resolve) => setTimeout(resolve, interval));
}
emit({ done: true, ok, failed });
await client.close();
process.exit(0);
