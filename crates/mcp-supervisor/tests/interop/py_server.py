"""A tiny streamable-HTTP MCP server on the official Python SDK, for mcp-supervisor's interop tests.

Usage: python py_server.py PORT  (serves http://127.0.0.1:PORT/mcp). It keeps no state: a restarted
process knows none of the sessions of the one before, so a client's stale session gets a 404.
"""

import sys

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("py-interop", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(message: str) -> str:
    """Echo the message back."""
    return message


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
