"""Calls one tool with the official Python SDK client (`mcp` 2.3.0) the way a host does, over
stdio to a command it spawns (the proxy), and prints one JSON line for the Rust test
(crates/cli/tests/outside_result_cap.rs) to assert on. The client lists the tools first, then
calls; the SDK checks the result against the tool's `outputSchema` (a result that is not an error
must carry `structuredContent` that validates) and raises when it does not.

It asserts nothing: per mode, it records the result as the SDK returned it, or the exception the
SDK raised (its type and message). Everything is bounded by --deadline.

Usage:
    call_tool_client.py --stdio JSON_ARGV --tool NAME --arguments JSON [--modes legacy,auto]
                        [--deadline SECONDS]

Modes (one client, one spawned command, each): `legacy` (the initialize handshake) and `auto`
(the SDK's default: server/discover, the 2026-07-28 era when the server has it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

READ_TIMEOUT_S = 20.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdio", required=True, help="JSON list: the command to spawn")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--arguments", default="{}", help="JSON object")
    parser.add_argument("--modes", default="legacy,auto")
    parser.add_argument("--deadline", type=float, default=60.0)
    return parser.parse_args()


async def call(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    argv = json.loads(args.stdio)
    server = StdioServerParameters(command=argv[0], args=argv[1:])
    out: dict[str, Any] = {}
    try:
        async with Client(server, mode=mode, cache=None, read_timeout_seconds=READ_TIMEOUT_S) as client:
            out["protocol_version"] = client.protocol_version
            tools = await client.list_tools()
            out["output_schema"] = next(
                (t.output_schema for t in tools.tools if t.name == args.tool), None
            )
            result = await client.call_tool(args.tool, json.loads(args.arguments))
            out.update(ok=True, result=result.model_dump(mode="json", by_alias=True, exclude_none=True))
    except Exception as error:  # noqa: BLE001 - recorded for the Rust test to judge
        out.update(ok=False, error="; ".join(f"{type(e).__name__}: {e}" for e in leaves(error)))
    return out


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds (the task groups of the SDK wrap what it
    raised), or the one exception."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def main() -> None:
    args = parse_args()
    summary: dict[str, Any] = {}
    with anyio.fail_after(args.deadline):
        for mode in args.modes.split(","):
            summary[mode] = await call(args, mode)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
