"""A streamable-HTTP MCP server on the official Python SDK (`mcp` 2.3.0) that keeps state per
upstream session, for the tests of isolated `url` servers (SPEC §11) and of sessions resumed on
another replica (SPEC §12): what one session remembers, another never sees, and a session that
goes on elsewhere still has it.

Usage: python session_server.py PORT  (streamable HTTP at http://127.0.0.1:PORT/mcp). Tools:
`remember(value)`, `recall()`, `session()` (the Mcp-Session-Id the request came with).
"""

import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("py-sessions", log_level="WARNING")
remembered: dict[str, str] = {}


def session_of(ctx: Context) -> str:
    request = ctx.request_context.request
    return (request.headers.get("mcp-session-id") if request is not None else None) or "none"


@server.tool()
def remember(value: str, ctx: Context) -> str:
    """Remember a value for this session."""
    remembered[session_of(ctx)] = value
    return "ok"


@server.tool()
def recall(ctx: Context) -> str:
    """The value this session remembered, or (nothing)."""
    return remembered.get(session_of(ctx), "(nothing)")


@server.tool()
def session(ctx: Context) -> str:
    """The upstream session id this request came with."""
    return session_of(ctx)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
