"""A raw MCP server of protocol 2026-07-28 over stdio, for the era transparency test: every
answer carries members no SDK knows (in the discovery, the capabilities, a tool definition, a
list result and a call result), so a proxy that decodes them into a typed model loses them.

It also answers `initialize` (the handshake era), so `serve` can open it in its own name."""

import json
import sys

META_VERSION = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES = {"tools": {"listChanged": True}, "x-future-capability": {"on": True}}
INFO = {"name": "raw-stateless", "version": "1.0.0", "x-info-key": "kept"}
TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "execution": {"taskSupport": "forbidden"},
        "x-unknown-tool-key": {"nested": [1, 2.5, "three"]},
    }
]


def answer(message):
    method = message.get("method")
    params = message.get("params") or {}
    meta = params.get("_meta") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-11-25",
            "capabilities": CAPABILITIES,
            "serverInfo": INFO,
        }
    stateless = META_VERSION in meta
    if method == "server/discover":
        if not stateless:
            raise Rpc(-32602, "request _meta is missing its protocol version")
        return {
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": CAPABILITIES,
            "ttlMs": 0,
            "cacheScope": "private",
            "x-unknown-discover-key": {"a": 1},
            "_meta": {"io.modelcontextprotocol/serverInfo": INFO},
        }
    complete = {"resultType": "complete"} if stateless else {}
    if method == "tools/list":
        cache = {"ttlMs": 0, "cacheScope": "private"} if stateless else {}
        return {**complete, **cache, "tools": TOOLS, "x-unknown-list-key": True}
    if method == "tools/call":
        text = (params.get("arguments") or {}).get("text", "")
        return {
            **complete,
            "content": [{"type": "text", "text": text, "x-unknown-content-key": 1}],
            "x-unknown-call-key": "kept",
        }
    if method == "ping":
        return {}
    raise Rpc(-32601, f"Method not found: {method}")


class Rpc(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    try:
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
    except Rpc as error:
        reply = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": error.code, "message": error.message},
        }
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
