"""The official Python SDK client (`mcp` 2.3.0) in front of `mcp-supervisor wrap --url URL` on
stdio, for the conformance scenarios that need a client with callbacks or with methods the CLI
does not offer. Run by adapter.py; the supervisor relays, this client answers.

Usage: wrapped_client.py SCENARIO [--mode legacy|auto] -- COMMAND ARGS...

It asserts nothing (the suite judges what reached its server); it exits non-zero with the error
on stderr when a step fails. The whole run is bounded.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

READ_TIMEOUT_S = 20.0
DEADLINE_S = 40.0


def with_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """An answer that takes every default the requested schema offers (SEP-1034)."""
    properties = schema.get("properties") or {}
    return {name: spec["default"] for name, spec in properties.items() if "default" in spec}


async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    schema = getattr(params, "requested_schema", None) or {}
    if not isinstance(schema, dict):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    content = with_defaults(schema)
    # A boolean confirmation with no default is accepted.
    for name, spec in (schema.get("properties") or {}).items():
        if name not in content and spec.get("type") == "boolean":
            content[name] = True
    return types.ElicitResult(action="accept", content=content)


async def all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def step(what: str, action: Any) -> Any:
    try:
        return await action
    except Exception as e:  # the suite judges; a failed step must not hide the next ones
        print(f"wrapped_client: {what} failed: {e!r}", file=sys.stderr, flush=True)
        return None


async def run(scenario: str, mode: str, argv: list[str]) -> None:
    server = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(
        server,
        mode=mode,
        cache=None,
        read_timeout_seconds=READ_TIMEOUT_S,
        elicitation_callback=elicitation,
    ) as client:
        tools = await all_tools(client)
        if scenario == "http-standard-headers":
            for tool in tools:
                await step(f"call {tool.name}", client.call_tool(tool.name, {}))
            resources = await step("resources/list", client.list_resources())
            for resource in (resources.resources if resources else [])[:1]:
                await step("resources/read", client.read_resource(str(resource.uri)))
            prompts = await step("prompts/list", client.list_prompts())
            for prompt in (prompts.prompts if prompts else [])[:1]:
                await step("prompts/get", client.get_prompt(prompt.name))
            return
        # Every other scenario: each listed tool once, in the server's order.
        for tool in tools:
            await step(f"call {tool.name}", client.call_tool(tool.name, {}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"])
    own, argv = sys.argv[1:], []
    if "--" in own:
        at = own.index("--")
        own, argv = own[:at], own[at + 1 :]
    args = parser.parse_args(own)
    if not argv:
        parser.error("give the command to wrap after --")

    async def bounded() -> None:
        with anyio.fail_after(DEADLINE_S):
            await run(args.scenario, args.mode, argv)

    anyio.run(bounded)


if __name__ == "__main__":
    main()
