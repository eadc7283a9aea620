"""Drives an MCP server with the official Python SDK client (`mcp` 2.3.0) and prints one JSON
summary on stdout for the Rust test (crates/cli/tests/interop_clients.rs) to assert on.

It asserts nothing itself: it records what it saw. Any exception makes it exit non-zero with the
traceback on stderr. Everything is bounded: the whole run by --deadline, each request by the
client's read timeout.

Usage:
    client_driver.py SCENARIO (--url URL | --stdio JSON_ARGV) [--env K=V]... [--mode legacy|auto]
                     [--prefix P] [--deadline SECONDS] [--metrics-url URL]

Scenarios:
    fault       list tools, echo, pid (the request id the server saw), sleep 500 ms with progress,
                cancel a hanging call, echo again
    everything  list tools, echo, get-sum, trigger-long-running-operation with progress
    crash       count tools/list_changed around a crash and reconnect, then a positive control
    describe    tool definitions, prompt names, resource URIs, serverInfo, an unknown tool's answer
    echo        list tools, then call echo twice (a strict server's tools through a proxy)
    burst       --calls calls of `sleep` (--sleep-ms) at once on one connection, then echo; each
                call's outcome (its text or its error) in the order sent
    callbacks   server-everything's requests to the client (roots/list, sampling/createMessage,
                elicitation/create), answered by this client's callbacks with --tag in each answer;
                with --no-capabilities it declares none (and has no callbacks)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Each request's own bound; the whole run is bounded by --deadline on top.
READ_TIMEOUT_S = 20.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "scenario", choices=["fault", "everything", "crash", "describe", "callbacks", "echo", "burst"]
    )
    parser.add_argument("--calls", type=int, default=300, help="burst: calls sent at once")
    parser.add_argument("--sleep-ms", type=int, default=1000, help="burst: each call's sleep")
    parser.add_argument("--tag", default="client", help="callbacks: this client's own value")
    parser.add_argument("--no-capabilities", action="store_true", help="callbacks: declare none")
    parser.add_argument("--url", help="streamable HTTP endpoint")
    parser.add_argument("--stdio", help="JSON list: the command to spawn and talk to over stdio")
    parser.add_argument("--env", action="append", default=[], help="K=V for the stdio child")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"])
    parser.add_argument("--prefix", default="", help="prepended to every tool name called")
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--metrics-url", help="fault: read the proxy's /metrics at the end")
    args = parser.parse_args()
    if (args.url is None) == (args.stdio is None):
        parser.error("give exactly one of --url and --stdio")
    return args


def make_client(args: argparse.Namespace, **kwargs: Any) -> Client:
    if args.url is not None:
        server: Any = args.url
    else:
        argv = json.loads(args.stdio)
        env = dict(item.split("=", 1) for item in args.env)
        server = StdioServerParameters(command=argv[0], args=argv[1:], env=env or None)
    # No response cache: every list must reach the server.
    return Client(server, mode=args.mode, cache=None, read_timeout_seconds=READ_TIMEOUT_S, **kwargs)


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5.0) as response:
        return response.read().decode()


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content if getattr(block, "type", "") == "text")


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def header(client: Client) -> dict[str, Any]:
    info = client.server_info
    return {
        "protocol_version": client.protocol_version,
        "server_name": info.name if info is not None else None,
        "server_version": info.version if info is not None else None,
    }


async def timed_call(client: Client, name: str, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """One call, recorded whatever happens: text, isError, or the error it raised."""
    started = time.monotonic()
    out: dict[str, Any] = {"name": name}
    try:
        result = await client.call_tool(name, arguments, **kwargs)
        out.update(ok=True, text=text_of(result), is_error=bool(result.is_error))
        if result.structured_content is not None:
            out["structured"] = result.structured_content
    except MCPError as error:
        out.update(ok=False, error_code=error.code, error=error.error.message)
    out["elapsed_ms"] = round((time.monotonic() - started) * 1000)
    return out


class ProgressLog:
    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append({"progress": progress, "total": total, "message": message})


async def cancel_after(client: Client, name: str, arguments: dict[str, Any], after_s: float) -> dict[str, Any]:
    """Start a call, cancel it (the caller's cancel scope) after `after_s`; how did it end?"""
    started = time.monotonic()
    out: dict[str, Any] = {"name": name}
    with anyio.move_on_after(after_s) as scope:
        try:
            result = await client.call_tool(name, arguments)
            out.update(outcome="result", text=text_of(result), is_error=bool(result.is_error))
        except MCPError as error:
            out.update(outcome="error", error_code=error.code, error=error.error.message)
    if scope.cancelled_caught:
        out["outcome"] = "cancelled"
    out["elapsed_ms"] = round((time.monotonic() - started) * 1000)
    return out


async def scenario_fault(args: argparse.Namespace) -> dict[str, Any]:
    p = args.prefix
    async with make_client(args) as client:
        out = header(client)
        out["tools"] = [t.name for t in await all_tools(client)]
        out["echo"] = await timed_call(client, p + "echo", {"message": "hello interop"})
        # The request id the fault server saw shows which way the proxy relayed the call.
        out["pid"] = await timed_call(client, p + "pid", {})
        progress = ProgressLog()
        out["sleep"] = await timed_call(client, p + "sleep", {"ms": 500}, progress_callback=progress)
        out["sleep"]["progress"] = progress.values
        out["cancel"] = await cancel_after(client, p + "hang", {}, 0.3)
        out["echo_after_cancel"] = await timed_call(client, p + "echo", {"message": "still here"})
        if args.metrics_url:
            # The proxy's own count of cancelled calls: did our cancel reach it? (A stdio proxy
            # is gone once we exit, so we read it for the test.)
            await anyio.sleep(0.3)
            out["metrics"] = await anyio.to_thread.run_sync(fetch_text, args.metrics_url)
        return out


async def scenario_echo(args: argparse.Namespace) -> dict[str, Any]:
    p = args.prefix
    async with make_client(args) as client:
        out = header(client)
        out["tools"] = [t.name for t in await all_tools(client)]
        out["echo"] = await timed_call(client, p + "echo", {"message": "strict one"})
        out["echo_again"] = await timed_call(client, p + "echo", {"message": "strict two"})
        return out


async def scenario_everything(args: argparse.Namespace) -> dict[str, Any]:
    p = args.prefix
    async with make_client(args) as client:
        out = header(client)
        out["tools"] = [t.name for t in await all_tools(client)]
        out["echo"] = await timed_call(client, p + "echo", {"message": "hello everything"})
        out["sum"] = await timed_call(client, p + "get-sum", {"a": 2, "b": 3})
        progress = ProgressLog()
        out["long"] = await timed_call(
            client,
            p + "trigger-long-running-operation",
            {"duration": 0.6, "steps": 3},
            progress_callback=progress,
        )
        out["long"]["progress"] = progress.values
        return out


async def scenario_crash(args: argparse.Namespace) -> dict[str, Any]:
    p = args.prefix
    # tools/list_changed as the session delivers it (legacy sessions; rmcp over stdio too)...
    list_changed: list[float] = []
    # ...and as `subscriptions/listen` events (how 2026-07-28 clients are meant to get it).
    listen_events: list[float] = []
    started = time.monotonic()

    def since() -> float:
        return round(time.monotonic() - started, 3)

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            list_changed.append(since())

    async with make_client(args, message_handler=on_message) as client:
        async with AsyncExitStack() as stack:
            out = header(client)
            sub = None
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                sub = await stack.enter_async_context(client.listen(tools_list_changed=True))
            async with anyio.create_task_group() as tg:
                if sub is not None:

                    async def pump() -> None:
                        async for _event in sub:
                            listen_events.append(since())

                    tg.start_soon(pump)
                out.update(await crash_body(client, p, [list_changed, listen_events]))
                tg.cancel_scope.cancel()
        out["list_changed"] = list_changed
        out["listen_events"] = listen_events
        out["listening"] = sub is not None
        return out


async def crash_body(client: Client, p: str, logs: list[list[float]]) -> dict[str, Any]:
    """Crash the server, use it again, then change its tools; note when notifications came."""

    def count() -> int:
        return sum(len(log) for log in logs)

    out: dict[str, Any] = {}
    out["tools_before"] = sorted(t.name for t in await all_tools(client))
    out["pid_before"] = await timed_call(client, p + "pid", {})
    # Notifications of the start (the server came up after we initialized) settle first.
    await anyio.sleep(0.5)
    mark_crash = [len(log) for log in logs]
    out["crash"] = await timed_call(client, p + "crash", {})
    # The server exits 25 ms after its reply: let it die, so the next call needs a reconnect.
    await anyio.sleep(0.3)
    out["echo_after_crash"] = await timed_call(client, p + "echo", {"message": "after crash"})
    out["pid_after"] = await timed_call(client, p + "pid", {})
    # Give late notifications (the reconnect settling) time to arrive before counting.
    await anyio.sleep(1.5)
    out["tools_after"] = sorted(t.name for t in await all_tools(client))
    # Per delivery path: how many arrived between the crash and now.
    out["after_crash"] = [len(log) - m for log, m in zip(logs, mark_crash)]
    # Positive control: a real change of the tool list must be announced, so a count of 0
    # above means "none sent", not "this client never sees them".
    mark_control = [len(log) for log in logs]
    before = count()
    out["set_tools"] = await timed_call(client, p + "set_tools", {"tools": ["extra_tool"]})
    with anyio.move_on_after(3.0):
        while count() == before:
            await anyio.sleep(0.05)
    # Duplicates, if any, arrive together: wait a little for them.
    await anyio.sleep(0.5)
    out["after_control"] = [len(log) - m for log, m in zip(logs, mark_control)]
    return out


async def scenario_describe(args: argparse.Namespace) -> dict[str, Any]:
    async with make_client(args) as client:
        out = header(client)
        out["instructions"] = client.instructions
        out["capabilities"] = dump(client.server_capabilities)
        out["tools"] = {t.name: dump(t) for t in await all_tools(client)}
        out["prompts"] = sorted(pr.name for pr in (await client.list_prompts()).prompts)
        out["resources"] = [r.uri for r in (await client.list_resources()).resources]
        out["unknown_tool"] = await timed_call(client, args.prefix + "no-such-tool-xyz", {"x": 1})
        out["unknown_prompt"] = await get_prompt(client, "no-such-prompt-xyz")
        # server-everything's argument-free prompt (answered with an error elsewhere: still compared).
        out["simple_prompt"] = await get_prompt(client, "simple-prompt")
        return out


async def get_prompt(client: Client, name: str) -> dict[str, Any]:
    """One prompts/get, recorded whatever happens: its messages' text or the error."""
    try:
        result = await client.get_prompt(name)
        texts = [getattr(m.content, "text", None) for m in result.messages]
        return {"ok": True, "messages": texts}
    except MCPError as error:
        return {"ok": False, "error_code": error.code, "error": error.error.message}


async def scenario_callbacks(args: argparse.Namespace) -> dict[str, Any]:
    tag = args.tag
    asked: list[str] = []

    async def roots(context: Any) -> types.ListRootsResult:
        asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{tag}", name=tag)])

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append("sampling/createMessage")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled by {tag}"),
            model="driver-model",
            stop_reason="endTurn",
        )

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append("elicitation/create")
        return types.ElicitResult(action="accept", content={"name": tag, "check": True, "color": "blue"})

    callbacks: dict[str, Any] = {}
    if not args.no_capabilities:
        callbacks = {"list_roots_callback": roots, "sampling_callback": sampling, "elicitation_callback": elicitation}
    async with make_client(args, **callbacks) as client:
        out = header(client)
        want = args.prefix + "trigger-elicitation-request"
        names: list[str] = []
        for _ in range(100):
            names = [t.name for t in await all_tools(client)]
            if want in names:
                break
            await anyio.sleep(0.1)
        out["tools"] = names
        # server-everything asks a client with roots for them once it is initialized (through
        # serve: when told the roots changed); a 2025-era client waits (bounded) for its roots.
        out["roots"] = await timed_call(client, args.prefix + "get-roots-list", {})
        for _ in range(40):
            if args.mode != "legacy" or args.no_capabilities or f"file:///{tag}" in out["roots"].get("text", ""):
                break
            await anyio.sleep(0.25)
            out["roots"] = await timed_call(client, args.prefix + "get-roots-list", {})
        out["sampling"] = await timed_call(
            client, args.prefix + "trigger-sampling-request", {"prompt": "hello", "maxTokens": 5}
        )
        out["elicitation"] = await timed_call(client, args.prefix + "trigger-elicitation-request", {})
        out["asked"] = asked
        return out


async def scenario_burst(args: argparse.Namespace) -> dict[str, Any]:
    p = args.prefix
    outcomes: list[dict[str, Any]] = [{} for _ in range(args.calls)]
    async with make_client(args) as client:
        out = header(client)

        async def one(i: int) -> None:
            try:
                result = await client.call_tool(p + "sleep", {"ms": args.sleep_ms})
                outcomes[i] = {"ok": not result.is_error, "text": text_of(result)}
            except MCPError as error:
                outcomes[i] = {"ok": False, "code": error.code, "error": error.error.message}
            except Exception as error:  # noqa: BLE001 - recorded for the Rust test to judge
                outcomes[i] = {"ok": False, "error": f"{type(error).__name__}: {error}"}

        async with anyio.create_task_group() as group:
            for i in range(args.calls):
                group.start_soon(one, i)
        out["outcomes"] = outcomes
        out["echo_after"] = await timed_call(client, p + "echo", {"message": "after the burst"})
        return out


SCENARIOS = {
    "burst": scenario_burst,
    "callbacks": scenario_callbacks,
    "fault": scenario_fault,
    "everything": scenario_everything,
    "crash": scenario_crash,
    "describe": scenario_describe,
    "echo": scenario_echo,
}


async def main() -> None:
    args = parse_args()
    with anyio.fail_after(args.deadline):
        summary = await SCENARIOS[args.scenario](args)
    summary["scenario"] = args.scenario
    summary["mode"] = args.mode
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
