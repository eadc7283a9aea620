"""A handshake-era MCP server on the official Python SDK (`mcp` 2.3.0), the strict upstream of
mcp-supervisor's era-envelope tests (SPEC §10): on a handshake connection it refuses a request
that carries the 2026-07-28 envelope in `_meta`.

Usage: python strict_server.py [PORT]  (no PORT: stdio; PORT: streamable HTTP at
http://127.0.0.1:PORT/mcp). One tool, `echo`, read-only.
"""

import sys

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("py-strict", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(message: str) -> str:
    """Echo the message back."""
    return message


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
