// ts-client.mjs: the TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
// tools/package.json) calling `echo` on one MCP target, for `mcp-supervisor-bench ts-peers`.
//
//   node ts-client.mjs [options] --url http://127.0.0.1:PORT/mcp
//   node ts-client.mjs [options] --stdio -- COMMAND [ARGS...]
//
// Options:
//   --calls N          measure N calls, print one JSON line of figures and exit (one-shot mode)
//   --concurrency C    calls in flight (one-shot mode; default 1)
//   --warmup W         warm-up calls before the measured ones (one-shot mode; default 100)
//   --bytes B          size of the echoed message (default 1024)
//   --modules DIR      the node_modules that holds the SDK (default: tools/node_modules of this repo)
//   --call-ms MS       the bound of one call (default 30000)
//   --max-secs S       exit after S seconds at the latest (default 3600)
//   --bearer-file F    with --url: send `Authorization: Bearer <the file's text>` with every
//                      request (an OAuth access token; the file, not the command line, holds it)
//   --marker TEXT      ignored; lets the caller find this process by its command line
//
// Without --calls it serves: it connects, makes one probe call, prints
// {"ready":true,...}, then for each line {"calls":N,"concurrency":C} read on stdin it makes N
// calls with C in flight and prints one line {"latencies_ms":[...],"wall_ms":...,"errors":...}.
// At the end of stdin it closes the client (which stops a stdio target) and exits.
//
// Loopback only: --url must be on 127.0.0.1, ::1 or localhost.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";

function fail(message) {
  process.stderr.write(`ts-client: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    url: null,
    command: null,
    calls: null,
    concurrency: 1,
    warmup: 100,
    bytes: 1024,
    modules: path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../tools/node_modules"),
    callMs: 30000,
    maxSecs: 3600,
    bearerFile: null,
  };
  const int = (name, value, min, max) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) fail(`${name} must be an integer in ${min}..${max}, not ${value}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`${arg} needs a value`);
      return argv[++i];
    };
    switch (arg) {
      case "--url": opts.url = value(); break;
      case "--stdio": {
        const rest = argv.slice(i + 1);
        if (rest[0] === "--") rest.shift();
        if (rest.length === 0) fail("--stdio needs a command after --");
        opts.command = rest;
        i = argv.length;
        break;
      }
      case "--calls": opts.calls = int(arg, value(), 1, 10_000_000); break;
      case "--concurrency": opts.concurrency = int(arg, value(), 1, 4096); break;
      case "--warmup": opts.warmup = int(arg, value(), 0, 1_000_000); break;
      case "--bytes": opts.bytes = int(arg, value(), 0, 16 * 1024 * 1024); break;
      case "--modules": opts.modules = path.resolve(value()); break;
      case "--call-ms": opts.callMs = int(arg, value(), 1, 3_600_000); break;
      case "--max-secs": opts.maxSecs = int(arg, value(), 1, 86_400); break;
      case "--bearer-file": opts.bearerFile = value(); break;
      case "--marker": value(); break;
      default: fail(`unknown argument ${arg}`);
    }
  }
  if ((opts.url === null) === (opts.command === null)) fail("give exactly one of --url URL and --stdio -- COMMAND");
  if (opts.bearerFile !== null && opts.url === null) fail("--bearer-file needs --url");
  if (opts.url !== null) {
    let url;
    try {
      url = new URL(opts.url);
    } catch {
      fail(`not a URL: ${opts.url}`);
    }
    if (!["127.0.0.1", "[::1]", "localhost"].includes(url.hostname)) fail(`not a loopback URL: ${opts.url}`);
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
// Bounded whatever happens.
setTimeout(() => fail(`--max-secs ${opts.maxSecs} reached`), opts.maxSecs * 1000).unref();

// The SDK from the given node_modules (this script is not inside it).
const requireSdk = createRequire(path.join(opts.modules, "package.json"));
let sdk;
try {
  sdk = {
    Client: requireSdk("@modelcontextprotocol/sdk/client/index.js").Client,
    StdioClientTransport: requireSdk("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport,
    StreamableHTTPClientTransport: requireSdk("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport,
    version: JSON.parse(readFileSync(path.join(opts.modules, "@modelcontextprotocol/sdk/package.json"), "utf8")).version,
  };
} catch (error) {
  fail(`cannot load @modelcontextprotocol/sdk from ${opts.modules} (scripts/install-test-deps.sh): ${error.message}`);
}

// The bearer token, read once (a token that expires during the run fails the calls after it).
let bearer = null;
if (opts.bearerFile !== null) {
  try {
    bearer = readFileSync(opts.bearerFile, "utf8").trim();
  } catch (error) {
    fail(`cannot read --bearer-file ${opts.bearerFile}: ${error.message}`);
  }
  if (bearer === "") fail(`--bearer-file ${opts.bearerFile} is empty`);
}

const message = "x".repeat(opts.bytes);
const expected = `Echo: ${message}`; // server-everything's echo

/** One echo call; throws unless the answer carries the message back. */
async function call(client, text, wanted) {
  const result = await client.callTool({ name: "echo", arguments: { message: text } }, undefined, {
    timeout: opts.callMs,
  });
  if (result.isError) throw new Error(`echo returned an error result: ${JSON.stringify(result).slice(0, 300)}`);
  const got = result.content?.[0]?.text;
  if (got !== wanted && got !== text) {
    throw new Error(`echo returned ${typeof got === "string" ? got.length : 0} characters instead of ${wanted.length}`);
  }
}

/** `n` calls with `concurrency` in flight: each call's latency (ms), the wall time, the errors. */
async function block(client, n, concurrency) {
  const latencies = [];
  let errors = 0;
  let firstError = null;
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const begin = performance.now();
      try {
        await call(client, message, expected);
        latencies.push(performance.now() - begin);
      } catch (error) {
        errors++;
        firstError ??= String(error?.message ?? error);
      }
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
  const wallMs = performance.now() - start;
  return { latencies_ms: latencies, wall_ms: wallMs, errors, first_error: firstError };
}

async function connect() {
  const client = new sdk.Client({ name: "mcp-supervisor-bench-ts-client", version: "0.1.0" }, { capabilities: {} });
  let transport;
  if (opts.url !== null) {
    // The SDK adds requestInit's headers to every request it makes (POST, GET, DELETE).
    const requestInit = bearer === null ? undefined : { headers: { Authorization: `Bearer ${bearer}` } };
    transport = new sdk.StreamableHTTPClientTransport(new URL(opts.url), { requestInit });
  } else {
    const [command, ...args] = opts.command;
    // The whole environment, so the target behaves as when started by hand.
    transport = new sdk.StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
  }
  await client.connect(transport, { timeout: opts.callMs });
  // The first call, bounded: a target that cannot answer it fails now.
  await call(client, "probe", "Echo: probe");
  return client;
}

function percentile(sorted, q) {
  const rank = Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length);
  return sorted[rank - 1];
}

function summary(measured) {
  const sorted = [...measured.latencies_ms].sort((a, b) => a - b);
  const n = sorted.length;
  const median = n === 0 ? null : n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  return {
    n,
    median_ms: median,
    p99_ms: n === 0 ? null : percentile(sorted, 0.99),
    calls_per_sec: measured.wall_ms > 0 ? (n * 1000) / measured.wall_ms : null,
    errors: measured.errors,
    first_error: measured.first_error,
  };
}

async function main() {
  let client;
  try {
    client = await connect();
  } catch (error) {
    fail(`cannot connect: ${error?.message ?? error}`);
  }
  const server = client.getServerVersion();
  if (opts.calls !== null) {
    if (opts.warmup > 0) await block(client, opts.warmup, opts.concurrency);
    const measured = await block(client, opts.calls, opts.concurrency);
    const out = { sdk: sdk.version, server, concurrency: opts.concurrency, bytes: opts.bytes, ...summary(measured) };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } else {
    process.stdout.write(`${JSON.stringify({ ready: true, sdk: sdk.version, server, node: process.version })}\n`);
    const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of lines) {
      if (line.trim() === "") continue;
      let asked;
      try {
        asked = JSON.parse(line);
      } catch {
        fail(`not JSON on stdin: ${line.slice(0, 200)}`);
      }
      const n = Number(asked.calls);
      const c = Number(asked.concurrency);
      if (!Number.isInteger(n) || n < 0 || n > 10_000_000 || !Number.isInteger(c) || c < 1 || c > 4096) {
        fail(`bad request on stdin: ${line.slice(0, 200)}`);
      }
      const measured = await block(client, n, c);
      process.stdout.write(`${JSON.stringify(measured)}\n`);
    }
  }
  // Bounded close: a stdio target is stopped by the transport (stdin closed, then signals).
  await Promise.race([client.close().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 5000).unref())]);
  process.exit(0);
}

main().catch((error) => fail(String(error?.stack ?? error)));
