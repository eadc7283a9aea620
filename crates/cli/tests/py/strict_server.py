"""A handshake-era MCP server on the official Python SDK (`mcp` 2.3.0), the strict upstream of
mcp-supervisor's era-envelope tests (SPEC §10): on a handshake connection it refuses a request
that carries the 2026-07-28 envelope in `_meta`. The tests of SPEC §7 and §13 against outside
software (on demand, orphans, pins, result cap, tool search) use its options below.

Usage: python strict_server.py [OPTIONS] [PORT]  (no PORT: stdio; PORT: streamable HTTP at
http://127.0.0.1:PORT/mcp). One tool, `echo`, read-only. Options:
  --description-file PATH  `echo`'s description is read from PATH at start (a pin test changes
                           it between runs, as a rug pull would)
  --big                    adds the tool `big(count)`: a text of `count` two-byte characters
  --ignore-stdin-eof       keeps running after the end of stdin (stdio only), until killed
"""

import sys
import threading

from mcp.server import MCPServer
from mcp_types import ToolAnnotations


def parse(argv):
    options = {"description_file": None, "big": False, "linger": False}
    port = None
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--description-file":
            options["description_file"] = rest.pop(0)
        elif arg == "--big":
            options["big"] = True
        elif arg == "--ignore-stdin-eof":
            options["linger"] = True
        else:
            port = int(arg)
    return options, port


OPTIONS, PORT = parse(sys.argv[1:])
server = MCPServer("py-strict", log_level="WARNING")

ECHO_DESCRIPTION = "Echo the message back."
if OPTIONS["description_file"]:
    with open(OPTIONS["description_file"], encoding="utf-8") as file:
        ECHO_DESCRIPTION = file.read().strip()


@server.tool(
    description=ECHO_DESCRIPTION,
    annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
)
def echo(message: str) -> str:
    return message


if OPTIONS["big"]:

    @server.tool(description="A long text of `count` two-byte characters.")
    def big(count: int) -> str:
        return "é" * count


if __name__ == "__main__":
    if PORT is not None:
        server.run("streamable-http", host="127.0.0.1", port=PORT)
    else:
        server.run()
        if OPTIONS["linger"]:
            threading.Event().wait()
