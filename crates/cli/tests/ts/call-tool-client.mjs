// call-tool-client.mjs: the TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
// tools/package.json) calling one tool the way a host does, over stdio to a command it spawns
// (the proxy), for crates/cli/tests/outside_result_cap.rs. The same contract as
// py/call_tool_client.py: it lists the tools (the SDK keeps a validator per tool with an
// outputSchema), calls the tool (`client.callTool` throws when a result that is not an error has
// no structuredContent, or one that does not validate), and prints one JSON line,
// {"ok": true, "result": ...} or {"ok": false, "error": "..."}. It asserts nothing.
//
//   node call-tool-client.mjs --modules DIR --tool NAME [--arguments JSON] --stdio -- COMMAND [ARGS...]
//
// Bounded: each request by 20 s, the whole run by 60 s.

import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const split = args.indexOf("--");
const own = split >= 0 ? args.slice(0, split) : args;
const command = split >= 0 ? args.slice(split + 1) : [];
const opt = (name, fallback) => {
  const at = own.indexOf(name);
  return at >= 0 && at + 1 < own.length ? own[at + 1] : fallback;
};
const modules = opt("--modules", null);
const tool = opt("--tool", null);
const toolArguments = JSON.parse(opt("--arguments", "{}"));
if (!modules || !tool || !own.includes("--stdio") || command.length === 0) {
  process.stderr.write("usage: call-tool-client.mjs --modules DIR --tool NAME [--arguments JSON] --stdio -- COMMAND [ARGS...]\n");
  process.exit(2);
}
setTimeout(() => {
  process.stderr.write("call-tool-client: the run took longer than 60 s\n");
  process.exit(3);
}, 60_000).unref();

const requireSdk = createRequire(path.join(modules, "package.json"));
const { Client } = requireSdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = requireSdk("@modelcontextprotocol/sdk/client/stdio.js");

const client = new Client({ name: "call-tool-client-ts", version: "1.0.0" }, { capabilities: {} });
const transport = new StdioClientTransport({
  command: command[0],
  args: command.slice(1),
  env: { ...process.env },
  stderr: "inherit",
});
const out = {};
try {
  await client.connect(transport, { timeout: 20_000 });
  const { tools } = await client.listTools(undefined, { timeout: 20_000 });
  out.output_schema = tools.find((t) => t.name === tool)?.outputSchema ?? null;
  const result = await client.callTool({ name: tool, arguments: toolArguments }, undefined, { timeout: 20_000 });
  out.ok = true;
  out.result = result;
} catch (error) {
  out.ok = false;
  out.error = `${error?.name ?? "Error"}: ${error?.message ?? error}`;
}
process.stdout.write(JSON.stringify(out) + "\n");
await client.close();
process.exit(0);
