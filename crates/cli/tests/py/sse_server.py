"""A 2024-11-05 HTTP+SSE MCP server on the official Python SDK, for mcp-supervisor's SSE tests.

Usage: python sse_server.py PORT RUNS [TRANSPORT]  (TRANSPORT `sse`, the default: event stream at
http://127.0.0.1:PORT/sse, messages POSTed to the endpoint it names; `streamable-http`: the same
tools at http://127.0.0.1:PORT/mcp, for a comparison). `echo` is read-only; `append` is neither read-only nor idempotent: each
run appends its token to the file RUNS, one line, then holds for `hold` seconds (a call in flight
when the process is killed). A restarted process knows none of the sessions of the one before.
"""

import sys

import anyio
from mcp.server import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("py-sse", log_level="WARNING")
RUNS = sys.argv[2]


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(message: str) -> str:
    """Echo the message back."""
    return message


@server.tool()
async def append(token: str, hold: float = 0) -> str:
    """Append the token to the runs file, then wait `hold` seconds."""
    with open(RUNS, "a", encoding="utf-8") as runs:
        runs.write(token + "\n")
    if hold > 0:
        await anyio.sleep(hold)
    return token


if __name__ == "__main__":
    transport = sys.argv[3] if len(sys.argv) > 3 else "sse"
    server.run(transport, host="127.0.0.1", port=int(sys.argv[1]))
