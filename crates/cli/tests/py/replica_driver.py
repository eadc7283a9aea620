"""One official Python SDK client (`mcp` 2.3.0) calling through a load balancer in a steady loop,
for the replica tests (crates/cli/tests/replicas.rs).

It opens one client (with --mode legacy: one 2025-era session, `initialize` once and its
`Mcp-Session-Id` on every request after; with --mode auto: the 2026-07-28 era, no session), then
calls the non-idempotent `count` tool CALLS times, one at a time, INTERVAL ms apart, each with its
own id (PREFIX-N), and prints one JSON line per call as it ends ({"i", "ok", "error"}) and a
last line {"done": true, ...}. It asserts nothing itself: the Rust test reads the lines (and the
ledger the tool wrote) and decides. A call that fails does not stop the loop. Bounded by
--deadline, each request by the client's read timeout.

Usage: replica_driver.py --url URL --prefix P [--calls N] [--interval MS] [--mode legacy|auto]
                         [--tool-prefix T] [--deadline S]
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError

READ_TIMEOUT_S = 15.0


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)


async def run(args: argparse.Namespace) -> None:
    ok = 0
    failed = []
    async with Client(args.url, mode=args.mode, cache=None, read_timeout_seconds=READ_TIMEOUT_S) as client:
        emit({"connected": True, "protocol_version": client.protocol_version})
        for i in range(args.calls):
            started = time.monotonic()
            line: dict = {"i": i}
            try:
                result = await client.call_tool(args.tool_prefix + "count", {"id": f"{args.prefix}-{i}"})
                text = "".join(getattr(b, "text", "") for b in result.content)
                line["ok"] = not result.is_error and text == f"{args.prefix}-{i}"
                if not line["ok"]:
                    line["error"] = f"result: {text}"
            except MCPError as error:
                line.update(ok=False, error=f"{error.code}: {error.error.message}")
            except Exception as error:  # noqa: BLE001 - a transport failure is a failed call too
                line.update(ok=False, error=f"{type(error).__name__}: {error}")
            line["ms"] = round((time.monotonic() - started) * 1000)
            emit(line)
            if line["ok"]:
                ok += 1
            else:
                failed.append(i)
            await anyio.sleep(args.interval / 1000)
    emit({"done": True, "ok": ok, "failed": failed})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--interval", type=int, default=0)
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"])
    parser.add_argument("--tool-prefix", default="")
    parser.add_argument("--deadline", type=float, default=120.0)
    args = parser.parse_args()
    with anyio.fail_after(args.deadline):
        await run(args)


if __name__ == "__main__":
    anyio.run(main)
